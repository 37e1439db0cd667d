/* A state as a short bit string (field widths from the config), and checker/symmetry.py's
 * canonical form: block ids renamed by first use (block tables in request order, then the
 * sliding-window tables and the Mamba tables in request order, parked frees, the free queue), step fences shifted so that processed_step_seq is 0; the pause fields pass
 * through unchanged. */
#include <string.h>
#include "compiled.h"

/* whether a block hash may carry group 1 (a Mamba state's, or with prefix caching a window block's) */
static int two_cached_groups(const Cfg *cfg) { return cfg->mamba || (cfg->W && cfg->prefix); }

static int bits(int v) { int b = 1; while ((1 << b) <= v) b++; return b; }

void cfg_widths(Cfg *cfg) {
    int top = 0, maxm = 0;
    for (int r = 0; r < cfg->n; r++) {
        int length = cfg->P[r] + cfg->M[r];  /* config.session_length */
        for (int u = 0; is_session(cfg, r) && u < cfg->nupd; u++) length += cfg->upd_u[u] + cfg->upd_m[u] - 1;
        top = imax(top, length);
        maxm = imax(maxm, cfg->M[r]);
    }
    for (int u = 0; u < cfg->nupd; u++) maxm = imax(maxm, cfg->upd_m[u]);
    cfg->w_tok = bits(top + cfg->depth * cfg->budget + cfg->lookahead + cfg->k + 2);
    cfg->w_k = bits(cfg->k);
    cfg->w_req = bits(cfg->n - 1);
    cfg->w_nreq = bits(cfg->n);
    cfg->w_blk = bits(cfg->nblocks - 1);
    cfg->w_nblk = bits(cfg->nblocks);
    cfg->w_idx = bits(cfg->nblocks - 1);
    cfg->w_seq = bits(cfg->depth + 2);
    cfg->w_eos = bits(imax(maxm, cfg->max_eos));
    cfg->w_wasted = bits(cfg->depth + 2);
    cfg->w_dwait = bits(cfg->stagger);
    cfg->w_fpl = bits(cfg->forced);
    cfg->w_nbq = bits(cfg->depth);
    cfg->w_pl = bits(cfg->pauses);
    cfg->w_status = cfg->connector || cfg->nsess ? 4 : 3;  /* WAITING_FOR_REMOTE_KVS, FINISHED_ERROR,
                                                              WAITING_FOR_STREAMING_REQ */
    cfg->w_sent = bits(cfg->nupd + 1);
    cfg->w_item = bits(imax(cfg->nitems - 1, 0));
    cfg->w_nitem = bits(cfg->nitems);
}

/* ------------------------------------------------------------ canonical form */

static int16_t shifted(int v, int shift) { return (int16_t)imax(v - shift, 0); }

