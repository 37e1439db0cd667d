/* spec/worker.py's shared mechanics and checker/joint.py's composition, in C (worker.h).
 *
 * joint_next_states is joint_next_states of checker/joint.py: every engine transition of
 * step.c in the spec's order, a schedule replaced by the worker executing the new step once per
 * row order (batch_orders' order), then (Neuron) the output thread's action; worker_neuron.c has
 * the Neuron strategy's parts, its bytes are put_neuron's. */
#include <string.h>
#include "worker.h"

void worker_init(const Cfg *cfg, Wk *w) {
    memset(w, 0, sizeof *w);
    for (int r = 0; r < MAXR; r++) { w->req_slot[r] = -1; w->slot_tokens[r] = PAD; }
    (void)cfg;
}

const Row *row_of(const Row *rows, int n, int req) {
    for (int i = 0; i < n; i++) if (rows[i].req == req) return &rows[i];
    return NULL;
}

void host_append(Wk *w, int req, int value) {
    if (w->hn[req] >= MAXH) { w->bad = 1; return; }
    w->host[req][w->hn[req]++] = (int8_t)value;
}

/* ------------------------------------------------------------ rows and row orders */

/* worker.rows_of: the rows of the step just scheduled, from the post-scheduling counters */
static int rows_of(const St *post, const StepC *step, Row *rows) {
    for (int k = 0; k < step->n; k++) {
        const Entry *e = &step->e[k];
        const Ctr *c = &post->c[e->req];
        int last = c->C - 1;
        rows[k] = (Row){e->req, e->ntok, last - e->ntok + 1, last, c->P, e->spos, c->O};
    }
    return step->n;
}

/* worker.finished_requests, as a bit mask */
static int finished_mask(const Cfg *cfg, const St *post) {
    int m = 0;
    for (int r = 0; r < cfg->n; r++) if (is_finished(&post->c[r])) m |= 1 << r;
    return m;
}

/* worker.condense: drop rows not in `keep`, fill each hole with the last row */
static int condense(const uint8_t *prev, int n, int keep, uint8_t *out) {
    int rows[MAXR], len = 0;
    for (int i = 0; i < n; i++) rows[len++] = keep >> prev[i] & 1 ? prev[i] : -1;
    for (int i = 0; i < len; i++) {
        while (len && rows[len - 1] < 0) len--;
        if (i < len && rows[i] < 0) rows[i] = rows[--len];
    }
    int m = 0;
    for (int i = 0; i < len; i++) if (rows[i] >= 0) out[m++] = (uint8_t)rows[i];
    return m;
}

/* the next permutation of idx[0:n] in lexicographic order (itertools.permutations' order); 0 at the last */
static int next_permutation(int *idx, int n) {
    int i = n - 2;
    while (i >= 0 && idx[i] >= idx[i + 1]) i--;
    if (i < 0) return 0;
    int j = n - 1;
    while (idx[j] <= idx[i]) j--;
    int t = idx[i]; idx[i] = idx[j]; idx[j] = t;
    for (int a = i + 1, b = n - 1; a < b; a++, b--) { t = idx[a]; idx[a] = idx[b]; idx[b] = t; }
    return 1;
}

/* worker.batch_orders: condense, append new rows; then, reorder 'any', every other permutation */
int batch_orders(const Wcfg *wc, const Wk *w, const Row *rows, int nrows, uint8_t orders[][MAXR]) {
    int keep = 0;
    for (int i = 0; i < nrows; i++) keep |= 1 << rows[i].req;
    uint8_t *base = orders[0];
    int m = condense(w->slots, w->nslots, keep, base), have = 0;
    for (int i = 0; i < m; i++) have |= 1 << base[i];
    for (int i = 0; i < nrows; i++) if (!(have >> rows[i].req & 1)) base[m++] = (uint8_t)rows[i].req;
    if (!wc->reorder_any) return 1;
    int idx[MAXR], k = 1;
    for (int i = 0; i < m; i++) idx[i] = i;
    while (next_permutation(idx, m)) {
        if (k >= MAXORDERS) return -1;
        for (int i = 0; i < m; i++) orders[k][i] = base[idx[i]];
        k++;
    }
    return k;
}

