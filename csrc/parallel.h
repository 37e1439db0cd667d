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

/* One parent (its bit string at `enc`): each successor's bit string and record appended to the
 * worker's buffers.  0, or the worker's error code. */
static int expand_parent(Worker *w, const uint8_t *enc) {
    Explorer *e = w->e;
    uint8_t out[4096];
    St s;
    decode(&e->cfg, enc, &s);
    int k = next_states(&e->cfg, &s, w->succ);
    if (k < 0) return -3;
    for (int t = 0; t < k; t++) {
        canonical(&w->succ[t].s);
        int len = encode(&e->cfg, &w->succ[t].s, out);
        if (len < 0) return -2;
        w->buf = grow(w->buf, &w->buf_cap, w->buf_len + (size_t)len, 1);
        w->done = grow(w->done, &w->done_cap, w->ndone + 1, sizeof *w->done);
        if (!w->buf || !w->done) return -1;
        uint32_t props = 0;
        for (int p = 0; p < e->nprops; p++) props |= (uint32_t)prop_violated(&e->cfg, &w->succ[t].s, e->props[p]) << p;
        Done *d = &w->done[w->ndone++];
        d->at = (uint32_t)w->buf_len; d->len = (uint32_t)len; d->events = w->succ[t].events;
        d->props = props; d->action = (uint8_t)w->succ[t].action;
        memcpy(w->buf + w->buf_len, out, (size_t)len);
        w->buf_len += (size_t)len;
    }
    return 0;
}

static void *expand_slice(void *arg) {
    Worker *w = arg;
    Explorer *e = w->e;
    w->ndone = 0; w->buf_len = 0;
    for (size_t i = w->lo; i < w->hi && !w->error; i++) {
        w->first[i - w->lo] = (uint32_t)w->ndone;
        w->error = expand_parent(w, e->arena + e->off[i]);
    }
    w->first[w->hi - w->lo] = (uint32_t)w->ndone;
    return NULL;
}

/* Parent i's successors (records d[0:nd], bit strings in buf) into the store, in order, exactly as
 * explorer_run adds them one parent at a time.  -1 with a Python error set; else 0 (go on), 2 (a
 * violation stopped the run) or 3 (--max-states). */
static int integrate_parent(Explorer *e, size_t i, const Done *d, size_t nd, const uint8_t *buf) {
    e->edge_start[i] = (uint32_t)e->edges;
    while (e->head_depth + 1 < e->nlevels && i >= e->levels[e->head_depth + 1]) e->head_depth++;
    for (size_t j = 0; j < nd; j++) {
        int is_new;
        e->transitions++;
        e->witnesses |= d[j].events;
        long long k = store_add(e, buf + d[j].at, d[j].len, (int)i, d[j].action, e->head_depth + 1, &is_new);
        if (k < 0) { store_error(k); return -1; }
        if (add_edge(e, (size_t)k) < 0) { PyErr_NoMemory(); return -1; }
        if ((size_t)k <= i) e->back_edges++;
        if (is_new && record_props(e, d[j].props, (size_t)k) < 0) return -1;
    }
    e->edge_start[i + 1] = (uint32_t)e->edges;
    e->head++;
    if (e->max_states && e->n >= e->max_states && e->head < e->n) return 3;
    return e->stopped ? 2 : 0;
}

/* A worker's error code as a Python error (NULL). */
static PyObject *worker_error(int code) {
    if (code == -3) {
        PyErr_SetString(PyExc_OverflowError, "more acceptance choices than the compiled action ids hold");
        return NULL;
    }
    if (code == -2) {
        PyErr_SetString(PyExc_OverflowError, "a counter is outside the compiled encoding's range");
        return NULL;
    }
    return PyErr_NoMemory();
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
            if (w[t].error) { status = worker_error(w[t].error); goto out; }
            for (size_t i = w[t].lo; i < w[t].hi; i++) {
                const uint32_t *first = w[t].first + (i - w[t].lo);
                int code = integrate_parent(e, i, w[t].done + first[0], first[1] - first[0], w[t].buf);
                done++;
                if (code < 0) goto out;
                if (code) { status = PyLong_FromLong(code); break; }
            }
        }
    }
    if (!status && !PyErr_Occurred()) status = PyLong_FromLong(1);
out:
    for (int t = 0; t < jobs; t++) { free(w[t].succ); free(w[t].first); free(w[t].buf); free(w[t].done); }
    return status;
}