void canonical(St *s) {
    int m[MAXB], next = 0;
    for (int b = 0; b < MAXB; b++) m[b] = -1;
#define SEE(b) do { if (m[(b)] < 0) m[(b)] = next++; } while (0)
    for (int r = 0; r < MAXR; r++) for (int i = 0; i < s->btn[r]; i++) SEE(s->bt[r][i]);
    for (int r = 0; r < MAXR; r++) for (int i = 0; i < s->sbtn[r]; i++) if (s->sbt[r][i] != NULL_BLK) SEE(s->sbt[r][i]);
    for (int r = 0; r < MAXR; r++) for (int i = 0; i < s->mtn[r]; i++) if (s->mt[r][i] != NULL_BLK) SEE(s->mt[r][i]);
    for (int k = 0; k < s->ndf; k++) {
        for (int i = 0; i < s->df[k].nf; i++) SEE(s->df[k].f[i]);
        for (int i = 0; i < s->df[k].nl; i++) SEE(s->df[k].l[i]);
    }
    for (int i = 0; i < s->nfree; i++) SEE(s->freeb[i]);
    for (int b = 0; b < MAXB; b++) SEE(b);  /* a lost block (never in a reachable spec state) */
#undef SEE
    for (int r = 0; r < MAXR; r++) for (int i = 0; i < s->btn[r]; i++) s->bt[r][i] = (uint8_t)m[s->bt[r][i]];
    for (int r = 0; r < MAXR; r++)
        for (int i = 0; i < s->sbtn[r]; i++) if (s->sbt[r][i] != NULL_BLK) s->sbt[r][i] = (uint8_t)m[s->sbt[r][i]];
    for (int r = 0; r < MAXR; r++)
        for (int i = 0; i < s->mtn[r]; i++) if (s->mt[r][i] != NULL_BLK) s->mt[r][i] = (uint8_t)m[s->mt[r][i]];
    for (int k = 0; k < s->ndf; k++) {
        for (int i = 0; i < s->df[k].nf; i++) s->df[k].f[i] = (uint8_t)m[s->df[k].f[i]];
        for (int i = 0; i < s->df[k].nl; i++) s->df[k].l[i] = (uint8_t)m[s->df[k].l[i]];
    }
    for (int i = 0; i < s->nfree; i++) s->freeb[i] = (uint8_t)m[s->freeb[i]];
    for (int k = 0; k < s->njobs; k++) for (int i = 0; i < s->jobs[k].nb; i++) s->jobs[k].b[i] = (uint8_t)m[s->jobs[k].b[i]];
    for (int r = 0; r < MAXR; r++) for (int i = 0; i < s->otn[r]; i++) s->ot[r][i] = (uint8_t)m[s->ot[r][i]];
    for (int q = 0; q <= s->nbq; q++) {
        StepC *st = q < s->nbq ? &s->bq[q] : s->has_def ? &s->defstep : NULL;
        for (int k = 0; st && k < st->n; k++) {
            Entry *e = &st->e[k];
            for (int i = 0; i < e->nw; i++) e->w[i] = (uint8_t)m[e->w[i]];
            for (int i = 0; i < e->nsb; i++) if (e->sb[i] != NULL_BLK) e->sb[i] = (uint8_t)m[e->sb[i]];
        }
    }
    int8_t hr[MAXB], hi[MAXB];
    uint8_t hg[MAXB];
    for (int b = 0; b < MAXB; b++) { hr[m[b]] = s->hreq[b]; hi[m[b]] = s->hidx[b]; hg[m[b]] = s->hgrp[b]; }
    memcpy(s->hreq, hr, sizeof hr); memcpy(s->hidx, hi, sizeof hi); memcpy(s->hgrp, hg, sizeof hg);
    int shift = s->rseq;
    if (shift) {
        for (int r = 0; r < MAXR; r++) s->c[r].L = shifted(s->c[r].L, shift);
        for (int q = 0; q < s->nbq; q++) s->bq[q].seq = shifted(s->bq[q].seq, shift);
        if (s->has_def) s->defstep.seq = shifted(s->defstep.seq, shift);
        for (int k = 0; k < s->ndf; k++) s->df[k].fence = shifted(s->df[k].fence, shift);
        s->qseq = (int16_t)(s->qseq - shift);
        s->rseq = 0;
    }
}

/* ------------------------------------------------------------ bit strings */

typedef struct { uint8_t *buf; size_t pos; uint64_t acc; int nacc; int bad; } Writer;
typedef struct { const uint8_t *buf; size_t pos; uint64_t acc; int nacc; } Reader;

static inline __attribute__((always_inline)) void put(Writer *w, int v, int width) {
    if (v < 0 || v >= (1 << width)) { w->bad = 1; v = 0; }
    w->acc |= (uint64_t)v << w->nacc;
    w->nacc += width;
    while (w->nacc >= 8) { w->buf[w->pos++] = (uint8_t)w->acc; w->acc >>= 8; w->nacc -= 8; }
}

static inline __attribute__((always_inline)) int get(Reader *r, int width) {
    while (r->nacc < width) { r->acc |= (uint64_t)r->buf[r->pos++] << r->nacc; r->nacc += 8; }
    int v = (int)(r->acc & (((uint64_t)1 << width) - 1));
    r->acc >>= width;
    r->nacc -= width;
    return v;
}

#define FIELDS_CTR(FN) FN(status, cfg->w_status) FN(O, T) FN(C, T) FN(H, T) FN(F, T) FN(X, T) FN(L, cfg->w_seq) \
    FN(cached, T) FN(dwait, cfg->w_dwait) FN(ocached, T) FN(wasted, cfg->w_wasted) FN(D, 1) FN(chunk, 1) \
    FN(ooo, 1) FN(abort_def, 1) FN(S, cfg->w_k) FN(gap, 1)

