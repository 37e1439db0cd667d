/* spec/blocks.py's sliding-window group and spec/swa.py in C (SpecConfig.sliding_window W > 0: a
 * second KV cache group sharing the pool; vLLM's SlidingWindowManager, and with prefix caching the
 * HybridKVCacheCoordinator's hit).  Its table keeps one entry per block position, NULL_BLK where
 * the window has passed (vLLM's null block); its cached blocks carry hash group 1 (hgrp, as
 * swa.SWA_GROUP).  Each function names the spec function it mirrors. */
#include <string.h>
#include "compiled.h"

/* swa.caches: the window group takes part in prefix caching */
static int caches(const Cfg *cfg) { return cfg->W && cfg->prefix; }

/* swa.contiguous_blocks_for_hit: cdiv(W - 1, B) */
static int contiguous_blocks_for_hit(const Cfg *cfg) { return blocks_for(cfg, cfg->W - 1); }

/* blocks.swa_blocks_needed */
int swa_blocks_needed(const Cfg *cfg, const St *s, int r, int tokens) {
    if (!cfg->W) return 0;
    return imax(blocks_for(cfg, tokens) - s->sbtn[r], 0);
}

/* blocks.remove_skipped_blocks: the blocks wholly behind the window of the next token, on the
 * processed-token basis (C - F), the highest position first: unhashed ones to the front of the
 * free queue, prefix-cached ones to the back */
void remove_skipped_blocks(const Cfg *cfg, Draft *d, int r) {
    if (!cfg->W) return;
    St *s = &d->s;
    const Ctr *c = &s->c[r];
    int processed = imax(0, c->C - c->F);
    int skipped = imax(0, processed - cfg->W + 1) / cfg->bs;
    uint8_t first[MAXB], last[MAXB];
    int nf = 0, nl = 0;
    for (int i = imin(skipped, s->sbtn[r]) - 1; i >= 0; i--) {
        int b = s->sbt[r][i];
        if (b == NULL_BLK) break;
        if (s->hreq[b] >= 0) last[nl++] = (uint8_t)b;
        else first[nf++] = (uint8_t)b;
        s->sbt[r][i] = NULL_BLK;
    }
    if (!nf && !nl) return;
    return_to_pool(s, first, nf, last, nl);
    EMIT(d, EV_SLIDING_WINDOW_FREE);
}

/* blocks.admission_fits' sliding-window share: at most swa_admission_cap blocks less the hit's
 * (swa_hit, nswa entries), plus the hit's real blocks */
int swa_admission_blocks(const Cfg *cfg, const St *s, int r, int tokens, const uint8_t *swa_hit, int nswa) {
    if (!cfg->W) return 0;
    int n = imax(imin(swa_blocks_needed(cfg, s, r, tokens), cfg->swa_cap) - nswa, 0);
    for (int i = 0; i < nswa; i++) n += swa_hit[i] != NULL_BLK;
    return n;
}

/* swa.pop_for_free: the window group's live blocks, tail first, split into unhashed /
 * prefix-cached; its table cleared */
void swa_pop_for_free(const Cfg *cfg, St *s, int r, uint8_t *first, int *nf, uint8_t *last, int *nl) {
    *nf = *nl = 0;
    if (!cfg->W) return;
    for (int i = s->sbtn[r] - 1; i >= 0; i--) {
        int b = s->sbt[r][i];
        if (b == NULL_BLK) continue;
        if (s->hreq[b] >= 0) last[(*nl)++] = (uint8_t)b;
        else first[(*nf)++] = (uint8_t)b;
    }
    s->sbtn[r] = 0;
}

/* swa.record_hashes: each real block the frontier newly passes gets hash (r, index, 1); none
 * when a hit needs no block (W = 1) */
void swa_record_hashes(const Cfg *cfg, St *s, int r, int old_frontier) {
    if (!caches(cfg) || !contiguous_blocks_for_hit(cfg)) return;
    for (int i = old_frontier / cfg->bs; i < s->c[r].cached / cfg->bs; i++) {
        if (i >= s->sbtn[r] || s->sbt[r][i] == NULL_BLK) continue;
        int b = s->sbt[r][i];
        s->hreq[b] = (int8_t)r; s->hidx[b] = (int8_t)i; s->hgrp[b] = 1;
    }
}

/* the first free block (in free order) holding the window group's hash (r, i), or -1 */
static int cached_window_block(const St *s, int r, int i) {
    for (int k = 0; k < s->nfree; k++) {
        int b = s->freeb[k];
        if (s->hreq[b] == r && s->hidx[b] == i && s->hgrp[b] == 1) return b;
    }
    return -1;
}

/* swa.window_hit over the first max_blocks blocks: from the right, the first run of
 * contiguous_blocks_for_hit cached blocks (the positions before it null); without one, the
 * cached blocks from block 0.  Returns its length. */
static int window_hit(const Cfg *cfg, const St *s, int r, int max_blocks, uint8_t *out) {
    int need = contiguous_blocks_for_hit(cfg), run = 0;
    int found[MAXB];
    for (int i = max_blocks - 1; i >= 0; i--) {
        int b = cached_window_block(s, r, i);
        if (b < 0) { run = 0; continue; }
        found[i] = b;
        run++;
        if (run >= need) {
            for (int j = 0; j < i; j++) out[j] = NULL_BLK;
            for (int j = i; j < i + run; j++) out[j] = (uint8_t)found[j];
            return i + run;
        }
    }
    for (int j = 0; j < run; j++) out[j] = (uint8_t)found[j];
    return run;
}

/* swa.cut_hit: the hybrid hit; full attention's nhit blocks bound the window group's hit
 * (swa_hit, *nswa entries), and are cut to its length (returned) */
int swa_cut_hit(const Cfg *cfg, const St *s, int r, int nhit, uint8_t *swa_hit, int *nswa) {
    *nswa = 0;
    if (!caches(cfg) || !nhit) return nhit;
    *nswa = window_hit(cfg, s, r, nhit, swa_hit);
    return imin(nhit, *nswa);
}

/* swa.window_kv_held: every block of the window before the newest step's first token of each
 * request is a real block of its window table */
int window_kv_held(const Cfg *cfg, const St *s) {
    if (!cfg->W || !s->nbq) return 0;
    const StepC *st = &s->bq[s->nbq - 1];
    for (int k = 0; k < st->n; k++) {
        const Entry *e = &st->e[k];
        int first = imax(0, e->start - cfg->W + 1) / cfg->bs, last = imin(blocks_for(cfg, e->start), s->sbtn[e->req]);
        for (int j = first; j < last; j++) if (s->sbt[e->req][j] == NULL_BLK) return 1;
    }
    return 0;
}
