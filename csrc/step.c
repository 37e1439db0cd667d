/* spec/engine.py, spec/scheduler.py, spec/output.py, spec/blocks.py and spec/request.py, in C,
 * for the configs checker/compiled.py covers.  Each function names the spec function it mirrors;
 * the order of every loop and of every list edit is the spec's. */
#include <string.h>
#include "compiled.h"

static void list_insert_front(uint8_t *a, uint8_t *n, int v) {
    memmove(a + 1, a, *n);
    a[0] = (uint8_t)v;
    (*n)++;
}

/* request.cached_frontier, on counters c (num_cached_tokens = base) */
static int cached_frontier(const Cfg *cfg, int r, const Ctr *c, int base, int upto) {
    if (!cfg->prefix) return base;
    int limit = imin(upto, num_tokens(cfg, r, c));
    return imax(base, limit / cfg->bs * cfg->bs);
}

/* policy.preemption_victim: the last running request, or the largest (priority, arrival) */
static int preemption_victim(const Cfg *cfg, const St *s) {
    int v = s->run[s->nrun - 1];
    if (cfg->priority)
        for (int i = 0; i < s->nrun; i++) if (cfg->rank[s->run[i]] > cfg->rank[v]) v = s->run[i];
    return v;
}

/* policy.long_prefill_threshold and cap_long_prefill */
static int long_prefill_threshold(const Cfg *cfg, const St *s) {
    int eligible = s->nrun + s->nwait + s->nkv;
    if (cfg->lp_threshold <= 0 || eligible <= 1) return 0;
    return cfg->lp_adaptive ? imax(cfg->lp_threshold, cfg->budget / eligible) : cfg->lp_threshold;
}

/* request.preempt + scheduler.preempt_request */
static void preempt_request(const Cfg *cfg, Draft *d, int v, int drop) {
    Ctr c = d->s.c[v];
    if (c.F > 0) EMIT(d, drop ? EV_PREEMPT_DROP : EV_PREEMPT_DELIVER);
    EMIT(d, EV_PREEMPTION);
    free_request_blocks(cfg, d, v);
    offload_preempted(cfg, d, v);
    encoder_free_request(cfg, d, v);
    Ctr *n = &d->s.c[v];
    *n = c;
    n->status = PREEMPTED; n->C = 0; n->H = 0; n->X = c.F;
    n->D = (uint8_t)(drop || (c.D && c.X > 0));
    n->cached = 0; n->ocached = 0; n->S = 0;
    list_insert_front(d->s.wait, &d->s.nwait, v);
    order_queues(cfg, &d->s);
}

/* output.free_finished: unless the connector keeps the blocks (orphan: its load is pending) */
void free_finished(const Cfg *cfg, Draft *d, int r, int orphan) {
    St *s = &d->s;
    s->finished_pending = 1;
    list_drop(s->run, &s->nrun, r);
    list_drop(s->wait, &s->nwait, r);
    list_drop(s->kv, &s->nkv, r);
    offload_request_finished(cfg, s, r);
    if (!keeps_blocks(cfg, d, r, orphan)) free_request_blocks(cfg, d, r);
    encoder_free_request(cfg, d, r);
}

/* scheduler._allocate_or_preempt (FCFS): returns ok; *before, *returned as the spec's */
static int allocate_or_preempt(const Cfg *cfg, Draft *d, int r, int n, int *npre, Out *out,
                               int *before, int *returned) {
    St *s = &d->s;
    *before = *returned = 0;
    for (;;) {
        if (allocate_slots(cfg, d, r, n)) return 1;
        int victim = preemption_victim(cfg, s);
        if (!can_be_freed(cfg, s, victim)) return 0;
        int index = list_index(s->run, s->nrun, victim);
        if (index != s->nrun - 1) EMIT(d, EV_PRIORITY_PREEMPTION);
        *before += index < list_index(s->run, s->nrun, r);
        list_remove_at(s->run, &s->nrun, index);
        for (int k = 0; k < out->n; k++) {
            if (out->req[k] == victim) {
                EMIT(d, EV_PREEMPTED_SCHEDULED_UNDONE);
                *returned += out->tok[k];
                memmove(out->req + k, out->req + k + 1, (size_t)(out->n - k - 1));
                memmove(out->tok + k, out->tok + k + 1, sizeof(int16_t) * (size_t)(out->n - k - 1));
                memmove(out->padded + k, out->padded + k + 1, (size_t)(out->n - k - 1));
                out->n--;
                encoder_undo(cfg, d, victim);
                break;
            }
        }
        preempt_request(cfg, d, victim, cfg->drop);
        (*npre)++;
        if (victim == r) return 0;
    }
}

