/* spec/connector.py in C: a KV connector's scheduler half (asynchronous loads, failed loads,
 * invalid-block reports, sends that delay frees, aborts during a load).  Each function names
 * the spec function it mirrors; the vLLM functions are cited there
 * (vllm/v1/core/sched/scheduler.py: _update_waiting_for_remote_kv, _handle_failed_recving,
 * _handle_invalid_blocks, _update_from_kv_xfer_finished, _connector_finished). */
#include "compiled.h"

static int load_pending_transfer(int t) { return t == KV_LOADING || t == KV_FAILED; }  /* _LOAD_PENDING */

/* connector.external_tokens: P, or P - 1; the offloading connector: what it stored (offload.hit_tokens) */
static int external_tokens(const Cfg *cfg, const St *s, int r) {
    if (cfg->offload) return s->ostored[r] * cfg->bs;
    return s->c[r].P - (cfg->whole_prompt ? 0 : 1);
}

static int blocks_needed(const Cfg *cfg, const St *s, int r, int tokens) {
    return imax(blocks_for(cfg, tokens) - s->btn[r], 0);
}

/* connector.report_choices: nothing, or one transfer the worker knows of, in request order */
int report_choices(const Cfg *cfg, const St *s, Report *out) {
    int n = 0;
    out[n++] = (Report){REP_NONE, 0, 0};
    if (!cfg->connector) return n;
    for (int r = 0; r < cfg->n; r++) {
        int t = s->kvt[r];
        if (t == KV_LOADING || t == KV_ORPHAN) {  /* the offloading worker never fails a load */
            out[n++] = (Report){REP_RECV, (uint8_t)r, 0};
            if (!cfg->offload) out[n++] = (Report){REP_FAIL, (uint8_t)r, 0};
        }
        if (t == KV_LOADING && cfg->invalid) {
            for (int j = 0; j < blocks_for(cfg, s->c[r].C); j++) out[n++] = (Report){REP_INVALID, (uint8_t)r, (uint8_t)j};
        } else if (t == KV_SENDING) {
            out[n++] = (Report){REP_SENT, (uint8_t)r, 0};
        }
    }
    return n + offload_report_choices(cfg, s, out + n);
}

/* connector.holds_kv_blocks */
int holds_kv_blocks(const St *s, int r) { return s->c[r].C > 0 || s->c[r].status == WAITING_FOR_REMOTE_KVS; }

/* connector.ready_to_schedule: a loading request waits for finished_recving, then is promoted */
int ready_to_schedule(const Cfg *cfg, Draft *d, int r) {
    St *s = &d->s;
    Ctr *c = &s->c[r];
    if (c->status != WAITING_FOR_REMOTE_KVS) return 1;
    int t = s->kvt[r];
    if (t != KV_RECVD && t != KV_FAILED_RECVD) return 0;
    if (t == KV_FAILED_RECVD && c->C > 0) EMIT(d, EV_KV_PARTIAL_RECOMPUTE);
    if (c->C == 0) {
        uint8_t first[MAXB], last[MAXB];
        int nf, nl;
        split_by_hash(cfg, s, r, first, &nf, last, &nl);
        s->btn[r] = 0;
        return_to_pool(s, first, nf, last, nl);
    } else if (c->C == num_tokens(cfg, r, c)) {
        c->C--;
    }
    c->status = cfg->offload ? PREEMPTED : WAITING;  /* an offloading load follows a preemption */
    s->kvt[r] = KV_PROMOTED;
    return 1;
}

/* connector.starts_load */
int starts_load(const Cfg *cfg, const St *s, int r) {
    if (cfg->offload)
        return (s->kvt[r] == KV_NONE || s->kvt[r] == KV_DONE) && s->c[r].status != WAITING_FOR_REMOTE_KVS
               && s->c[r].C == 0 && external_tokens(cfg, s, r) > 0;
    return cfg->connector && (cfg->loads >> r & 1) && s->kvt[r] == KV_NONE && s->c[r].C == 0
           && external_tokens(cfg, s, r) > 0;
}

