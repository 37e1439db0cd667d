/* spec/blocks.py in C: allocation with the lookahead slots, prefix-cache hits and hashes, frees
 * (immediate or parked behind a fence).  Each function names the spec function it mirrors. */
#include <string.h>
#include "compiled.h"

/* blocks.blocks_can_be_freed */
int can_be_freed(const Cfg *cfg, const St *s, int r) {
    return !cfg->defer || s->c[r].L <= s->rseq;
}

/* blocks.return_to_pool: first + free + last */
void return_to_pool(St *s, const uint8_t *first, int nf, const uint8_t *last, int nl) {
    memmove(s->freeb + nf, s->freeb, s->nfree);
    memcpy(s->freeb, first, (size_t)nf);
    s->nfree = (uint8_t)(s->nfree + nf);
    memcpy(s->freeb + s->nfree, last, (size_t)nl);
    s->nfree = (uint8_t)(s->nfree + nl);
}

/* blocks._split_by_hash: r's blocks in free order (tail first), unhashed / prefix-cached */
void split_by_hash(const Cfg *cfg, const St *s, int r, uint8_t *first, int *nf, uint8_t *last, int *nl) {
    int hashed = s->c[r].cached / cfg->bs;
    *nf = *nl = 0;
    for (int i = s->btn[r] - 1; i >= 0; i--) {
        if (i >= hashed) first[(*nf)++] = s->bt[r][i];
        else last[(*nl)++] = s->bt[r][i];
    }
}

/* blocks.free_request_blocks */
void free_request_blocks(const Cfg *cfg, Draft *d, int r) {
    St *s = &d->s;
    uint8_t first[MAXB], last[MAXB];
    int nf, nl;
    split_by_hash(cfg, s, r, first, &nf, last, &nl);
    s->btn[r] = 0;
    int now = can_be_freed(cfg, s, r), nsf, nsl, nwf, nwl;
    /* KVCacheCoordinator.free: the groups in order (a sliding-window or a Mamba group after attention) */
    uint8_t state_first[MAXB], state_last[MAXB];
    swa_pop_for_free(cfg, s, r, state_first, &nwf, state_last, &nwl);
    mamba_pop_for_free(cfg, s, r, state_first + nwf, &nsf, state_last + nwl, &nsl);
    nsf += nwf; nsl += nwl;
    /* group by group when freed now (the second group's cached blocks behind attention's); one
     * reversed list when parked (its cached blocks ahead of attention's) */
    memmove(first + nsf, first, (size_t)nf);
    memcpy(first, state_first, (size_t)nsf);
    nf += nsf;
    if (now) {
        memcpy(last + nl, state_last, (size_t)nsl);
    } else {
        memmove(last + nsl, last, (size_t)nl);
        memcpy(last, state_last, (size_t)nsl);
    }
    nl += nsl;
    if (!nf && !nl) return;
    if (now) {
        return_to_pool(s, first, nf, last, nl);
    } else {
        DFree *e = &s->df[s->ndf++];
        e->fence = s->qseq;
        e->nf = (uint8_t)nf; e->nl = (uint8_t)nl;
        memcpy(e->f, first, (size_t)nf); memcpy(e->l, last, (size_t)nl);
        EMIT(d, EV_DEFERRED_FREE);
    }
}

/* blocks._take: the first `need` free blocks, then `swa_need` more for the window group, hashes
 * evicted, appended to the tables */
void take(St *s, int r, int need, int swa_need) {
    for (int i = 0; i < need + swa_need; i++) {
        int b = s->freeb[i];
        s->hreq[b] = -1; s->hidx[b] = -1; s->hgrp[b] = 0;
        if (i < need) s->bt[r][s->btn[r]++] = (uint8_t)b;
        else s->sbt[r][s->sbtn[r]++] = (uint8_t)b;
    }
    memmove(s->freeb, s->freeb + need + swa_need, (size_t)(s->nfree - need - swa_need));
    s->nfree = (uint8_t)(s->nfree - need - swa_need);
}

/* table[lo:hi] with Python's slice semantics, into out */
int py_slice(const uint8_t *table, int len, int lo, int hi, uint8_t *out) {
    if (lo < 0) lo = imax(lo + len, 0);
    if (hi < 0) hi = imax(hi + len, 0);
    hi = imin(hi, len);
    int n = 0;
    for (int i = lo; i < hi; i++) out[n++] = table[i];
    return n;
}