/* scheduler.schedule_running */
static int schedule_running(const Cfg *cfg, Draft *d, int budget, Out *out, int *npre, int threshold) {
    St *s = &d->s;
    int i = 0;
    while (i < s->nrun && budget > 0) {
        int r = s->run[i];
        Ctr *c = &s->c[r];
        if (c->H > 0 && c->C + 2 - c->H >= c->P + c->M) {  /* request.max_tokens_guard */
            EMIT(d, EV_MAX_TOKENS_GUARD);
            i++;
            continue;
        }
        if (c->dwait > 0) { i++; continue; }
        int wanted = num_tokens(cfg, r, c) + c->S + c->H - c->C;
        int n = imin(cap_long_prefill(wanted, threshold), budget);
        if (n < imin(wanted, budget)) EMIT(d, EV_LONG_PREFILL_CAPPED);
        if (cfg->mml >= 0 && cfg->mml - c->C - 1 < n) {  /* policy.cap_model_len */
            n = cfg->mml - c->C - 1;
            EMIT(d, EV_MODEL_LEN_CAPPED);
        }
        n = aligned_split(cfg, d, r, c->C, n);  /* before the encoder cut */
        check_aligned(cfg, d, r, c->C, n);
        int to_compute = 0, enc_budget = 0;
        if (n > 0) n = encoder_try_schedule(cfg, d, r, c->C, n, &to_compute, &enc_budget);
        if (n <= 0) { i++; continue; }
        int before, returned;
        int ok = allocate_or_preempt(cfg, d, r, n, npre, out, &before, &returned);
        i -= before;
        budget += returned;
        if (!ok) {
            if (cfg->priority && s->c[r].status == PREEMPTED) continue;  /* it preempted itself */
            break;
        }
        encoder_commit(cfg, d, r, to_compute, enc_budget);
        out->req[out->n] = (uint8_t)r; out->tok[out->n] = (int16_t)n; out->padded[out->n] = 0; out->n++;
        budget -= n;
        i++;
    }
    return budget;
}

/* request.after_schedule + scheduler._entry */
static void make_entry(const Cfg *cfg, Draft *d, int r, int n, int padded, Entry *e) {
    St *s = &d->s;
    Ctr before = s->c[r], *c = &s->c[r];
    if (s->kvt[r] == KV_PROMOTED) s->kvt[r] = KV_DONE;  /* connector.scheduled */
    int computed = before.C + n;
    int chunk = computed < num_tokens(cfg, r, &before) + before.H;
    int async = cfg->async_sched;
    int drafts = imax(0, imin(n + before.C - num_tokens(cfg, r, &before) - before.H, before.S));
    if (async && !chunk) c->H = (int16_t)(before.H + 1 + drafts);
    c->S = (int16_t)(async && !chunk ? cfg->k : 0);
    if (async && !chunk && cfg->stagger > 1) c->dwait = (int16_t)cfg->stagger;
    c->cached = (int16_t)cached_frontier(cfg, r, &before, before.cached, computed);
    c->C = (int16_t)computed;
    c->F = (int16_t)(before.F + n);
    if (cfg->defer) c->L = s->qseq;
    c->chunk = (uint8_t)chunk;
    record_hashes(cfg, s, r, before.cached);
    int first = before.C, last = computed - 1;
    e->req = (uint8_t)r; e->ntok = (int16_t)n; e->start = (int16_t)first;
    e->nw = (uint8_t)py_slice(s->bt[r], s->btn[r], first / cfg->bs, last / cfg->bs + 1, e->w);
    e->ndraft = (int16_t)drafts; e->padded = (uint8_t)(padded && drafts > 0);
    e->spos = 0;
    if (!chunk) e->spos = (int16_t)(computed - drafts - before.P + 1);
    else EMIT(d, EV_CHUNKED_PREFILL);
    mamba_state_blocks(cfg, s, r, first, computed, e);
}

