/* spec/properties.py's *always* properties as booleans, and checker/graph.unfinished_work.
 * Only whether a property fails is decided here: its message comes from the spec's own
 * check, run on the state replayed through the spec (checker/compiled.py). */
#include <string.h>
#include "compiled.h"

const char *PROP_NAMES[NPROPS] = {
    "placeholders_nonnegative", "stale_nonnegative", "computed_minus_placeholders",
    "placeholders_count_sampling_steps", "placeholders_le_in_flight", "stale_le_in_flight",
    "output_within_max_tokens", "prefix_cache_frontier_known", "output_caching_kv_written",
    "prefix_cache_frontier_kv_written", "blocks_conserved", "inflight_writes_safe",
    "delivered_in_order", "matches_sync_output", "wasted_steps_bounded",
    "no_wasted_step_on_max_tokens", "grammar_in_order", "last_sched_seq_bounded", "pause_respected",
    "kv_rollback_to_valid_prefix", "store_reads_fenced", "offload_accounting",
    "paused_sessions_hold_slots", "stopped_turn_output_dropped", "mamba_states_held", "mamba_chunks_aligned",
    "encoder_output_available", "encoder_cache_bounded", "window_kv_held",
};

static int fresh_sampling_steps(const St *s, int r) {
    int total = 0, stale_left = s->c[r].X;
    for (int q = 0; q <= s->nbq; q++) {
        const StepC *st = q < s->nbq ? &s->bq[q] : s->has_def ? &s->defstep : NULL;
        for (int k = 0; st && k < st->n; k++) {
            const Entry *e = &st->e[k];
            if (e->req != r) continue;
            if (stale_left > 0) stale_left -= e->ntok;
            else if (e->spos > 0) total += 1 + e->ndraft;
        }
    }
    return total;
}

static int blocks_conserved(const Cfg *cfg, const St *s) {
    int seen[MAXB] = {0};
#define SEE(b) do { if (seen[(b)]++) return 1; } while (0)
    for (int i = 0; i < s->nfree; i++) SEE(s->freeb[i]);
    for (int r = 0; r < cfg->n; r++) for (int i = 0; i < s->btn[r]; i++) SEE(s->bt[r][i]);
    for (int r = 0; r < cfg->n; r++) for (int i = 0; i < s->sbtn[r]; i++) if (s->sbt[r][i] != NULL_BLK) SEE(s->sbt[r][i]);
    for (int r = 0; r < cfg->n; r++) for (int i = 0; i < s->mtn[r]; i++) if (s->mt[r][i] != NULL_BLK) SEE(s->mt[r][i]);
    for (int k = 0; k < s->ndf; k++) {
        for (int i = 0; i < s->df[k].nf; i++) SEE(s->df[k].f[i]);
        for (int i = 0; i < s->df[k].nl; i++) SEE(s->df[k].l[i]);
    }
#undef SEE
    for (int b = 0; b < cfg->nblocks; b++) if (!seen[b]) return 1;
    return 0;
}

static int inflight_writes_safe(const Cfg *cfg, const St *s) {
    for (int q = 0; q <= s->nbq; q++) {
        const StepC *st = q < s->nbq ? &s->bq[q] : s->has_def ? &s->defstep : NULL;
        for (int k = 0; st && k < st->n; k++) {
            const Entry *e = &st->e[k];
            for (int i = 0; i < e->nw; i++) {
                int b = e->w[i];
                for (int j = 0; j < s->nfree; j++) if (s->freeb[j] == b) return 1;
                for (int r = 0; r < cfg->n; r++) {
                    if (r == e->req) continue;
                    for (int j = 0; j < s->btn[r]; j++) if (s->bt[r][j] == b) return 1;
                }
            }
        }
    }
    return 0;
}