/* connector.inflight_prefill_reserved_blocks */
static int inflight_prefill_reserved_blocks(const Cfg *cfg, const St *s) {
    int total = 0;
    for (int r = 0; r < cfg->n; r++) {
        const Ctr *c = &s->c[r];
        int t = s->kvt[r];
        int loading = cfg->connector && t >= KV_LOADING && t <= KV_PROMOTED && !is_finished(c);
        if (loading || (c->status == RUNNING && c->chunk)) total += blocks_needed(cfg, s, r, num_tokens(cfg, r, c));
    }
    return total;
}

/* connector.admit_async_load */
int admit_async_load(const Cfg *cfg, Draft *d, int r) {
    St *s = &d->s;
    int external = external_tokens(cfg, s, r);
    if (cfg->full_isl && blocks_needed(cfg, s, r, num_tokens(cfg, r, &s->c[r])) > s->nfree) return 0;
    int need = blocks_needed(cfg, s, r, external);
    if (need > s->nfree - inflight_prefill_reserved_blocks(cfg, s)) return 0;
    take(s, r, need, 0);
    s->c[r].status = WAITING_FOR_REMOTE_KVS;
    s->c[r].C = (int16_t)external;
    s->kvt[r] = KV_LOADING;
    EMIT(d, cfg->offload ? EV_OFFLOAD_LOAD : EV_KV_ASYNC_LOAD);
    return 1;
}

/* connector.held */
int held(const Cfg *cfg, const St *s, int r) {
    return cfg->connector && (s->kvt[r] == KV_SENDING || s->kvt[r] == KV_ORPHAN);
}

/* connector.load_pending */
int load_pending(const Cfg *cfg, const St *s, int r) {
    return cfg->connector && s->c[r].status == WAITING_FOR_REMOTE_KVS && load_pending_transfer(s->kvt[r]);
}

/* connector.keeps_blocks */
int keeps_blocks(const Cfg *cfg, Draft *d, int r, int orphan) {
    St *s = &d->s;
    if (!cfg->connector) return 0;
    int t = s->kvt[r];
    if (orphan) {
        s->kvt[r] = KV_ORPHAN;
        EMIT(d, EV_KV_ABORT_DURING_LOAD);
        return 1;
    }
    if ((cfg->sends >> r & 1) && !load_pending_transfer(t) && s->c[r].C > 0) {
        s->kvt[r] = KV_SENDING;
        EMIT(d, EV_KV_SEND_DELAYED_FREE);
        return 1;
    }
    s->kvt[r] = KV_DONE;
    return 0;
}

/* connector.failed_recving: the request to finish with FINISHED_ERROR, or -1 */
int failed_recving(const Cfg *cfg, Draft *d, const Report *rep) {
    if (rep->kind != REP_FAIL) return -1;
    int r = rep->req;
    if (d->s.c[r].status != WAITING_FOR_REMOTE_KVS) return -1;
    EMIT(d, EV_KV_LOAD_FAILED);
    if (cfg->fail) return r;
    d->s.c[r].C = 0;
    d->s.kvt[r] = KV_FAILED;
    return -1;
}

/* connector.invalid_blocks: the request to finish with FINISHED_ERROR, or -1 */
int invalid_blocks(const Cfg *cfg, Draft *d, const Report *rep) {
    if (rep->kind != REP_INVALID) return -1;
    int r = rep->req;
    Ctr *c = &d->s.c[r];
    if (c->status != WAITING_FOR_REMOTE_KVS || rep->j >= blocks_for(cfg, c->C)) return -1;
    EMIT(d, EV_KV_INVALID_BLOCKS);
    c->C = (int16_t)(rep->j * cfg->bs);
    if (cfg->fail) return r;
    d->s.kvt[r] = KV_FAILED;
    return -1;
}

/* connector.xfer_finished */
void xfer_finished(const Cfg *cfg, Draft *d, const Report *rep) {
    if (rep->kind == REP_NONE || rep->kind == REP_STORED) return;
    St *s = &d->s;
    int r = rep->req, t = s->kvt[r];
    if (rep->kind != REP_SENT && s->c[r].status == WAITING_FOR_REMOTE_KVS) {
        s->kvt[r] = t == KV_FAILED ? KV_FAILED_RECVD : KV_RECVD;
        return;
    }
    if (t == KV_ORPHAN || t == KV_SENDING || t == KV_LOADING || t == KV_FAILED) {
        free_request_blocks(cfg, d, r);
        s->kvt[r] = KV_DONE;
    }
}