/* request.grammar_bitmask + scheduler.sample: bitmasks, then the step joins the batch queue */
static void sample(const Cfg *cfg, St *s, const StepC *step) {
    for (int k = 0; k < step->n; k++) {
        const Entry *e = &step->e[k];
        Ctr *c = &s->c[e->req];
        if (e->spos && cfg->structured[e->req] && !is_finished(c) && c->O < e->spos - 1) c->gap = 1;
    }
    s->bq[s->nbq++] = *step;
}

/* scheduler.record_pause_breach: from the call's input pause state and waiting queue */
static void record_pause_breach(St *s, int paused, const uint8_t *wait, int nwait, const Out *out) {
    if (paused == PAUSED_ALL && out->n) s->pause_breached = 1;
    for (int k = 0; paused == PAUSED_NEW && k < out->n; k++)
        if (list_index(wait, nwait, out->req[k]) >= 0) s->pause_breached = 1;
}

/* scheduler.schedule (with step_budget, waiting_pass_allowed, call_goes_on and sample) */
static void schedule(const Cfg *cfg, Draft *d) {
    St *s = &d->s;
    int paused = s->pause_state, nwait = s->nwait;
    uint8_t wait[MAXR];
    memcpy(wait, s->wait, sizeof wait);
    St in;  /* the call's input state, which the offloading connector's metadata reads */
    if (cfg->offload) in = *s;
    if (cfg->async_sched && cfg->stagger > 1)
        for (int r = 0; r < cfg->n; r++) s->c[r].dwait = (int16_t)imax(s->c[r].dwait - 1, 0);
    Out out = {0};
    int npre = 0;
    int threshold = long_prefill_threshold(cfg, s);
    encoder_new_pass(cfg, d);
    int budget = schedule_running(cfg, d, paused == PAUSED_ALL ? 0 : cfg->budget, &out, &npre, threshold);
    if (!npre && paused != PAUSED_ALL) schedule_waiting(cfg, d, budget, &out, threshold);
    record_pause_breach(s, paused, wait, nwait, &out);
    int seq = 0;
    if (cfg->defer && out.n) { s->qseq++; seq = s->qseq; }
    if (cfg->offload) build_connector_meta(cfg, &in, d, &out);
    StepC step;
    step.n = (uint8_t)out.n; step.seq = (int16_t)seq;
    int pending = 0;
    for (int k = 0; k < out.n; k++) {
        int r = out.req[k], had = s->c[r].H > 0;
        make_entry(cfg, d, r, out.tok[k], out.padded[k], &step.e[k]);
        pending |= cfg->async_sched && step.e[k].spos && cfg->structured[r] && had;  /* request.defers_sampling */
    }
    if (cfg->offload) check_store_reads(cfg, &in, s, &step);
    s->finished_pending = 0;
    encoder_finish_step(cfg, d, &step);
    if (!out.n) EMIT(d, EV_EMPTY_STEP);
    if (pending) {
        s->defstep = step; s->has_def = 1;
        EMIT(d, EV_STRUCTURED_DEFERRAL);
    } else {
        sample(cfg, s, &step);
    }
    if (cfg->loop_free) s->call_in_progress = 0;
    else if (s->has_def || s->nbq >= cfg->depth) s->call_in_progress = 1;
    else s->call_in_progress = !(out.n || has_requests(s));
}