/* blocks.allocate_slots (with the drafter's lookahead slots; the window and Mamba groups free first) */
int allocate_slots(const Cfg *cfg, Draft *d, int r, int n) {
    St *s = &d->s;
    remove_skipped_blocks(cfg, d, r);
    mamba_remove_skipped_blocks(cfg, d, r);
    int main = s->c[r].C + n, total = main + cfg->lookahead;
    int need = imax(blocks_for(cfg, total) - s->btn[r], 0), swa_need = swa_blocks_needed(cfg, s, r, total);
    if (need + swa_need + mamba_blocks_needed(cfg, s, r, main, 0) > s->nfree) return 0;
    take(s, r, need, swa_need);
    mamba_take(cfg, s, r, main);
    return 1;
}

/* blocks.longest_cache_hit: the first free block (in free order) holding each (r, index) */
int longest_cache_hit(const Cfg *cfg, const St *s, int r, uint8_t *hit) {
    if (!cfg->prefix) return 0;
    int limit = (num_tokens(cfg, r, &s->c[r]) - 1) / cfg->bs, n = 0;
    while (n < limit) {
        int found = -1;
        for (int i = 0; i < s->nfree; i++) {
            int b = s->freeb[i];
            if (s->hreq[b] == r && s->hidx[b] == n && !s->hgrp[b]) { found = b; break; }
        }
        if (found < 0) break;
        hit[n++] = (uint8_t)found;
    }
    return n;
}

/* blocks.admit_with_hit (state: the Mamba state block the hit ends on, NULL_BLK for none; swa_hit: the
 * window group's share of the hit, nswa entries) */
int admit_with_hit(const Cfg *cfg, St *s, int r, const uint8_t *hit, int nhit, int n, int state,
                   const uint8_t *swa_hit, int nswa) {
    int main = nhit * cfg->bs + n, total = main + cfg->lookahead, held = s->btn[r];  /* held: a 1-token load's block */
    int need = imax(blocks_for(cfg, total) - held - nhit, 0);
    int swa_need = imax(swa_blocks_needed(cfg, s, r, total) - nswa, 0);
    int state_need = mamba_blocks_needed(cfg, s, r, main, state != NULL_BLK ? nhit : 0);
    uint8_t rest[MAXB]; int nrest = 0;
    for (int i = 0; i < s->nfree; i++) {
        int in_hit = s->freeb[i] == state;
        for (int k = 0; k < nhit; k++) if (hit[k] == s->freeb[i]) in_hit = 1;
        for (int k = 0; k < nswa; k++) if (swa_hit[k] == s->freeb[i]) in_hit = 1;
        if (!in_hit) rest[nrest++] = s->freeb[i];
    }
    if (need + swa_need + state_need > nrest) return 0;
    memcpy(s->freeb, rest, (size_t)nrest);
    s->nfree = (uint8_t)nrest;
    if (nswa) {  /* the window group's share of the hit, its skipped positions null */
        memcpy(s->sbt[r], swa_hit, (size_t)nswa);
        s->sbtn[r] = (uint8_t)nswa;
    }
    if (state != NULL_BLK) {
        s->mtn[r] = 0;
        while (s->mtn[r] < nhit - 1) s->mt[r][s->mtn[r]++] = NULL_BLK;
        s->mt[r][s->mtn[r]++] = (uint8_t)state;
    }
    memcpy(s->bt[r] + held, hit, (size_t)nhit);
    s->btn[r] = (uint8_t)(held + nhit);
    take(s, r, need, swa_need);
    mamba_take(cfg, s, r, main);
    return 1;
}

/* blocks.record_hashes */
void record_hashes(const Cfg *cfg, St *s, int r, int old_frontier) {
    for (int i = old_frontier / cfg->bs; i < s->c[r].cached / cfg->bs; i++) {
        int b = s->bt[r][i];
        s->hreq[b] = (int8_t)r; s->hidx[b] = (int8_t)i; s->hgrp[b] = 0;
    }
    swa_record_hashes(cfg, s, r, old_frontier);
    mamba_record_hashes(cfg, s, r, old_frontier);
}

