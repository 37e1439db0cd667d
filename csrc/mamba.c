/* spec/mamba.py in C: a Mamba state group beside full attention (SpecConfig.mamba_cache_mode;
 * vLLM 0.33.0's MambaManager and Scheduler._mamba_block_aligned_split).  Its table keeps one
 * entry per block position in "align" mode, NULL_BLK at skipped or freed positions (vLLM's null
 * block); its cached states carry hash group 1 (hgrp).  Each function names the spec function
 * it mirrors. */
#include <string.h>
#include "compiled.h"

/* mamba.blocks_needed: one state block at the first allocation ("none"); in "align", one
 * whenever the table does not reach cdiv(tokens, B) (hit: the state block a prefix hit brings) */
int mamba_blocks_needed(const Cfg *cfg, const St *s, int r, int tokens, int hit) {
    if (cfg->mamba == MAMBA_OFF) return 0;
    if (cfg->mamba == MAMBA_NONE) return s->mtn[r] ? 0 : 1;
    return imin(imax(blocks_for(cfg, tokens) - hit - s->mtn[r], 0), 1);
}

/* mamba.take: after the attention group's blocks, the front of the free queue; in "align" the
 * skipped positions padded with the null block */
void mamba_take(const Cfg *cfg, St *s, int r, int tokens) {
    if (!mamba_blocks_needed(cfg, s, r, tokens, 0)) return;
    int b = s->freeb[0];
    memmove(s->freeb, s->freeb + 1, (size_t)(s->nfree - 1));
    s->nfree--;
    s->hreq[b] = -1; s->hidx[b] = -1; s->hgrp[b] = 0;
    if (cfg->mamba == MAMBA_ALIGN)
        while (s->mtn[r] < blocks_for(cfg, tokens) - 1) s->mt[r][s->mtn[r]++] = NULL_BLK;
    s->mt[r][s->mtn[r]++] = (uint8_t)b;
}

/* mamba.remove_skipped_blocks ("align"): the state blocks below (C - F - 1) // B, the highest
 * position first; unhashed ones to the front of the free queue, cached ones to the back */
void mamba_remove_skipped_blocks(const Cfg *cfg, Draft *d, int r) {
    if (cfg->mamba != MAMBA_ALIGN) return;
    St *s = &d->s;
    const Ctr *c = &s->c[r];
    int processed = imax(0, c->C - c->F);
    int skipped = imax(processed - 1, 0) / cfg->bs;
    uint8_t first[MAXB], last[MAXB];
    int nf = 0, nl = 0;
    for (int i = imin(skipped, s->mtn[r]) - 1; i >= 0; i--) {
        int b = s->mt[r][i];
        if (b == NULL_BLK) continue;
        if (cfg->prefix && s->hreq[b] >= 0) last[nl++] = (uint8_t)b;
        else first[nf++] = (uint8_t)b;
        s->mt[r][i] = NULL_BLK;
    }
    if (!nf && !nl) return;
    return_to_pool(s, first, nf, last, nl);
    EMIT(d, EV_MAMBA_STATE_FREED);
    if (c->F) EMIT(d, EV_MAMBA_STATE_FREED_IN_FLIGHT);
}

/* mamba.pop_for_free: r's state blocks tail first, nulls skipped, split into unhashed /
 * prefix-cached; its table cleared */
void mamba_pop_for_free(const Cfg *cfg, St *s, int r, uint8_t *first, int *nf, uint8_t *last, int *nl) {
    *nf = *nl = 0;
    if (cfg->mamba == MAMBA_OFF) return;
    for (int i = s->mtn[r] - 1; i >= 0; i--) {
        int b = s->mt[r][i];
        if (b == NULL_BLK) continue;
        if (cfg->prefix && s->hreq[b] >= 0) last[(*nl)++] = (uint8_t)b;
        else first[(*nf)++] = (uint8_t)b;
    }
    s->mtn[r] = 0;
}

/* mamba.record_hashes: each real state block the frontier newly passes gets hash (r, index, 1) */
void mamba_record_hashes(const Cfg *cfg, St *s, int r, int old_frontier) {
    if (cfg->mamba != MAMBA_ALIGN || !cfg->prefix) return;
    for (int i = old_frontier / cfg->bs; i < s->c[r].cached / cfg->bs; i++) {
        if (i >= s->mtn[r] || s->mt[r][i] == NULL_BLK) continue;
        int b = s->mt[r][i];
        s->hreq[b] = (int8_t)r; s->hidx[b] = (int8_t)i; s->hgrp[b] = 1;
    }
}

/* mamba.cut_hit: the longest prefix of the attention hit (nhit blocks) whose last block's state
 * is cached in the free queue (the first such free block, in free order); *state: that block or
 * NULL_BLK.  Sets the shared-prefix junction. */