/* request.first_stop + request.deliver_tokens (no max_model_len) */
static void deliver(const Cfg *cfg, const St *s, int r, Ctr *c, int stale, int position, int accepted) {
    const Ctr old = *c;
    int count = accepted + 1, eos = s->eos[r];
    int eos_here = eos > 0 && eos >= position && eos <= position + count - 1;
    int i_eos = eos_here ? eos - position + 1 : count + 1;
    int limit = cfg->mml < 0 ? old.M : imin(old.M, cfg->mml - old.P);
    int i_len = imax(limit - old.O, 1);
    if (i_len > count) i_len = count + 1;
    int i_stop = imin(i_eos, i_len), by_eos = eos_here && i_eos <= i_len;
    int stops = i_stop <= count, appended_count = stops ? i_stop : count;
    int fresh = !stale, had = old.H > 0, was_running = old.status == RUNNING;
    int trimmed = count - appended_count;
    Ctr a = old;
    a.O = (int16_t)(old.O + appended_count);
    if (fresh) a.C = (int16_t)(old.C - trimmed);
    int cache_now = fresh && was_running && (had || cfg->k > 0);
    int processed = a.C - a.F;
    c->O = a.O; c->C = a.C;
    c->cached = (int16_t)(cache_now ? cached_frontier(cfg, r, &a, old.cached, processed) : old.cached);
    c->ocached = (int16_t)(cache_now ? cached_frontier(cfg, r, &a, old.ocached, processed) : old.ocached);
    if (stops) c->status = by_eos ? F_STOPPED : F_LENGTH;
    if (fresh && had) c->H = (int16_t)(old.H - count);
    c->ooo = (uint8_t)(old.ooo || position != old.O + 1);
    if (!cfg->async_sched && fresh && was_running && !stops) c->S = (int16_t)cfg->k;
}

/* output._shifted over one step */
static void shift_step(const Cfg *cfg, const St *s, StepC *step, int r, int rejected) {
    for (int k = 0; k < step->n; k++) {
        Entry *e = &step->e[k];
        if (e->req != r) continue;
        int start = e->start - rejected, last = start + e->ntok - 1;
        e->start = (int16_t)start;
        e->spos = (int16_t)(e->spos ? e->spos - rejected : 0);
        e->nw = (uint8_t)py_slice(s->bt[r], s->btn[r], pyfloordiv(start, cfg->bs), pyfloordiv(last, cfg->bs) + 1, e->w);
    }
}

/* output.shift_in_flight */
static void shift_in_flight(const Cfg *cfg, St *s, int r, int rejected) {
    for (int q = 0; q < s->nbq; q++) shift_step(cfg, s, &s->bq[q], r, rejected);
    if (s->has_def) shift_step(cfg, s, &s->defstep, r, rejected);
}

/* output.process_entry (accepted = 0, no drafts) */
static void process_entry(const Cfg *cfg, Draft *d, const Entry *e, int accepted) {
    St *s = &d->s;
    int r = e->req;
    Ctr *c = &s->c[r];
    if (is_finished(c)) {
        if (held(cfg, s, r)) {  /* still in Scheduler.requests: its share drains (request.drain_in_flight) */
            if (c->X > 0) c->X = (int16_t)(c->X - e->ntok);
            c->F = (int16_t)(c->F - e->ntok);
        }
        int wastes = c->status == F_STOPPED || c->status == F_LENGTH || (c->status == F_ABORTED && c->abort_def);
        if (wastes) {
            c->wasted++;
            EMIT(d, EV_WASTED_STEP);
            if (c->status == F_ABORTED) EMIT(d, EV_DEFERRED_ABORT_WASTED_STEP);
        }
        return;
    }
    int stale = c->X > 0;  /* request.drain_in_flight */
    if (stale) c->X = (int16_t)(c->X - e->ntok);
    c->F = (int16_t)(c->F - e->ntok);
    if (stale && c->D) { EMIT(d, EV_STALE_DROP); return; }
    encoder_free_processed(cfg, d, r);  /* before this step's placeholder is taken off H */
    if (e->spos == 0) return;
    if (stale) EMIT(d, EV_STALE_DELIVERY);
    if (e->ndraft) {  /* request.reject_drafts */
        int rejected = e->ndraft - accepted;
        if (!stale && c->C > 0) c->C = (int16_t)(c->C - rejected);
        if (!stale && c->H > 0) c->H = (int16_t)(c->H - rejected);
        EMIT(d, rejected ? EV_SPEC_REJECTION : EV_SPEC_ALL_ACCEPTED);
        if (rejected) shift_in_flight(cfg, s, r, rejected);
    }
    int frontier = c->cached;
    deliver(cfg, s, r, c, stale, e->spos, accepted);
    if (cfg->abort_deferred && c->abort_def) {
        c->status = F_ABORTED;
        EMIT(d, EV_DEFERRED_ABORT_DELIVERY);
    }
    record_hashes(cfg, s, r, frontier);
    if (c->status == F_LENGTH && c->O < c->M) EMIT(d, EV_MODEL_LEN_CAPPED);
    if (is_finished(c) && !resumes_after_stop(cfg, d, r)) free_finished(cfg, d, r, 0);
}