/* ------------------------------------------------------------ feeding and shapes */

/* worker.host_read: what a CPU-built row reads for its last position */
Tok host_read(const int8_t *host, int hn, const Row *row) {
    int needs = row_needs(row);
    if (needs <= 0) return TOK(row->req, 0);
    if (hn < needs) return STALE;
    int v = host[needs - 1];
    return v < 0 ? TOK(-1, v) : TOK(row->req, v);
}

/* worker.check_feed: W1 (the first violation's values kept) */
void check_feed(WDraft *d, const Row *row, Tok fed, int off_rank) {
    Tok want = row_expected(row);
    W1Err *e = &d->w.w1;
    if (!tok_eq(fed, want)) {
        if (!e->set) *e = (W1Err){1, 1, (uint8_t)row->req, (uint8_t)off_rank, fed, want};
    } else if (row_is_decode(row) && d->w.last_sampled[row->req] != row_needs(row)) {
        if (!e->set) *e = (W1Err){1, 2, (uint8_t)row->req, 0, fed, TOK(0, d->w.last_sampled[row->req])};
    }
}

int all_decode_of(const Row *rows, int nrows) {
    for (int i = 0; i < nrows; i++) if (!row_is_decode(&rows[i])) return 0;
    return 1;
}

/* worker.shapes' padded input shape (WorkerConfig.bucket on a decode step) */
int in_shape_of(const Wcfg *wc, const Row *rows, int nrows) {
    if (all_decode_of(rows, nrows)) {
        for (int b = 0; b < wc->nbuckets; b++) if (wc->buckets[b] >= nrows) return wc->buckets[b];
        return nrows;
    }
    int sum = 0;
    for (int i = 0; i < nrows; i++) sum += rows[i].ntok;
    return sum;
}

static int mask_of(const uint8_t *order, int n) {
    int m = 0;
    for (int i = 0; i < n; i++) m |= 1 << order[i];
    return m;
}

static int same_order(const uint8_t *a, int na, const uint8_t *b, int nb) {
    return na == nb && memcmp(a, b, (size_t)na) == 0;
}

/* worker.step_events: the generic witnesses of executing `order` after the last step */
void step_events(const Wcfg *wc, WDraft *d, const Wk *ws, const uint8_t *order, int n, const Row *rows) {
    if (!ws->has_last) return;
    const LastExec *last = &ws->last;
    int all_decode = all_decode_of(rows, n), in_shape = in_shape_of(wc, rows, n);
    if (mask_of(order, n) != mask_of(last->order, last->n)) { WEMIT(d, WE_COMPOSITION); return; }
    if (!same_order(order, n, last->order, last->n)) WEMIT(d, WE_REORDER);
    if (all_decode && last->had_prefill) WEMIT(d, WE_PREFILL_TO_DECODE);
    if (all_decode && in_shape != last->out_shape) WEMIT(d, WE_BUCKET);
}

/* worker.finish_step: W4's steady-decode check, the async witness, the sampled-token ghost, LastExec */
void finish_step(const Wcfg *wc, WDraft *d, const Wk *ws, const Row *rows, int n, const uint8_t *order,
                 int out_shape, int counted_async) {
    int all_decode = all_decode_of(rows, n), in_shape = in_shape_of(wc, rows, n);
    const LastExec *last = &ws->last;
    int steady = ws->has_last && last->all_decode && all_decode && same_order(last->order, last->n, order, n)
                 && last->in_shape == in_shape;
    if (steady && !counted_async && !d->w.w4.set) {
        d->w.w4.set = 1; d->w.w4.n = (uint8_t)n; d->w.w4.shape = (int16_t)in_shape;
        memcpy(d->w.w4.order, order, (size_t)n);
    }
    if (counted_async) WEMIT(d, WE_ASYNC);
    for (int i = 0; i < n; i++) if (rows[i].spos > 0) d->w.last_sampled[rows[i].req] = (int8_t)rows[i].spos;
    LastExec *out = &d->w.last;
    memset(out, 0, sizeof *out);
    out->n = (uint8_t)n; memcpy(out->order, order, (size_t)n);
    out->all_decode = (uint8_t)all_decode; out->had_prefill = (uint8_t)!all_decode;
    out->in_shape = (int16_t)in_shape; out->out_shape = (int16_t)out_shape;
    d->w.has_last = 1;
}