int mamba_cut_hit(const Cfg *cfg, Draft *d, int r, int nhit, int *state) {
    St *s = &d->s;
    *state = NULL_BLK;
    if (cfg->mamba == MAMBA_OFF) return nhit;
    int kept = 0;
    for (int k = nhit; k > 0 && *state == NULL_BLK; k--) {
        for (int i = 0; i < s->nfree; i++) {
            int b = s->freeb[i];
            if (s->hreq[b] == r && s->hidx[b] == k - 1 && s->hgrp[b] == 1) { kept = k; *state = b; break; }
        }
    }
    s->mjunc[r] = (int16_t)(kept < nhit ? nhit * cfg->bs : 0);
    if (kept < nhit) EMIT(d, EV_MAMBA_HIT_CUT);
    return kept;
}

/* mamba._max_prefill: the step budget, or the configured long-prefill threshold below it */
static int max_prefill(const Cfg *cfg) {
    return cfg->lp_threshold > 0 ? imin(cfg->budget, cfg->lp_threshold) : cfg->budget;
}

/* mamba.aligned_split ("align"): a chunk of n from start cut to end on a block boundary unless
 * it reaches the prefill end; never past the last cacheable boundary below N, nor the junction */
int aligned_split(const Cfg *cfg, Draft *d, int r, int start, int n) {
    if (cfg->mamba != MAMBA_ALIGN || n <= 0) return n;
    const Ctr *c = &d->s.c[r];
    int b = cfg->bs, tokens = c->P + c->O, prefill_end = imax(c->P, tokens - 1);
    if (start >= prefill_end) return n;
    int end = start + n;
    if (end < prefill_end) {
        int aligned_end = end / b * b;
        if (aligned_end > start || b <= max_prefill(cfg)) end = aligned_end;
    }
    int junction = d->s.mjunc[r];
    int stops[3] = {
        start % b ? (start / b + 1) * b : 0,
        imax((tokens - 1) / b * b, 0),  /* mamba._checkpoint_position */
        start < junction && junction < end ? start + (junction - start) / b * b : 0,
    };
    int cut_end = end;
    for (int k = 0; k < 3; k++) if (start < stops[k] && stops[k] < end) cut_end = imin(cut_end, stops[k]);
    int cut = imax(cut_end - start, 0);
    if (cut < n) EMIT(d, EV_MAMBA_ALIGNED_SPLIT);
    return cut;
}

/* mamba.check_aligned: the ghost mamba_misaligned for a chunk that stops inside a block */
void check_aligned(const Cfg *cfg, Draft *d, int r, int start, int n) {
    if (cfg->mamba != MAMBA_ALIGN || n <= 0) return;
    const Ctr *c = &d->s.c[r];
    int b = cfg->bs, end = start + n;
    if (end >= imax(c->P, c->P + c->O - 1) || end % b == 0) return;
    if (b > max_prefill(cfg) && start / b == end / b) {
        EMIT(d, EV_MAMBA_SUB_BLOCK_CHUNK);
        return;
    }
    d->s.misaligned = 1;
}

/* mamba.state_blocks: block 0 ("none"); in "align" the one holding the state a step over
 * [start, end) starts from and the one its end falls in (NULL_BLK past the table) */
void mamba_state_blocks(const Cfg *cfg, const St *s, int r, int start, int end, Entry *e) {
    e->nsb = 0;
    if (cfg->mamba == MAMBA_OFF || !s->mtn[r]) return;
    if (cfg->mamba == MAMBA_NONE) { e->sb[e->nsb++] = s->mt[r][0]; return; }
    int b = cfg->bs, hi = (end - 1) / b, lo = start ? (start - 1) / b : hi;
    int idx[2] = {lo, hi};
    for (int k = 0; k < (lo == hi ? 1 : 2); k++) e->sb[e->nsb++] = idx[k] < s->mtn[r] ? s->mt[r][idx[k]] : NULL_BLK;
}

/* mamba.mamba_states_held: with deferral, every state block of an in-flight step is a real
 * block, neither free nor another request's */
int mamba_states_held(const Cfg *cfg, const St *s) {
    if (!cfg->defer) return 0;
    for (int q = 0; q <= s->nbq; q++) {
        const StepC *st = q < s->nbq ? &s->bq[q] : s->has_def ? &s->defstep : NULL;
        for (int k = 0; st && k < st->n; k++) {
            const Entry *e = &st->e[k];
            for (int i = 0; i < e->nsb; i++) {
                int b = e->sb[i];
                if (b == NULL_BLK || memchr(s->freeb, b, s->nfree)) return 1;
                for (int j = 0; j < cfg->n; j++) {
                    if (j == e->req) continue;
                    if (memchr(s->bt[j], b, s->btn[j]) || memchr(s->mt[j], b, s->mtn[j])) return 1;
                }
            }
        }
    }
    return 0;
}