static int per_request(const Cfg *cfg, const St *s, int prop, int r) {
    const Ctr *c = &s->c[r];
    int P = c->P, M = c->M, N = P + c->O;
    switch (prop) {
    case 0: return c->H < 0;
    case 1: return c->X < 0;
    case 2: return c->status == RUNNING && !c->chunk && c->C - c->H != N - 1;
    case 3: return !is_finished(c) && c->H != (cfg->async_sched ? fresh_sampling_steps(s, r) : 0);
    case 4: return !is_finished(c) && c->H > c->F;  /* a finished request held for its send keeps H */
    case 5: return c->X > c->F;
    case 6: return c->O > M;
    case 7: return c->cached > N;
    case 8: return c->status == RUNNING && !(c->X > 0) && c->ocached > c->C - c->F;
    case 9: return c->status == RUNNING && !(c->X > 0) && c->cached > c->C - c->F;
    case 12: return c->ooo;
    case 16: return c->gap;
    case 13: {
        int eos = s->eos[r];
        int length = (0 < eos && eos <= M) ? eos : M, status = (0 < eos && eos <= M) ? F_STOPPED : F_LENGTH;
        if (c->O > length) return 1;
        return (c->status == F_STOPPED || c->status == F_LENGTH) && (c->O != length || c->status != status);
    }
    case 14: return c->wasted > cfg->depth - 1;
    case 15: return c->status == F_LENGTH && c->wasted > 0;
    case 17: return c->L > s->qseq;
    case 23:  /* properties.stopped_turn_output_dropped */
        if ((c->status != WAITING && c->status != WAITING_FOR_STREAMING_REQ) || c->F == 0) return 0;
        return !(c->X == c->F && c->D);
    case 19: {  /* properties.kv_rollback_to_valid_prefix */
        if (s->kvt[r] != KV_FAILED && s->kvt[r] != KV_FAILED_RECVD) return 0;
        int loaded = P - (cfg->whole_prompt ? 0 : 1);
        return c->C % cfg->bs || c->C >= loaded;
    }
    default: return 0;
    }
}

/* offload.offload_accounting */
static int offload_accounting(const Cfg *cfg, const St *s) {
    for (int r = 0; r < cfg->n; r++) {
        const Ctr *c = &s->c[r];
        int stored = s->ostored[r];
        if (stored > num_tokens(cfg, r, c) / cfg->bs) return 1;
        if (s->kvt[r] == KV_LOADING && (c->C != stored * cfg->bs || s->btn[r] < stored)) return 1;
    }
    for (int k = 0; k < s->njobs; k++) {
        const Job *job = &s->jobs[k];
        if (job->flushed) continue;
        for (int r = 0; r < cfg->n; r++) {
            if (r == job->req) continue;
            for (int i = 0; i < s->btn[r]; i++) if (memchr(job->b, s->bt[r][i], job->nb)) return 1;
        }
    }
    return 0;
}

int prop_violated(const Cfg *cfg, const St *s, int prop) {
    if (prop == 20) return s->store_breached;  /* offload.store_reads_fenced */
    if (prop == 21) return offload_accounting(cfg, s);
    if (prop == 10) return blocks_conserved(cfg, s);
    if (prop == 11) return inflight_writes_safe(cfg, s);
    if (prop == 17 && s->rseq > s->qseq) return 1;
    if (prop == 18) return s->pause_breached;  /* properties.pause_respected */
    if (prop == 26) return s->enc_miss;  /* encoder.encoder_output_available */
    if (prop == 27) return encoder_cache_bounded(cfg, s);
    if (prop == 24) return mamba_states_held(cfg, s);
    if (prop == 28) return window_kv_held(cfg, s);
    if (prop == 25) return s->misaligned;  /* mamba.mamba_chunks_aligned */
    if (prop == 22) return s->nrun + num_paused_sessions(s) > cfg->max_seqs;  /* properties.paused_sessions_hold_slots */
    for (int r = 0; r < cfg->n; r++) if (per_request(cfg, s, prop, r)) return 1;
    return 0;
}

int unfinished(const Cfg *cfg, const St *s) {
    for (int r = 0; r < cfg->n; r++) if (!is_finished(&s->c[r])) return 1;
    return s->nbq > 0 || s->nfree != cfg->nblocks;
}