/* worker.count */
void count_step(WDraft *d, const Wk *ws, int counted_async, int device_fed) {
    d->w.steps = (int16_t)(ws->steps + 1);
    d->w.async_steps = (int16_t)(ws->async_steps + counted_async);
    d->w.sync_steps = (int16_t)(ws->sync_steps + !counted_async);
    d->w.dev_steps = (int16_t)(ws->dev_steps + device_fed);
}

static int in_slots(const Wk *w, int req) {
    for (int i = 0; i < w->nslots; i++) if (w->slots[i] == req) return 1;
    return 0;
}

/* worker.forget_dropped_samples */
void forget_dropped_samples(WDraft *d, const Row *rows, int n) {
    for (int i = 0; i < n; i++) if (row_fresh(&rows[i])) d->w.last_sampled[rows[i].req] = (int8_t)rows[i].known;
}

/* worker.reset_host: finished requests dropped; a fresh row (or, `refresh_absent`, one not in the
 * last batch) takes the scheduler's outputs */
void reset_host(WDraft *d, const Wk *ws, const Row *rows, int n, int finished, int refresh_absent) {
    for (int r = 0; r < MAXR; r++)
        if (finished >> r & 1) { d->w.hn[r] = 0; d->w.last_sampled[r] = 0; }
    for (int i = 0; i < n; i++) {
        const Row *r = &rows[i];
        if (!(row_fresh(r) || (refresh_absent && !in_slots(ws, r->req)))) continue;
        d->w.hn[r->req] = 0;
        for (int p = 1; p <= r->known; p++) host_append(&d->w, r->req, p);
    }
    forget_dropped_samples(d, rows, n);
}

/* ------------------------------------------------------------ the joint relation */

static void push(JSucc *out, int *k, const St *engine, const Wk *w, int action, uint64_t events, uint32_t wev) {
    out[*k].j.s = *engine; out[*k].j.w = *w;
    out[*k].action = action; out[*k].events = events; out[*k].wev = wev;
    (*k)++;
}

/* joint._schedule: the worker executes the new step, one successor per row order */
static int schedule(const Cfg *cfg, const Wcfg *wc, const Wk *ws, const Succ *t, JSucc *out, int *k) {
    static WDraft drafts[MAXORDERS];
    const St *post = &t->s;
    const StepC *step = &post->bq[post->nbq - 1];
    int finished = finished_mask(cfg, post);
    if (!step->n) {
        if (wc->strategy != STRAT_NEURON) push(out, k, post, ws, ACT_SCHEDULE, t->events, 0);
        else if (neuron_empty_step(ws, finished, &drafts[0]))  /* none while the guard would block */
            push(out, k, post, &drafts[0].w, ACT_SCHEDULE, t->events, drafts[0].ev);
        return 0;
    }
    Row rows[MAXR];
    int n = rows_of(post, step, rows), m;
    if (wc->strategy == STRAT_V1) m = v1_execute(wc, ws, rows, n, finished, drafts);
    else if (wc->strategy == STRAT_V2) m = v2_execute(wc, ws, rows, n, finished, drafts);
    else m = neuron_execute(wc, ws, rows, n, finished, drafts);
    if (m < 0) return -1;
    for (int i = 0; i < m; i++)
        push(out, k, post, &drafts[i].w, i ? ACT_ORDER + i - 1 : ACT_SCHEDULE, t->events, drafts[i].ev);
    return 0;
}

