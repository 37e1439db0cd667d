/* spec/blocks.py's sliding-window group in C (SpecConfig.sliding_window W > 0: a second KV cache
 * group sharing the pool; vLLM's SlidingWindowManager).  Its table keeps one entry per block
 * position, NULL_BLK where the window has passed (vLLM's null block). */
#include <string.h>
#include "compiled.h"

/* blocks.swa_blocks_needed */
int swa_blocks_needed(const Cfg *cfg, const St *s, int r, int tokens) {
    if (!cfg->W) return 0;
    return imax(blocks_for(cfg, tokens) - s->sbtn[r], 0);
}

/* blocks.remove_skipped_blocks: the blocks wholly behind the window of the next token, on the
 * processed-token basis (C - F), to the front of the free queue, the highest position first */
void remove_skipped_blocks(const Cfg *cfg, Draft *d, int r) {
    if (!cfg->W) return;
    St *s = &d->s;
    const Ctr *c = &s->c[r];
    int processed = imax(0, c->C - c->F);
    int skipped = imax(0, processed - cfg->W + 1) / cfg->bs;
    uint8_t freed[MAXB];
    int nfreed = 0;
    for (int i = imin(skipped, s->sbtn[r]) - 1; i >= 0; i--) {
        if (s->sbt[r][i] == NULL_BLK) break;
        freed[nfreed++] = s->sbt[r][i];
        s->sbt[r][i] = NULL_BLK;
    }
    if (!nfreed) return;
    memmove(s->freeb + nfreed, s->freeb, s->nfree);
    memcpy(s->freeb, freed, (size_t)nfreed);
    s->nfree = (uint8_t)(s->nfree + nfreed);
    EMIT(d, EV_SLIDING_WINDOW_FREE);
}

/* blocks.admission_fits' sliding-window share: at most swa_admission_cap blocks */
int swa_admission_blocks(const Cfg *cfg, const St *s, int r, int tokens) {
    return cfg->W ? imin(swa_blocks_needed(cfg, s, r, tokens), cfg->swa_cap) : 0;
}

/* blocks.free_request_blocks' first part: the window group's live blocks, tail first */
int swa_free_order(const Cfg *cfg, St *s, int r, uint8_t *out) {
    int n = 0;
    if (!cfg->W) return 0;
    for (int i = s->sbtn[r] - 1; i >= 0; i--) if (s->sbt[r][i] != NULL_BLK) out[n++] = s->sbt[r][i];
    s->sbtn[r] = 0;
    return n;
}
