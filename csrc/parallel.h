/* --jobs K for the compiled explorer (included by explore_py.h): a batch of known parents is
 * expanded by K threads (decode, next_states, canonical form, encoding, every property), with the
 * GIL released; then this thread integrates the successors in index order, exactly as
 * explorer_run does one parent at a time, so the result is the single-thread one. */
#include <pthread.h>

#define BATCH 2048

typedef struct {          /* one successor, expanded: its bit string in the worker's buffer */
    uint32_t at, len, props;
    uint64_t events;
    uint8_t action;
} Done;

typedef struct {
    Explorer *e;
    size_t lo, hi;        /* parents [lo, hi) */
    Succ *succ;
    uint8_t *buf; size_t buf_len, buf_cap;
    Done *done; size_t ndone, done_cap;
    uint32_t *first;      /* per parent: index of its first Done; first[hi - lo] = ndone */
    int error;            /* -1 memory, -2 encoding, -3 acceptance choices */
} Worker;

static void *expand_slice(void *arg) {
    Worker *w = arg;
    Explorer *e = w->e;
    uint8_t enc[4096];
    St s;
    w->ndone = 0; w->buf_len = 0;
    for (size_t i = w->lo; i < w->hi && !w->error; i++) {
        w->first[i - w->lo] = (uint32_t)w->ndone;
        decode(&e->cfg, e->arena + e->off[i], &s);
        int k = next_states(&e->cfg, &s, w->succ);
        if (k < 0) { w->error = -3; break; }
        for (int t = 0; t < k; t++) {
            canonical(&w->succ[t].s);
            int len = encode(&e->cfg, &w->succ[t].s, enc);
            if (len < 0) { w->error = -2; break; }
            w->buf = grow(w->buf, &w->buf_cap, w->buf_len + (size_t)len, 1);
            w->done = grow(w->done, &w->done_cap, w->ndone + 1, sizeof *w->done);
            if (!w->buf || !w->done) { w->error = -1; break; }
            uint32_t props = 0;
            for (int p = 0; p < e->nprops; p++) props |= (uint32_t)prop_violated(&e->cfg, &w->succ[t].s, e->props[p]) << p;
            Done *d = &w->done[w->ndone++];
            d->at = (uint32_t)w->buf_len; d->len = (uint32_t)len; d->events = w->succ[t].events;
            d->props = props; d->action = (uint8_t)w->succ[t].action;
            memcpy(w->buf + w->buf_len, enc, (size_t)len);
            w->buf_len += (size_t)len;
        }
    }
    w->first[w->hi - w->lo] = (uint32_t)w->ndone;
    return NULL;
}

/* explorer_run over K threads; the same statuses. */
static PyObject *run_parallel(Explorer *e, long budget, int jobs) {
    Worker w[16];
    memset(w, 0, sizeof w);
    PyObject *status = NULL;
    for (int t = 0; t < jobs; t++) {
        w[t].e = e;
        w[t].succ = malloc(sizeof(Succ) * MAXSUCC);
        w[t].first = malloc(sizeof(uint32_t) * (BATCH + 1));
        if (!w[t].succ || !w[t].first) { PyErr_NoMemory(); goto out; }
    }
    for (long done = 0; e->head < e->n && !status; ) {
        if (done >= budget) { status = PyLong_FromLong(0); break; }
        size_t lo = e->head, hi = e->n, per;
        if (hi - lo > BATCH) hi = lo + BATCH;
        per = (hi - lo + (size_t)jobs - 1) / (size_t)jobs;
        pthread_t th[16];
        int started = 0;
        Py_BEGIN_ALLOW_THREADS
        for (int t = 0; t < jobs; t++) {
            w[t].lo = lo + per * (size_t)t < hi ? lo + per * (size_t)t : hi;
            w[t].hi = w[t].lo + per < hi ? w[t].lo + per : hi;
            w[t].error = 0;
            if (t > 0 && pthread_create(&th[t], NULL, expand_slice, &w[t]) == 0) started |= 1 << t;
            else if (t > 0) expand_slice(&w[t]);
        }
        expand_slice(&w[0]);
        for (int t = 1; t < jobs; t++) if (started >> t & 1) pthread_join(th[t], NULL);
        Py_END_ALLOW_THREADS
        for (int t = 0; t < jobs && !status; t++) {
            if (w[t].error) { status = store_error(w[t].error == -1 ? -1 : -2); goto out; }
            for (size_t i = w[t].lo; i < w[t].hi; i++) {
                e->edge_start[i] = (uint32_t)e->edges;
                for (uint32_t j = w[t].first[i - w[t].lo]; j < w[t].first[i - w[t].lo + 1]; j++) {
                    Done *d = &w[t].done[j];
                    e->transitions++;
                    e->witnesses |= d->events;
                    int is_new;
                    while (e->head_depth + 1 < e->nlevels && i >= e->levels[e->head_depth + 1]) e->head_depth++;
                    long long k = store_add(e, w[t].buf + d->at, d->len, (int)i, d->action, e->head_depth + 1, &is_new);
                    if (k < 0) { status = store_error(k); goto out; }
                    if (add_edge(e, (size_t)k) < 0) { status = PyErr_NoMemory(); goto out; }
                    if ((size_t)k <= i) e->back_edges++;
                    if (is_new && record_props(e, d->props, (size_t)k) < 0) goto out;
                }
                e->edge_start[i + 1] = (uint32_t)e->edges;
                e->head++;
                done++;
                if (e->max_states && e->n >= e->max_states && e->head < e->n) { status = PyLong_FromLong(3); break; }
                if (e->stopped) { status = PyLong_FromLong(2); break; }
            }
        }
    }
    if (!status && !PyErr_Occurred()) status = PyLong_FromLong(1);
out:
    for (int t = 0; t < jobs; t++) { free(w[t].succ); free(w[t].first); free(w[t].buf); free(w[t].done); }
    return status;
}