/* joint.joint_next_states: engine actions (a schedule with the worker's execution; Neuron: an
 * update_from_output only once the oldest output is delivered), then the output thread's action */
int joint_next_states(const Cfg *cfg, const Wcfg *wc, const JSt *s, JSucc *out) {
    static Succ esucc[MAXSUCC];
    int ne = next_states(cfg, &s->s, esucc), k = 0, neuron = wc->strategy == STRAT_NEURON;
    if (ne < 0) return -1;
    for (int t = 0; t < ne; t++) {
        if (esucc[t].action == ACT_SCHEDULE) {
            if (schedule(cfg, wc, &s->w, &esucc[t], out, &k) < 0) return -1;
        } else if (neuron && esucc[t].action >= ACT_UPDATE) {
            if (!neuron_can_deliver(&s->w)) continue;
            Wk w = s->w;
            neuron_engine_processed(&w);
            push(out, &k, &esucc[t].s, &w, esucc[t].action, esucc[t].events, 0);
        } else {
            push(out, &k, &esucc[t].s, &s->w, esucc[t].action, esucc[t].events, 0);
        }
    }
    WDraft d;
    int action;
    if (neuron && neuron_output_thread(&s->w, &d, &action)) push(out, &k, &s->s, &d.w, action, 0, d.ev);
    return k;
}

/* ------------------------------------------------------------ W1-W4 */

int worker_prop_violated(const Wcfg *wc, const Wk *w, int wprop) {
    (void)wc;
    switch (wprop) {
    case 0: return w->w1.set;
    case 2: return w->w3.set;
    case 3: return w->async_steps + w->sync_steps != w->steps || w->async_steps != w->dev_steps || w->w4.set;
    default: return neuron_w2_violated(w);
    }
}

/* ------------------------------------------------------------ the worker's bytes */

typedef struct { uint8_t *buf; int pos, bad; } Bytes;

static void put1(Bytes *b, int v) {
    if (v < -128 || v > 127) b->bad = 1;
    b->buf[b->pos++] = (uint8_t)(int8_t)v;
}
static void put2(Bytes *b, int v) { b->buf[b->pos++] = (uint8_t)(v & 0xFF); b->buf[b->pos++] = (uint8_t)((v >> 8) & 0xFF); }
static int get1(const uint8_t *buf, int *pos) { return (int8_t)buf[(*pos)++]; }
static int get2(const uint8_t *buf, int *pos) { int v = buf[*pos] | buf[*pos + 1] << 8; *pos += 2; return (int16_t)v; }
static void put_tok(Bytes *b, Tok t) { put1(b, t.r); put1(b, t.p); }
static Tok get_tok(const uint8_t *buf, int *pos) { int r = get1(buf, pos); return TOK(r, get1(buf, pos)); }

static void put_list(Bytes *b, const uint8_t *a, int n) { put1(b, n); for (int i = 0; i < n; i++) put1(b, a[i]); }
static int get_list(const uint8_t *buf, int *pos, uint8_t *a, int max) {
    int n = get1(buf, pos);
    for (int i = 0; i < n && i < max; i++) a[i] = (uint8_t)get1(buf, pos);
    return n;
}

static void put_host(Bytes *b, const Cfg *cfg, const uint8_t *hn, const int8_t (*host)[MAXH]) {
    for (int r = 0; r < cfg->n; r++) { put1(b, hn[r]); for (int i = 0; i < hn[r]; i++) put1(b, host[r][i]); }
}
static void get_host(const uint8_t *buf, int *pos, const Cfg *cfg, uint8_t *hn, int8_t host[][MAXH]) {
    for (int r = 0; r < cfg->n; r++) {
        hn[r] = (uint8_t)get1(buf, pos);
        for (int i = 0; i < hn[r]; i++) host[r][i] = (int8_t)get1(buf, pos);
    }
}

