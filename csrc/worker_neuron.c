/* spec/worker_neuron.py in C: vllm-neuron's async_execution_buffer, the per-output lock and the
 * output thread, on the output TP rank (host) and one other rank (off_host).
 *
 * The spec's local `buf` of execute / execute_empty_step is the draft's buffer fields (has_buf,
 * fut, bo, bstep, off_act): the guard and the swap change only off_act on it, and a step's
 * sample_tokens replaces it (an empty step keeps the guard's).  Blocked (the main thread would
 * wait on the output thread's lock) is the return value BLOCKED. */
#include <string.h>
#include "worker.h"

#define BLOCKED (-1)

/* worker_neuron._is_sample: a kept sample (not a discarded partial-prefill row, not padding) */
static int is_sample(Tok t) { return t.r >= 0 || tok_eq(t, RESAMPLED); }

/* worker_neuron._neuron_sample: the row's sampled position, 0 (inside the prompt) or RESAMPLED's */
static int neuron_sample(const Row *row) {
    if (row->spos > 0 || row->last + 1 < row->nprompt) return row->spos;
    return RESAMPLED.p;
}

static int in_batch(const uint8_t *batch, int n, int req) {
    for (int i = 0; i < n; i++) if (batch[i] == req) return 1;
    return 0;
}

static int mask_of(const uint8_t *a, int n) {
    int m = 0;
    for (int i = 0; i < n; i++) m |= 1 << a[i];
    return m;
}

static void off_append(Wk *w, int req, int value) {
    if (w->ohn[req] >= MAXH) { w->bad = 1; return; }
    w->off_host[req][w->ohn[req]++] = (int8_t)value;
}

/* worker.OutputRec.samples: some row samples a token */
static int rec_samples(const ORec *o) {
    for (int i = 0; i < o->n; i++) if (o->pos[i] != 0) return 1;
    return 0;
}

/* worker_neuron._write_samples: append each sampling row's position, rows still in `batch` */
static void write_samples(Wk *w, const ORec *rec, const uint8_t *batch, int nb) {
    for (int i = 0; i < rec->n; i++)
        if (rec->pos[i] != 0 && in_batch(batch, nb, rec->req[i])) host_append(w, rec->req[i], rec->pos[i]);
}

/* worker_neuron._materialize: actualise output i (host write, counters); a waiter leaves */
static void materialize(Wk *w, int i, const uint8_t *batch, int nb, int waiter_done) {
    ORec *rec = &w->out[i];
    write_samples(w, rec, batch, nb);
    rec->actualized = 1;
    rec->mats++;
    rec->waiters = (uint8_t)(rec->waiters - waiter_done);
}

/* worker_neuron.output_index: where step `step`'s output is (-1: the engine has processed it) */
static int output_index(const Wk *w, int step) {
    for (int k = 0; k < w->nout; k++) if (w->out[k].step == step) return k;
    return -1;
}

/* worker_neuron.main_materialize: 1 (materialised, or nothing to do), 0 (all partial prefill:
 * refused) or BLOCKED (the output thread holds the lock) */
static int main_materialize(WDraft *d, int step, const uint8_t *batch, int nb) {
    int i = output_index(&d->w, step);
    if (i < 0) return 1;
    ORec *rec = &d->w.out[i];
    if (!rec_samples(rec)) return 0;
    if (rec->thread_waiting) return BLOCKED;
    if (rec->actualized) { WEMIT(d, WE_ALREADY_ACTUALIZED); return 1; }
    WEMIT(d, WE_MATERIALIZE_MAIN);
    materialize(&d->w, i, batch, nb, 0);
    return 1;
}

/* worker_neuron._off_materialize: the non-output rank's get_output on its copy of the buffer's output */
static void off_materialize(Wk *w, const uint8_t *batch, int nb) {
    if (w->off_act) return;
    int n = w->nbo < w->nfut ? w->nbo : w->nfut;
    for (int i = 0; i < n; i++)
        if (is_sample(w->fut[i]) && in_batch(batch, nb, w->bo[i])) off_append(w, w->bo[i], w->fut[i].p);
    w->off_act = 1;
}

/* worker_neuron.materialize_pending: 1 when _materialize_pending_async_output returned True, 0, BLOCKED */
static int materialize_pending(WDraft *d, const uint8_t *batch, int nb) {
    int m = main_materialize(d, d->w.bstep, batch, nb);
    if (m == 1) off_materialize(&d->w, batch, nb);
    return m;
}