static void put_step(const Cfg *cfg, Writer *w, const StepC *st) {
    int T = cfg->w_tok;
    put(w, st->n, cfg->w_nreq);
    put(w, st->seq, cfg->w_seq);
    for (int k = 0; k < st->n; k++) {
        const Entry *e = &st->e[k];
        put(w, e->req, cfg->w_req); put(w, e->ntok, T); put(w, e->spos, T); put(w, e->start, T);
        put(w, e->ndraft, cfg->w_k); put(w, e->padded, 1);
        put(w, e->nw, cfg->w_nblk);
        for (int i = 0; i < e->nw; i++) put(w, e->w[i], cfg->w_blk);
        if (cfg->mamba) {  /* its state blocks: id + 1, 0 for the null block */
            put(w, e->nsb, 2);
            for (int i = 0; i < e->nsb; i++) put(w, e->sb[i] == NULL_BLK ? 0 : e->sb[i] + 1, cfg->w_nblk);
        }
    }
    if (cfg->nimg) {  /* encoder_inputs (input ids per request), freed_encoder */
        for (int r = 0; r < cfg->n; r++) if (cfg->img_count[r]) put(w, st->esched[r], cfg->img_count[r]);
        put(w, st->nfe, 5);
        for (int i = 0; i < st->nfe; i++) put(w, st->fe[i], cfg->w_item);
    }
}

static void get_step(const Cfg *cfg, Reader *rd, StepC *st) {
    int T = cfg->w_tok;
    st->n = (uint8_t)get(rd, cfg->w_nreq);
    st->seq = (int16_t)get(rd, cfg->w_seq);
    for (int k = 0; k < st->n; k++) {
        Entry *e = &st->e[k];
        e->req = (uint8_t)get(rd, cfg->w_req);
        e->ntok = (int16_t)get(rd, T); e->spos = (int16_t)get(rd, T); e->start = (int16_t)get(rd, T);
        e->ndraft = (int16_t)get(rd, cfg->w_k); e->padded = (uint8_t)get(rd, 1);
        e->nw = (uint8_t)get(rd, cfg->w_nblk);
        for (int i = 0; i < e->nw; i++) e->w[i] = (uint8_t)get(rd, cfg->w_blk);
        e->nsb = 0;
        if (cfg->mamba) {
            e->nsb = (uint8_t)get(rd, 2);
            for (int i = 0; i < e->nsb; i++) {
                int v = get(rd, cfg->w_nblk);
                e->sb[i] = (uint8_t)(v ? v - 1 : NULL_BLK);
            }
        }
    }
    memset(st->esched, 0, sizeof st->esched);
    st->nfe = 0;
    if (cfg->nimg) {
        for (int r = 0; r < cfg->n; r++) if (cfg->img_count[r]) st->esched[r] = (uint8_t)get(rd, cfg->img_count[r]);
        st->nfe = (uint8_t)get(rd, 5);
        for (int i = 0; i < st->nfe; i++) st->fe[i] = (uint8_t)get(rd, cfg->w_item);
    }
}