/* the fields every strategy changes: batch, ghosts, counters, LastExec, the W1 and W4 values */
static void put_common(Bytes *b, const Cfg *cfg, const Wk *w) {
    put_list(b, w->slots, w->nslots);
    for (int r = 0; r < cfg->n; r++) put1(b, w->last_sampled[r]);
    put2(b, w->steps); put2(b, w->async_steps); put2(b, w->sync_steps); put2(b, w->dev_steps);
    put1(b, w->has_last);
    if (w->has_last) {
        put_list(b, w->last.order, w->last.n);
        put1(b, w->last.all_decode); put1(b, w->last.had_prefill); put2(b, w->last.in_shape); put2(b, w->last.out_shape);
    }
    put1(b, w->w1.set);
    if (w->w1.set) { put1(b, w->w1.kind); put1(b, w->w1.req); put1(b, w->w1.off_rank); put_tok(b, w->w1.fed); put_tok(b, w->w1.want); }
    put1(b, w->w4.set);
    if (w->w4.set) { put_list(b, w->w4.order, w->w4.n); put2(b, w->w4.shape); }
}

static void get_common(const uint8_t *buf, int *pos, const Cfg *cfg, Wk *w) {
    w->nslots = (uint8_t)get_list(buf, pos, w->slots, MAXR);
    for (int r = 0; r < cfg->n; r++) w->last_sampled[r] = (int8_t)get1(buf, pos);
    w->steps = (int16_t)get2(buf, pos); w->async_steps = (int16_t)get2(buf, pos);
    w->sync_steps = (int16_t)get2(buf, pos); w->dev_steps = (int16_t)get2(buf, pos);
    if ((w->has_last = (uint8_t)get1(buf, pos))) {
        w->last.n = (uint8_t)get_list(buf, pos, w->last.order, MAXR);
        w->last.all_decode = (uint8_t)get1(buf, pos); w->last.had_prefill = (uint8_t)get1(buf, pos);
        w->last.in_shape = (int16_t)get2(buf, pos); w->last.out_shape = (int16_t)get2(buf, pos);
    }
    if ((w->w1.set = (uint8_t)get1(buf, pos))) {
        w->w1.kind = (uint8_t)get1(buf, pos); w->w1.req = (uint8_t)get1(buf, pos); w->w1.off_rank = (uint8_t)get1(buf, pos);
        w->w1.fed = get_tok(buf, pos); w->w1.want = get_tok(buf, pos);
    }
    if ((w->w4.set = (uint8_t)get1(buf, pos))) {
        w->w4.n = (uint8_t)get_list(buf, pos, w->w4.order, MAXR);
        w->w4.shape = (int16_t)get2(buf, pos);
    }
}

/* Neuron: both ranks' host histories, the buffer, the output records, the W2 and W3 values */
static void put_neuron(Bytes *b, const Cfg *cfg, const Wk *w) {
    put_host(b, cfg, w->hn, w->host);
    put_host(b, cfg, w->ohn, w->off_host);
    put1(b, w->has_buf);
    if (w->has_buf) {
        put_list(b, w->bo, w->nbo);
        put1(b, w->nfut);
        for (int i = 0; i < w->nfut; i++) put_tok(b, w->fut[i]);
        put2(b, w->bstep); put1(b, w->off_act);
    }
    put1(b, w->nout);
    for (int k = 0; k < w->nout; k++) {
        const ORec *o = &w->out[k];
        put2(b, o->step); put1(b, o->n);
        for (int i = 0; i < o->n; i++) { put1(b, o->req[i]); put1(b, o->pos[i]); }
        put1(b, o->actualized); put1(b, o->mats); put1(b, o->waiters); put1(b, o->thread_waiting); put1(b, o->delivered);
    }
    put1(b, w->w2.set);
    if (w->w2.set) { put2(b, w->w2.step); put2(b, w->w2.mats); }
    put1(b, w->w3.set);
    if (w->w3.set) { put2(b, w->w3.prev); put2(b, w->w3.curr); put2(b, w->w3.step); }
}