/* worker_neuron._guard (with _guard_materialize): 1 when the composition changed, 0, BLOCKED; W3 */
static int guard(WDraft *d, const Wk *ws, int curr) {
    if (!ws->has_buf || curr == mask_of(ws->bo, ws->nbo)) return 0;
    if (materialize_pending(d, ws->slots, ws->nslots) == BLOCKED) return BLOCKED;
    int i = output_index(&d->w, d->w.bstep);
    if (i >= 0 && rec_samples(&d->w.out[i]) && !d->w.out[i].actualized && !d->w.w3.set)
        d->w.w3 = (W3Err){1, (uint8_t)mask_of(ws->bo, ws->nbo), (uint8_t)curr, d->w.bstep};
    return 1;
}

/* worker_neuron._update_states: reset_host on the output rank, the same re-adds on the other rank */
static void update_states(WDraft *d, const Wk *ws, const Row *rows, int n, int finished) {
    reset_host(d, ws, rows, n, finished, 1);
    for (int r = 0; r < MAXR; r++) if (finished >> r & 1) d->w.ohn[r] = 0;
    for (int i = 0; i < n; i++) {
        int req = rows[i].req;
        if (!(row_fresh(&rows[i]) || !in_batch(ws->slots, ws->nslots, req))) continue;
        d->w.ohn[req] = d->w.hn[req];
        memcpy(d->w.off_host[req], d->w.host[req], sizeof d->w.host[req]);
    }
}

/* worker_neuron._reuse_future: the future as it is (same order: counted async) or remapped */
static int reuse_future(WDraft *d, const uint8_t *order, int n, Tok *fed) {
    const Wk *w = &d->w;
    if (n == w->nbo && memcmp(order, w->bo, (size_t)n) == 0) {
        for (int i = 0; i < n; i++) fed[i] = w->fut[i];
        return 1;
    }
    WEMIT(d, WE_REMAP);
    for (int i = 0; i < n; i++) {
        int k = 0;
        while (k < w->nbo && w->bo[k] != order[i]) k++;
        fed[i] = w->fut[k];
    }
    return 0;
}

/* worker_neuron._materialize_after_decline: 1 / 0 as materialize_pending (0 without a buffer), BLOCKED */
static int materialize_after_decline(WDraft *d, const uint8_t *order, int n, int changed, int all_decode) {
    if (!d->w.has_buf) return 0;
    if (all_decode && !changed) WEMIT(d, WE_MISMATCH);
    return materialize_pending(d, order, n);
}

/* worker_neuron._fixup: each row whose request has a kept sample in the buffer takes it */
static void fixup(const Wk *w, const uint8_t *order, int n, Tok *fed) {
    int m = w->nbo < w->nfut ? w->nbo : w->nfut;
    for (int i = 0; i < n; i++)
        for (int k = 0; k < m; k++)
            if (w->bo[k] == order[i] && is_sample(w->fut[k])) fed[i] = w->fut[k];
}

/* worker_neuron._swap: fed on both ranks; *counted_async (= device fed); BLOCKED or 0 */
static int swap(const Wcfg *wc, WDraft *d, const Row *rows, int n, const uint8_t *order, int changed,
                Tok *fed, Tok *fed_off, int *counted_async) {
    int all_decode = all_decode_of(rows, n), in_shape = in_shape_of(wc, rows, n);
    *counted_async = 0;
    if (d->w.has_buf && all_decode && !changed && d->w.nfut == in_shape) {
        *counted_async = reuse_future(d, order, n, fed);
        memcpy(fed_off, fed, (size_t)n * sizeof *fed);
        return 0;
    }
    int m = materialize_after_decline(d, order, n, changed, all_decode);
    if (m == BLOCKED) return BLOCKED;
    for (int i = 0; i < n; i++) {
        const Row *row = row_of(rows, n, order[i]);
        fed[i] = host_read(d->w.host[order[i]], d->w.hn[order[i]], row);
        fed_off[i] = host_read(d->w.off_host[order[i]], d->w.ohn[order[i]], row);
    }
    if (d->w.has_buf && m && all_decode) { fixup(&d->w, order, n, fed); fixup(&d->w, order, n, fed_off); }
    return 0;
}

/* worker_neuron._sample (and _future_shape): the new future and buffer, the output record,
 * finish_step, the counters */
static void sample(const Wcfg *wc, WDraft *d, const Wk *ws, const Row *rows, int n, const uint8_t *order,
                   int counted_async) {
    Wk *w = &d->w;
    int out_shape = all_decode_of(rows, n) ? in_shape_of(wc, rows, n) : n;
    if (out_shape > MAXTOK || w->nout >= MAXOUTS) { w->bad = 1; return; }
    ORec *rec = &w->out[w->nout++];
    memset(rec, 0, sizeof *rec);
    rec->step = (int16_t)(ws->steps + 1); rec->n = (uint8_t)n;
    for (int i = 0; i < n; i++) {
        int pos = neuron_sample(row_of(rows, n, order[i]));
        rec->req[i] = order[i]; rec->pos[i] = (int8_t)pos;
        w->fut[i] = pos > 0 ? TOK(order[i], pos) : pos < 0 ? RESAMPLED : DISCARDED;
    }
    for (int i = n; i < out_shape; i++) w->fut[i] = PAD;
    w->nfut = (uint8_t)out_shape;
    finish_step(wc, d, ws, rows, n, order, out_shape, counted_async);
    w->nslots = (uint8_t)n; memcpy(w->slots, order, (size_t)n);
    w->has_buf = 1; w->nbo = (uint8_t)n; memcpy(w->bo, order, (size_t)n);
    w->bstep = rec->step; w->off_act = 0;
    count_step(d, ws, counted_async, counted_async);
}