int encode(const Cfg *cfg, const St *s, uint8_t *buf) {
    Writer w = {buf, 0, 0, 0, 0};
    int T = cfg->w_tok;
    for (int r = 0; r < cfg->n; r++) {
        const Ctr *c = &s->c[r];
#define PUT(f, width) put(&w, c->f, width);
        FIELDS_CTR(PUT)
#undef PUT
        put(&w, s->eos[r], cfg->w_eos);
        if (is_session(cfg, r)) { put(&w, c->P, T); put(&w, c->M, cfg->w_eos); }  /* a session's turn */
        put(&w, s->btn[r], cfg->w_nblk);
        for (int i = 0; i < s->btn[r]; i++) put(&w, s->bt[r][i], cfg->w_blk);
        if (cfg->W) {  /* the window table: id + 1, 0 for the null block */
            put(&w, s->sbtn[r], cfg->w_nblk);
            for (int i = 0; i < s->sbtn[r]; i++) put(&w, s->sbt[r][i] == NULL_BLK ? 0 : s->sbt[r][i] + 1, cfg->w_nblk);
        }
        if (cfg->mamba) {  /* the Mamba table as the window's, then the junction */
            put(&w, s->mtn[r], cfg->w_nblk);
            for (int i = 0; i < s->mtn[r]; i++) put(&w, s->mt[r][i] == NULL_BLK ? 0 : s->mt[r][i] + 1, cfg->w_nblk);
            put(&w, s->mjunc[r], T);
        }
    }
    put(&w, s->nwait, cfg->w_nreq);
    for (int i = 0; i < s->nwait; i++) put(&w, s->wait[i], cfg->w_req);
    put(&w, s->nrun, cfg->w_nreq);
    for (int i = 0; i < s->nrun; i++) put(&w, s->run[i], cfg->w_req);
    put(&w, s->nbq, cfg->w_nbq);
    for (int q = 0; q < s->nbq; q++) put_step(cfg, &w, &s->bq[q]);
    put(&w, s->has_def, 1);
    if (s->has_def) put_step(cfg, &w, &s->defstep);
    put(&w, s->nfree, cfg->w_nblk);
    for (int i = 0; i < s->nfree; i++) put(&w, s->freeb[i], cfg->w_blk);
    for (int b = 0; b < cfg->nblocks; b++) {
        put(&w, s->hreq[b] >= 0, 1);
        if (s->hreq[b] >= 0) { put(&w, s->hreq[b], cfg->w_req); put(&w, s->hidx[b], cfg->w_idx); }
        if (s->hreq[b] >= 0 && two_cached_groups(cfg)) put(&w, s->hgrp[b], 1);
    }
    put(&w, s->ndf, cfg->w_nblk);
    for (int k = 0; k < s->ndf; k++) {
        const DFree *e = &s->df[k];
        put(&w, e->fence, cfg->w_seq); put(&w, e->nf, cfg->w_nblk); put(&w, e->nl, cfg->w_nblk);
        for (int i = 0; i < e->nf; i++) put(&w, e->f[i], cfg->w_blk);
        for (int i = 0; i < e->nl; i++) put(&w, e->l[i], cfg->w_blk);
    }
    put(&w, s->qseq, cfg->w_seq);
    put(&w, s->rseq, 1);  /* always 0 in a canonical state */
    put(&w, s->finished_pending, 1);
    put(&w, s->fpl, cfg->w_fpl);
    put(&w, s->call_in_progress, 1);
    if (cfg->pauses) {  /* a config without pauses keeps its bytes per state */
        put(&w, s->pause_state, 2); put(&w, s->pauses_left, cfg->w_pl); put(&w, s->pause_breached, 1);
    }
    if (cfg->connector) for (int r = 0; r < cfg->n; r++) put(&w, s->kvt[r], 4);  /* kv_transfer */
    if (cfg->connector || cfg->nsess) {  /* kv_holding_waiting: a connector's loads, sessions holding KV */
        put(&w, s->nkv, cfg->w_nreq);
        for (int i = 0; i < s->nkv; i++) put(&w, s->kv[i], cfg->w_req);
    }
    if (cfg->offload) {  /* store_jobs, offload_stored, offload_tables, offload_finished, store_breached */
        put(&w, s->njobs, 4);
        for (int k = 0; k < s->njobs; k++) {
            const Job *j = &s->jobs[k];
            put(&w, j->req, cfg->w_req); put(&w, j->ahead, cfg->w_seq); put(&w, j->flushed, 1);
            put(&w, j->registered, 1); put(&w, j->nb, cfg->w_nblk);
            for (int i = 0; i < j->nb; i++) put(&w, j->b[i], cfg->w_blk);
        }
        for (int r = 0; r < cfg->n; r++) {
            put(&w, s->ostored[r], cfg->w_nblk); put(&w, s->otn[r], cfg->w_nblk);
            for (int i = 0; i < s->otn[r]; i++) put(&w, s->ot[r][i], cfg->w_blk);
        }
        put(&w, s->nofin, cfg->w_nreq);
        for (int i = 0; i < s->nofin; i++) put(&w, s->ofin[i], cfg->w_req);
        put(&w, s->store_breached, 1);
    }
    if (cfg->nsess)  /* stream_sent, stream_applied */
        for (int r = 0; r < cfg->n; r++) { put(&w, s->ssent[r], cfg->w_sent); put(&w, s->sapplied[r], cfg->w_sent); }
    if (cfg->mamba) put(&w, s->misaligned, 1);
    if (cfg->nimg) {  /* enc_inputs, enc_entries, enc_freeable, worker_encoder, encoder_miss */
        for (int r = 0; r < cfg->n; r++) if (cfg->img_count[r]) put(&w, s->enc_in[r], cfg->img_count[r]);
        put(&w, s->enc_entries, cfg->nitems);
        put(&w, s->nfreeable, cfg->w_nitem);
        for (int i = 0; i < s->nfreeable; i++) put(&w, s->freeable[i], cfg->w_item);
        put(&w, s->worker_enc, cfg->nitems);
        put(&w, s->enc_miss, 1);
    }
    if (w.nacc) put(&w, 0, 8 - w.nacc);
    return w.bad ? -1 : (int)w.pos;
}