static void get_neuron(const uint8_t *buf, int *pos, const Cfg *cfg, Wk *w) {
    get_host(buf, pos, cfg, w->hn, w->host);
    get_host(buf, pos, cfg, w->ohn, w->off_host);
    if ((w->has_buf = (uint8_t)get1(buf, pos))) {
        w->nbo = (uint8_t)get_list(buf, pos, w->bo, MAXR);
        w->nfut = (uint8_t)get1(buf, pos);
        for (int i = 0; i < w->nfut; i++) w->fut[i] = get_tok(buf, pos);
        w->bstep = (int16_t)get2(buf, pos); w->off_act = (uint8_t)get1(buf, pos);
    }
    w->nout = (uint8_t)get1(buf, pos);
    for (int k = 0; k < w->nout; k++) {
        ORec *o = &w->out[k];
        o->step = (int16_t)get2(buf, pos); o->n = (uint8_t)get1(buf, pos);
        for (int i = 0; i < o->n; i++) { o->req[i] = (uint8_t)get1(buf, pos); o->pos[i] = (int8_t)get1(buf, pos); }
        o->actualized = (uint8_t)get1(buf, pos); o->mats = (uint8_t)get1(buf, pos); o->waiters = (uint8_t)get1(buf, pos);
        o->thread_waiting = (uint8_t)get1(buf, pos); o->delivered = (uint8_t)get1(buf, pos);
    }
    if ((w->w2.set = (uint8_t)get1(buf, pos))) { w->w2.step = (int16_t)get2(buf, pos); w->w2.mats = (int16_t)get2(buf, pos); }
    if ((w->w3.set = (uint8_t)get1(buf, pos))) {
        w->w3.prev = (uint8_t)get2(buf, pos); w->w3.curr = (uint8_t)get2(buf, pos); w->w3.step = (int16_t)get2(buf, pos);
    }
}

/* bytes written; -1 when a value does not fit */
int worker_encode(const Cfg *cfg, const Wcfg *wc, const Wk *w, uint8_t *buf) {
    Bytes b = {buf, 0, w->bad};
    put_common(&b, cfg, w);
    if (wc->strategy == STRAT_V1) {
        put_host(&b, cfg, w->hn, w->host);
        put1(&b, w->has_prev);
        put1(&b, w->nprev);
        for (int i = 0; i < w->nprev; i++) { put1(&b, w->prev_req[i]); put1(&b, w->prev_row[i]); }
        put1(&b, w->nps);
        for (int i = 0; i < w->nps; i++) put_tok(&b, w->prev_sampled[i]);
    } else if (wc->strategy == STRAT_V2) {
        for (int r = 0; r < cfg->n; r++) { put1(&b, w->req_slot[r]); put2(&b, w->prefill_len[r]); put_tok(&b, w->slot_tokens[r]); }
    } else {
        put_neuron(&b, cfg, w);
    }
    return b.bad ? -1 : b.pos;
}

int worker_decode(const Cfg *cfg, const Wcfg *wc, const uint8_t *buf, Wk *w) {
    int pos = 0;
    worker_init(cfg, w);
    get_common(buf, &pos, cfg, w);
    if (wc->strategy == STRAT_V1) {
        get_host(buf, &pos, cfg, w->hn, w->host);
        w->has_prev = (uint8_t)get1(buf, &pos);
        w->nprev = (uint8_t)get1(buf, &pos);
        for (int i = 0; i < w->nprev; i++) { w->prev_req[i] = (uint8_t)get1(buf, &pos); w->prev_row[i] = (uint8_t)get1(buf, &pos); }
        w->nps = (uint8_t)get1(buf, &pos);
        for (int i = 0; i < w->nps; i++) w->prev_sampled[i] = get_tok(buf, &pos);
    } else if (wc->strategy == STRAT_V2) {
        for (int r = 0; r < cfg->n; r++) {
            w->req_slot[r] = (int8_t)get1(buf, &pos); w->prefill_len[r] = (int16_t)get2(buf, &pos);
            w->slot_tokens[r] = get_tok(buf, &pos);
        }
    } else {
        get_neuron(buf, &pos, cfg, w);
    }
    return pos;
}