/* worker_neuron.execute: one execute_model + sample_tokens per row order, on both ranks; no
 * successor while the main thread would block on the output thread's lock */
int neuron_execute(const Wcfg *wc, const Wk *ws, const Row *rows, int n, int finished, WDraft *out) {
    static uint8_t orders[MAXORDERS][MAXR];
    int m = batch_orders(wc, ws, rows, n, orders), curr = 0;
    if (m < 0) return -1;
    for (int i = 0; i < n; i++) curr |= 1 << rows[i].req;
    for (int o = 0; o < m; o++) {
        const uint8_t *order = orders[o];
        WDraft *d = &out[o];
        Tok fed[MAXR], fed_off[MAXR];
        int counted_async;
        d->w = *ws; d->ev = 0;
        step_events(wc, d, ws, order, n, rows);
        int changed = guard(d, ws, curr);
        if (changed == BLOCKED) return 0;
        update_states(d, ws, rows, n, finished);
        if (swap(wc, d, rows, n, order, changed, fed, fed_off, &counted_async) == BLOCKED) return 0;
        for (int i = 0; i < n; i++) {
            const Row *row = row_of(rows, n, order[i]);
            check_feed(d, row, fed[i], 0);
            check_feed(d, row, fed_off[i], 1);
        }
        sample(wc, d, ws, rows, n, order, counted_async);
    }
    return m;
}

/* worker_neuron.execute_empty_step: the guard, _update_states dropping every row, an empty
 * (delivered) output; 0 while the main thread would block */
int neuron_empty_step(const Wk *ws, int finished, WDraft *d) {
    d->w = *ws; d->ev = 0;
    if (guard(d, ws, 0) == BLOCKED) return 0;
    update_states(d, ws, NULL, 0, finished);
    if (d->w.nout >= MAXOUTS) { d->w.bad = 1; return 1; }
    ORec *rec = &d->w.out[d->w.nout++];
    memset(rec, 0, sizeof *rec);
    rec->actualized = 1; rec->delivered = 1;
    d->w.nslots = 0;
    return 1;
}

/* worker_neuron.output_thread_actions + output_thread_step: the output thread's one enabled action
 * on the oldest undelivered output (0: none); *action ACT_OUTPUT_WAIT or ACT_OUTPUT_DONE */
int neuron_output_thread(const Wk *ws, WDraft *d, int *action) {
    int i = 0;
    while (i < ws->nout && ws->out[i].delivered) i++;
    if (i == ws->nout) return 0;
    d->w = *ws; d->ev = 0;
    ORec *rec = &d->w.out[i];
    if (!rec->thread_waiting) {
        *action = ACT_OUTPUT_WAIT;
        if (rec->actualized) { WEMIT(d, WE_ALREADY_ACTUALIZED); rec->delivered = 1; }
        else { rec->thread_waiting = 1; rec->waiters++; }
        return 1;
    }
    *action = ACT_OUTPUT_DONE;
    materialize(&d->w, i, ws->slots, ws->nslots, 1);
    rec->thread_waiting = 0; rec->delivered = 1;
    return 1;
}

/* worker_neuron.can_deliver: the oldest step's output was delivered */
int neuron_can_deliver(const Wk *w) { return w->nout > 0 && w->out[0].delivered; }

/* worker_neuron.engine_processed: drop the oldest output; W2 if not materialised exactly once */
void neuron_engine_processed(Wk *w) {
    ORec rec = w->out[0];
    memmove(w->out, w->out + 1, (size_t)(w->nout - 1) * sizeof *w->out);
    memset(&w->out[--w->nout], 0, sizeof *w->out);
    if (rec.step > 0 && rec.mats != 1 && !w->w2.set) w->w2 = (W2Err){1, rec.step, rec.mats};
}

/* worker.w2_materialized_once: the recorded violation, or an output materialised twice, with
 * two waiters, or delivered without exactly one materialisation */
int neuron_w2_violated(const Wk *w) {
    if (w->w2.set) return 1;
    for (int k = 0; k < w->nout; k++) {
        const ORec *o = &w->out[k];
        if (o->mats > 1 || o->waiters > 1 || (o->delivered && o->step > 0 && o->mats != 1)) return 1;
    }
    return 0;
}
