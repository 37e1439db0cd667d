/* spec/scheduler.py's waiting pass in C: schedule_waiting over kv_holding_waiting, then waiting,
 * with waiting_skip's skips in the spec's (vLLM's Scheduler.schedule) order. */
#include <string.h>
#include "compiled.h"

enum { SKIP_NONE = 0, SKIP_TO_WAITING = 1, SKIP_TO_KV_HOLDING = 2, STOP_PASS = 3 };

/* scheduler.waiting_skip */
static int waiting_skip(const Cfg *cfg, Draft *d, int r) {
    if (!ready_to_schedule(cfg, d, r)) return SKIP_TO_KV_HOLDING;
    const Ctr *c = &d->s.c[r];
    if (c->status == WAITING_FOR_STREAMING_REQ) {  /* streaming.paused: blocked until its next input */
        EMIT(d, EV_STREAM_PAUSED_SKIP);
        return holds_kv_blocks(&d->s, r) ? SKIP_TO_KV_HOLDING : SKIP_TO_WAITING;
    }
    if (c->X > 0 && !c->D) {  /* request.stale_output_blocks_resume */
        EMIT(d, EV_STALE_RESUME_SKIP);
        return holds_kv_blocks(&d->s, r) ? SKIP_TO_KV_HOLDING : SKIP_TO_WAITING;
    }
    if (cfg->offload && c->status != WAITING_FOR_REMOTE_KVS && pending_jobs(&d->s, r)) {  /* offload.lookup_delayed */
        EMIT(d, EV_OFFLOAD_LOOKUP_DELAYED);
        return SKIP_TO_WAITING;
    }
    if (starts_load(cfg, &d->s, r)) return admit_async_load(cfg, d, r) ? SKIP_TO_KV_HOLDING : STOP_PASS;
    return SKIP_NONE;
}

/* scheduler.requeue_skipped: each skipped list back at the front of its queue */
static void requeue(uint8_t *q, uint8_t *n, const uint8_t *skipped, int nskip) {
    memmove(q + nskip, q, *n);
    memcpy(q, skipped, (size_t)nskip);
    *n = (uint8_t)(*n + nskip);
}

/* scheduler.schedule_waiting (with waiting_num_new_tokens, allocate_waiting and admit_waiting) */
void schedule_waiting(const Cfg *cfg, Draft *d, int budget, Out *out, int threshold) {
    St *s = &d->s;
    uint8_t skip_w[MAXR], skip_kv[MAXR];
    int nskip_w = 0, nskip_kv = 0;
    int running_scheduled = out->n > 0, prefill_scheduled = 0;
    for (int k = 0; k < out->n; k++) prefill_scheduled |= s->c[out->req[k]].chunk;
    while ((s->nkv || (s->pause_state == UNPAUSED && s->nwait)) && budget > 0
           && s->nrun + num_paused_sessions(s) < cfg->max_seqs) {  /* streaming.num_active */
        int from_kv = s->nkv > 0;
        uint8_t *queue = from_kv ? s->kv : s->wait, *qn = from_kv ? &s->nkv : &s->nwait;
        int r = queue[0];
        int skip = waiting_skip(cfg, d, r);
        if (skip == STOP_PASS) break;
        if (skip != SKIP_NONE) {
            if (skip == SKIP_TO_KV_HOLDING) skip_kv[nskip_kv++] = (uint8_t)r;
            else skip_w[nskip_w++] = (uint8_t)r;
            list_remove_at(queue, qn, 0);
            continue;
        }
        Ctr c = s->c[r];
        uint8_t hit[MAXB]; int nhit = c.C ? 0 : longest_cache_hit(cfg, s, r, hit), state;
        nhit = mamba_cut_hit(cfg, d, r, nhit, &state);
        uint8_t swa_hit[MAXB]; int nswa;
        nhit = swa_cut_hit(cfg, s, r, nhit, swa_hit, &nswa);
        int hit_tokens = nhit * cfg->bs;
        int n = num_tokens(cfg, r, &c) - hit_tokens - c.C;
        int padded = cfg->k > 0 && n == 1 && !prefill_scheduled && (running_scheduled || hit_tokens > 0);
        if (padded) { n = 1 + cfg->k; if (n > budget) break; }  /* scheduler.pads_spec_decode */
        int capped = cap_long_prefill(n, threshold);  /* scheduler.waiting_num_new_tokens */
        if (capped < imin(n, budget)) EMIT(d, EV_LONG_PREFILL_CAPPED);
        if (!cfg->chunked && capped > budget) break;
        n = imin(capped, budget);
        n = aligned_split(cfg, d, r, c.C + hit_tokens, n);
        check_aligned(cfg, d, r, c.C + hit_tokens, n);
        if (n == 0) { EMIT(d, EV_MAMBA_SPLIT_STOPS_PASS); break; }
        int to_compute, enc_budget;
        n = encoder_try_schedule(cfg, d, r, c.C + hit_tokens, n, &to_compute, &enc_budget);
        if (n == 0) {  /* skip_request: the requests behind it may still go */
            if (holds_kv_blocks(s, r)) skip_kv[nskip_kv++] = (uint8_t)r;
            else skip_w[nskip_w++] = (uint8_t)r;
            list_remove_at(queue, qn, 0);
            continue;
        }
        int full = num_tokens(cfg, r, &c);  /* blocks.admission_fits */
        int states = mamba_blocks_needed(cfg, s, r, full, state != NULL_BLK ? nhit : 0) + (state != NULL_BLK);
        int ok = !cfg->full_isl || imax(blocks_for(cfg, full) - s->btn[r], 0) + swa_admission_blocks(cfg, s, r, full, swa_hit, nswa)
                 + states <= s->nfree;
        ok = ok && (c.C ? allocate_slots(cfg, d, r, n) : admit_with_hit(cfg, s, r, hit, nhit, n, state, swa_hit, nswa));
        if (!ok) { encoder_free_request(cfg, d, r); break; }
        if (nhit) EMIT(d, EV_PREFIX_CACHE_HIT);
        list_remove_at(queue, qn, 0);
        s->run[s->nrun++] = (uint8_t)r;  /* admit_waiting */
        Ctr *a = &s->c[r];
        *a = c;
        a->status = RUNNING;
        if (!c.C) { a->C = (int16_t)hit_tokens; a->cached = (int16_t)imax(c.cached, hit_tokens); }
        if (padded) a->S = (int16_t)cfg->k;
        encoder_commit(cfg, d, r, to_compute, enc_budget);
        out->req[out->n] = (uint8_t)r; out->tok[out->n] = (int16_t)n; out->padded[out->n] = (uint8_t)padded; out->n++;
        budget -= n;
    }
    requeue(s->kv, &s->nkv, skip_kv, nskip_kv);
    requeue(s->wait, &s->nwait, skip_w, nskip_w);
    order_queues(cfg, s);
}