int decode(const Cfg *cfg, const uint8_t *buf, St *s) {
    Reader rd = {buf, 0, 0, 0};
    int T = cfg->w_tok;
    memset(s, 0, sizeof *s);
    memset(s->hreq, -1, sizeof s->hreq); memset(s->hidx, -1, sizeof s->hidx);
    for (int r = 0; r < cfg->n; r++) {
        Ctr *c = &s->c[r];
#define GET(f, width) c->f = (__typeof__(c->f))get(&rd, width);
        FIELDS_CTR(GET)
#undef GET
        s->eos[r] = (int16_t)get(&rd, cfg->w_eos);
        c->P = (int16_t)cfg->P[r]; c->M = (int16_t)cfg->M[r];
        if (is_session(cfg, r)) { c->P = (int16_t)get(&rd, T); c->M = (int16_t)get(&rd, cfg->w_eos); }
        s->btn[r] = (uint8_t)get(&rd, cfg->w_nblk);
        for (int i = 0; i < s->btn[r]; i++) s->bt[r][i] = (uint8_t)get(&rd, cfg->w_blk);
        if (cfg->W) {
            s->sbtn[r] = (uint8_t)get(&rd, cfg->w_nblk);
            for (int i = 0; i < s->sbtn[r]; i++) {
                int v = get(&rd, cfg->w_nblk);
                s->sbt[r][i] = (uint8_t)(v ? v - 1 : NULL_BLK);
            }
        }
        if (cfg->mamba) {
            s->mtn[r] = (uint8_t)get(&rd, cfg->w_nblk);
            for (int i = 0; i < s->mtn[r]; i++) {
                int v = get(&rd, cfg->w_nblk);
                s->mt[r][i] = (uint8_t)(v ? v - 1 : NULL_BLK);
            }
            s->mjunc[r] = (int16_t)get(&rd, T);
        }
    }
    s->nwait = (uint8_t)get(&rd, cfg->w_nreq);
    for (int i = 0; i < s->nwait; i++) s->wait[i] = (uint8_t)get(&rd, cfg->w_req);
    s->nrun = (uint8_t)get(&rd, cfg->w_nreq);
    for (int i = 0; i < s->nrun; i++) s->run[i] = (uint8_t)get(&rd, cfg->w_req);
    s->nbq = (uint8_t)get(&rd, cfg->w_nbq);
    for (int q = 0; q < s->nbq; q++) get_step(cfg, &rd, &s->bq[q]);
    s->has_def = (uint8_t)get(&rd, 1);
    if (s->has_def) get_step(cfg, &rd, &s->defstep);
    s->nfree = (uint8_t)get(&rd, cfg->w_nblk);
    for (int i = 0; i < s->nfree; i++) s->freeb[i] = (uint8_t)get(&rd, cfg->w_blk);
    for (int b = 0; b < cfg->nblocks; b++) {
        if (get(&rd, 1)) { s->hreq[b] = (int8_t)get(&rd, cfg->w_req); s->hidx[b] = (int8_t)get(&rd, cfg->w_idx); }
        if (s->hreq[b] >= 0 && two_cached_groups(cfg)) s->hgrp[b] = (uint8_t)get(&rd, 1);
    }
    s->ndf = (uint8_t)get(&rd, cfg->w_nblk);
    for (int k = 0; k < s->ndf; k++) {
        DFree *e = &s->df[k];
        e->fence = (int16_t)get(&rd, cfg->w_seq);
        e->nf = (uint8_t)get(&rd, cfg->w_nblk); e->nl = (uint8_t)get(&rd, cfg->w_nblk);
        for (int i = 0; i < e->nf; i++) e->f[i] = (uint8_t)get(&rd, cfg->w_blk);
        for (int i = 0; i < e->nl; i++) e->l[i] = (uint8_t)get(&rd, cfg->w_blk);
    }
    s->qseq = (int16_t)get(&rd, cfg->w_seq);
    s->rseq = (int16_t)get(&rd, 1);
    s->finished_pending = (uint8_t)get(&rd, 1);
    s->fpl = (uint8_t)get(&rd, cfg->w_fpl);
    s->call_in_progress = (uint8_t)get(&rd, 1);
    if (cfg->pauses) {
        s->pause_state = (uint8_t)get(&rd, 2);
        s->pauses_left = (uint8_t)get(&rd, cfg->w_pl);
        s->pause_breached = (uint8_t)get(&rd, 1);
    }
    if (cfg->connector) for (int r = 0; r < cfg->n; r++) s->kvt[r] = (uint8_t)get(&rd, 4);
    if (cfg->connector || cfg->nsess) {
        s->nkv = (uint8_t)get(&rd, cfg->w_nreq);
        for (int i = 0; i < s->nkv; i++) s->kv[i] = (uint8_t)get(&rd, cfg->w_req);
    }
    if (cfg->offload) {
        s->njobs = (uint8_t)get(&rd, 4);
        for (int k = 0; k < s->njobs; k++) {
            Job *j = &s->jobs[k];
            j->req = (uint8_t)get(&rd, cfg->w_req); j->ahead = (uint8_t)get(&rd, cfg->w_seq);
            j->flushed = (uint8_t)get(&rd, 1); j->registered = (uint8_t)get(&rd, 1);
            j->nb = (uint8_t)get(&rd, cfg->w_nblk);
            for (int i = 0; i < j->nb; i++) j->b[i] = (uint8_t)get(&rd, cfg->w_blk);
        }
        for (int r = 0; r < cfg->n; r++) {
            s->ostored[r] = (uint8_t)get(&rd, cfg->w_nblk); s->otn[r] = (uint8_t)get(&rd, cfg->w_nblk);
            for (int i = 0; i < s->otn[r]; i++) s->ot[r][i] = (uint8_t)get(&rd, cfg->w_blk);
        }
        s->nofin = (uint8_t)get(&rd, cfg->w_nreq);
        for (int i = 0; i < s->nofin; i++) s->ofin[i] = (uint8_t)get(&rd, cfg->w_req);
        s->store_breached = (uint8_t)get(&rd, 1);
    }
    if (cfg->nsess)
        for (int r = 0; r < cfg->n; r++) {
            s->ssent[r] = (uint8_t)get(&rd, cfg->w_sent); s->sapplied[r] = (uint8_t)get(&rd, cfg->w_sent);
        }
    if (cfg->mamba) s->misaligned = (uint8_t)get(&rd, 1);
    if (cfg->nimg) {
        for (int r = 0; r < cfg->n; r++) if (cfg->img_count[r]) s->enc_in[r] = (uint8_t)get(&rd, cfg->img_count[r]);
        s->enc_entries = (uint8_t)get(&rd, cfg->nitems);
        s->nfreeable = (uint8_t)get(&rd, cfg->w_nitem);
        for (int i = 0; i < s->nfreeable; i++) s->freeable[i] = (uint8_t)get(&rd, cfg->w_item);
        s->worker_enc = (uint8_t)get(&rd, cfg->nitems);
        s->enc_miss = (uint8_t)get(&rd, 1);
    }
    return (int)rd.pos;  /* the bytes read: a joint state's worker part starts there (worker.c) */
}
