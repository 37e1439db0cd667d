/* spec/worker_v2.py in C: Model Runner V2, the last sampled token kept per request slot. */
#include "worker.h"

/* a Python index into a list of `len` (a negative one counts from the end) */
static int py_index(int i, int len) { return i < 0 ? i + len : i; }

/* worker_v2._assign_slots: free finished and re-added requests' slots, fresh rows take the lowest free */
static void assign_slots(const Wk *ws, const Row *rows, int n, int finished, int nreq, int8_t *slot, int16_t *plen) {
    for (int r = 0; r < MAXR; r++) { slot[r] = ws->req_slot[r]; plen[r] = ws->prefill_len[r]; }
    for (int r = 0; r < MAXR; r++) if (finished >> r & 1) slot[r] = -1;
    for (int i = 0; i < n; i++) if (row_fresh(&rows[i])) slot[rows[i].req] = -1;
    for (int i = 0; i < n; i++) {
        if (!row_fresh(&rows[i])) continue;
        int free = 0;
        for (int used = 1; used && free < nreq; ) {
            used = 0;
            for (int r = 0; r < nreq; r++) if (slot[r] == free) used = 1;
            if (used) free++;
        }
        slot[rows[i].req] = (int8_t)free;
        plen[rows[i].req] = (int16_t)(rows[i].nprompt + rows[i].known);
    }
}

/* worker_v2._fed: the row's last input token; *dev: whether it came from last_sampled_tokens */
static Tok fed_token(const Wk *ws, const Row *row, int slot, int plen, int nreq, int *dev) {
    if (row->last < plen) { *dev = 0; return row_expected(row); }
    *dev = 1;
    return slot < nreq ? ws->slot_tokens[py_index(slot, nreq)] : STALE;
}

/* worker_v2.execute: one step per row order, everything on the device; the drafts in `out` */
int v2_execute(const Wcfg *wc, const Wk *ws, const Row *rows, int n, int finished, WDraft *out) {
    static uint8_t orders[MAXORDERS][MAXR];
    int nreq = wc->nreq;
    int8_t slot[MAXR];
    int16_t plen[MAXR];
    assign_slots(ws, rows, n, finished, nreq, slot, plen);
    int m = batch_orders(wc, ws, rows, n, orders);
    if (m < 0) return -1;
    for (int o = 0; o < m; o++) {
        const uint8_t *order = orders[o];
        WDraft *d = &out[o];
        d->w = *ws; d->ev = 0;
        step_events(wc, d, ws, order, n, rows);
        forget_dropped_samples(d, rows, n);
        int from_device = 0;
        for (int i = 0; i < n; i++) {
            const Row *row = row_of(rows, n, order[i]);
            int dev;
            Tok fed = fed_token(ws, row, slot[order[i]], plen[order[i]], nreq, &dev);
            from_device += dev;
            check_feed(d, row, fed, 0);
        }
        int all_decode = all_decode_of(rows, n), shape = all_decode ? in_shape_of(wc, rows, n) : n;
        int fed_all = all_decode && from_device == n;
        for (int i = 0; i < n; i++) {
            const Row *row = row_of(rows, n, order[i]);
            if (row->spos > 0) d->w.slot_tokens[py_index(slot[order[i]], nreq)] = TOK(order[i], row->spos);
        }
        finish_step(wc, d, ws, rows, n, order, shape, fed_all);
        for (int r = 0; r < MAXR; r++) { d->w.req_slot[r] = slot[r]; d->w.prefill_len[r] = plen[r]; }
        d->w.nslots = (uint8_t)n;
        for (int i = 0; i < n; i++) d->w.slots[i] = order[i];
        count_step(d, ws, fed_all, fed_all);
    }
    return m;
}