/* output.update_from_output (with blocks.step_processed / drain_deferred_frees), the connector's
 * report `rep` riding on it */
static void update_from_output(const Cfg *cfg, Draft *d, const int *accepted, const Report *rep) {
    St *s = &d->s;
    s->call_in_progress = 0;
    StepC step = s->bq[0];
    memmove(s->bq, s->bq + 1, sizeof(StepC) * (size_t)(s->nbq - 1));
    s->nbq--;
    if (cfg->defer && step.n) {
        s->rseq++;
        while (s->ndf && s->df[0].fence <= s->rseq) {
            DFree e = s->df[0];
            memmove(s->df, s->df + 1, sizeof(DFree) * (size_t)(s->ndf - 1));
            s->ndf--;
            return_to_pool(s, e.f, e.nf, e.l, e.nl);
            EMIT(d, EV_DEFERRED_FREE_DRAINED);
        }
    }
    int error = failed_recving(cfg, d, rep);
    if (error < 0) error = invalid_blocks(cfg, d, rep);
    for (int k = 0; k < step.n; k++) process_entry(cfg, d, &step.e[k], accepted[k]);
    if (error >= 0) {  /* finish_requests(FINISHED_ERROR) */
        s->c[error].status = F_ERROR;
        free_finished(cfg, d, error, 1);
    }
    xfer_finished(cfg, d, rep);
    update_connector_output(cfg, d, rep);
    if (s->has_def) {
        StepC deferred = s->defstep;
        s->has_def = 0;
        sample(cfg, s, &deferred);
    }
}

/* output.takes_acceptance */
static int takes_acceptance(const St *s, const Entry *e) {
    const Ctr *c = &s->c[e->req];
    if (e->ndraft == 0 || e->padded || is_finished(c)) return 0;
    return !(c->X > 0 && c->D);
}

/* engine.abort */
static void abort_request(const Cfg *cfg, Draft *d, int r) {
    Ctr *c = &d->s.c[r];
    if (c->F > 0) EMIT(d, EV_ABORT_IN_FLIGHT);
    if (cfg->abort_deferred && c->status == RUNNING && !c->chunk) {
        c->abort_def = 1;
        EMIT(d, EV_ABORT_DEFERRED);
        return;
    }
    int orphan = load_pending(cfg, &d->s, r);
    c->status = F_ABORTED;
    free_finished(cfg, d, r, orphan);
}

/* engine.pause (pause_scheduler): abort mode aborts every unfinished request in index order */
static void pause(const Cfg *cfg, Draft *d, int mode) {
    St *s = &d->s;
    if (s->nbq || s->has_def) EMIT(d, EV_PAUSE_IN_FLIGHT);
    for (int r = 0; mode == PM_ABORT && r < cfg->n; r++) {
        const Ctr *c = &s->c[r];
        if (c->status != NOT_ARRIVED && !is_finished(c) && !c->abort_def) abort_request(cfg, d, r);
    }
    s->pause_state = mode == PM_KEEP ? PAUSED_ALL : PAUSED_NEW;
    s->pauses_left--;
}

/* engine.resume (resume_scheduler) */
static void resume(Draft *d) {
    if (d->s.nrun || d->s.nwait || d->s.nkv) EMIT(d, EV_RESUMED_HELD);
    d->s.pause_state = UNPAUSED;
}

/* engine.reset_prefix_cache */
static void reset_prefix_cache(const Cfg *cfg, Draft *d) {
    St *s = &d->s;
    s->fpl--;
    while (s->nrun) {
        int v = s->run[--s->nrun];
        preempt_request(cfg, d, v, 1);
    }
    if (s->nfree == cfg->nblocks) {
        memset(s->hreq, -1, sizeof s->hreq); memset(s->hidx, -1, sizeof s->hidx); memset(s->hgrp, 0, sizeof s->hgrp);
    } else {
        EMIT(d, EV_RESET_FAILED);
    }
}

