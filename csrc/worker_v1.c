/* spec/worker_v1.py in C: vLLM's V1 GPU runner, previous tokens gathered by prev_req_id_to_index. */
#include "worker.h"

/* worker_v1._device_token: the previous sample at the request's previous row */
static Tok device_token(const Wk *ws, int index) {
    return index < ws->nps ? ws->prev_sampled[index] : STALE;
}

/* the request's row in prev_req_id_to_index, -1 if absent or removed (a resumed request) */
static int prev_index(const Wk *ws, const Row *rows, int n, int req) {
    const Row *row = row_of(rows, n, req);
    if (row && row_fresh(row)) return -1;
    for (int i = 0; i < ws->nprev; i++) if (ws->prev_req[i] == req) return ws->prev_row[i];
    return -1;
}

/* _bookkeeping_sync: prev_req_id_to_index and prev_sampled_token_ids for the sampling rows, padded */
static void bookkeeping(WDraft *d, const Row *rows, int n, const uint8_t *order, int shape) {
    Wk *w = &d->w;
    w->has_prev = 1; w->nprev = 0;
    if (shape > MAXTOK) { w->bad = 1; return; }
    for (int i = 0; i < n; i++) {
        const Row *row = row_of(rows, n, order[i]);
        if (row->spos > 0) { w->prev_req[w->nprev] = order[i]; w->prev_row[w->nprev++] = (uint8_t)i; }
        w->prev_sampled[i] = row->spos > 0 ? TOK(order[i], row->spos) : DISCARDED;
    }
    for (int i = n; i < shape; i++) w->prev_sampled[i] = PAD;
    w->nps = (uint8_t)shape;
}

/* worker_v1.execute: one execute_model + sample_tokens per row order; the drafts in `out` */
int v1_execute(const Wcfg *wc, const Wk *ws, const Row *rows, int n, int finished, WDraft *out) {
    static uint8_t orders[MAXORDERS][MAXR];
    int m = batch_orders(wc, ws, rows, n, orders);
    if (m < 0) return -1;
    for (int o = 0; o < m; o++) {
        const uint8_t *order = orders[o];
        WDraft *d = &out[o];
        d->w = *ws; d->ev = 0;
        step_events(wc, d, ws, order, n, rows);
        reset_host(d, ws, rows, n, finished, 1);
        int from_device = 0;
        for (int i = 0; i < n; i++) {
            const Row *row = row_of(rows, n, order[i]);
            int index = prev_index(ws, rows, n, order[i]);
            Tok fed;
            if (index >= 0) { fed = device_token(ws, index); from_device++; }
            else fed = host_read(d->w.host[row->req], d->w.hn[row->req], row);
            check_feed(d, row, fed, 0);
        }
        if (0 < from_device && from_device < n) WEMIT(d, WE_CPU_ROW);
        int all_decode = all_decode_of(rows, n), shape = all_decode ? in_shape_of(wc, rows, n) : n;
        int fed_all = ws->has_prev && all_decode && from_device == n;
        finish_step(wc, d, ws, rows, n, order, shape, fed_all);
        for (int i = 0; i < n; i++) if (row_of(rows, n, order[i])->spos > 0) host_append(&d->w, order[i], -1);
        d->w.nslots = (uint8_t)n;
        for (int i = 0; i < n; i++) d->w.slots[i] = order[i];
        bookkeeping(d, rows, n, order, shape);
        count_step(d, ws, fed_all, fed_all);
    }
    return m;
}