static void push(Succ *out, int *k, const Draft *d, int action) {
    out[*k].s = d->s; out[*k].action = action; out[*k].events = d->ev;
    (*k)++;
}

/* engine.enabled_actions + engine.apply, in the spec's order */
int next_states(const Cfg *cfg, const St *s, Succ *out) {
    int k = 0;
    Draft d;
    int hr = has_requests(s);
    if (hr && s->nbq < cfg->depth && !s->has_def) {
        d.s = *s; d.ev = 0; schedule(cfg, &d);
        if (cfg->pauses && s->pause_state == PAUSED_NEW && s->nwait) EMIT(&d, EV_PAUSE_HELD_WAITING);  /* engine.pause_events */
        push(out, &k, &d, ACT_SCHEDULE);
    }
    if (s->nbq && (cfg->loop_free || s->has_def || s->nbq >= cfg->depth || !hr)) {
        /* engine.acceptance_choices: itertools.product over the entries that take acceptance,
         * each with every connector.report_choices */
        const StepC *st = &s->bq[0];
        int radix[MAXR], acc[MAXR] = {0}, choice = 0;
        Report reps[MAXREP];
        int nrep = report_choices(cfg, s, reps);
        for (int e = 0; e < st->n; e++) radix[e] = takes_acceptance(s, &st->e[e]) ? st->e[e].ndraft + 1 : 1;
        for (;;) {
            for (int q = 0; q < nrep; q++) {
                if (choice >= MAXUPD) return -1;
                d.s = *s; d.ev = 0; update_from_output(cfg, &d, acc, &reps[q]);
                if (cfg->pauses && s->pause_state != UNPAUSED) EMIT(&d, EV_PAUSED_OUTPUT);  /* engine.pause_events */
                push(out, &k, &d, ACT_UPDATE + choice++);
            }
            int e = st->n - 1;
            while (e >= 0 && ++acc[e] == radix[e]) acc[e--] = 0;
            if (e < 0) break;
        }
    }
    if (cfg->aborts) {
        for (int r = 0; r < cfg->n; r++) {
            const Ctr *c = &s->c[r];
            if (c->status != NOT_ARRIVED && !is_finished(c) && !c->abort_def) {
                d.s = *s; d.ev = 0; abort_request(cfg, &d, r); push(out, &k, &d, ACT_ABORT + r);
            }
        }
    }
    int boundary = cfg->loop_free || !s->call_in_progress;
    if (cfg->late && boundary) {
        for (int r = 0; r < cfg->n; r++) {
            if (s->c[r].status == NOT_ARRIVED) {
                d.s = *s; d.ev = 0;
                d.s.c[r].status = WAITING;
                d.s.wait[d.s.nwait++] = (uint8_t)r;
                order_queues(cfg, &d.s);
                push(out, &k, &d, ACT_ADD + r);
                break;
            }
        }
    }
    if (s->fpl > 0 && boundary) {
        d.s = *s; d.ev = 0; reset_prefix_cache(cfg, &d); push(out, &k, &d, ACT_RESET);
    }
    if (cfg->pauses && boundary) {  /* engine.pause_actions */
        if (s->pause_state != UNPAUSED) {
            d.s = *s; d.ev = 0; resume(&d); push(out, &k, &d, ACT_RESUME);
        } else if (s->pauses_left > 0) {
            for (int m = 0; m < cfg->npm; m++) {
                d.s = *s; d.ev = 0; pause(cfg, &d, cfg->pm[m]); push(out, &k, &d, ACT_PAUSE + cfg->pm[m]);
            }
        }
    }
    for (int i = 0; boundary && i < cfg->nsess; i++) {  /* a session's next input: the input queue */
        int r = cfg->sess[i];
        if (!next_input(cfg, s, r)) continue;
        d.s = *s; d.ev = 0; stream_input(cfg, &d, r); push(out, &k, &d, ACT_STREAM + r);
    }
    return k;
}
