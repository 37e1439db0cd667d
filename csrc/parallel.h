/* --jobs K for the compiled explorer (included by explore_py.h): a batch of known parents,
 * copied out of the arena, is expanded by K threads (decode, next_states, canonical form,
 * encoding, every property) while this thread integrates the batch before it into the store in
 * index order, exactly as explorer_run does one parent at a time, so the result is the
 * single-thread one.  The threads read only their batch's copy and the config, never the store
 * this thread is growing. */
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
    const uint8_t *enc; const uint32_t *at; size_t base;  /* parent i's bit string: enc + at[i - base] */
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
    w->ndone = 0; w->buf_len = 0;
    for (size_t i = w->lo; i < w->hi && !w->error; i++) {
        w->first[i - w->lo] = (uint32_t)w->ndone;
        w->error = expand_parent(w, w->enc + w->at[i - w->base]);
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

typedef struct {          /* a batch of parents [lo, hi), copied, and the K workers expanding it */
    size_t lo, hi;
    uint8_t *enc; size_t enc_cap;
    uint32_t *at;         /* BATCH + 1 offsets into enc */
    Worker w[16];
    pthread_t th[16];
    int started, jobs;
} Batch;

static int batch_alloc(Explorer *e, Batch *b, int jobs) {  /* b zeroed by the caller */
    b->jobs = jobs;
    b->at = malloc(sizeof(uint32_t) * (BATCH + 1));
    if (!b->at) return -1;
    for (int t = 0; t < jobs; t++) {
        b->w[t].e = e;
        b->w[t].succ = malloc(sizeof(Succ) * MAXSUCC);
        b->w[t].first = malloc(sizeof(uint32_t) * (BATCH + 1));
        if (!b->w[t].succ || !b->w[t].first) return -1;
    }
    return 0;
}

static void batch_free(Batch *b) {
    for (int t = 0; t < b->jobs; t++) {
        free(b->w[t].succ); free(b->w[t].first); free(b->w[t].buf); free(b->w[t].done);
    }
    free(b->enc); free(b->at);
}

/* Copy parents [lo, lo + BATCH) (as far as they are known) and start the K threads on them. */
static int batch_start(Explorer *e, Batch *b, size_t lo) {
    size_t hi = e->n - lo > BATCH ? lo + BATCH : e->n, bytes = e->off[hi] - e->off[lo];
    b->enc = grow(b->enc, &b->enc_cap, bytes ? bytes : 1, 1);
    if (!b->enc) return -1;
    memcpy(b->enc, e->arena + e->off[lo], bytes);
    for (size_t i = lo; i <= hi; i++) b->at[i - lo] = e->off[i] - e->off[lo];
    b->lo = lo; b->hi = hi; b->started = 0;
    size_t per = (hi - lo + (size_t)b->jobs - 1) / (size_t)b->jobs;
    for (int t = 0; t < b->jobs; t++) {
        Worker *w = &b->w[t];
        w->lo = lo + per * (size_t)t < hi ? lo + per * (size_t)t : hi;
        w->hi = w->lo + per < hi ? w->lo + per : hi;
        w->enc = b->enc; w->at = b->at; w->base = lo; w->error = 0;
        if (pthread_create(&b->th[t], NULL, expand_slice, w) == 0) b->started |= 1 << t;
        else expand_slice(w);  /* no thread: expanded here */
    }
    return 0;
}

static void batch_join(Batch *b) {
    Py_BEGIN_ALLOW_THREADS
    for (int t = 0; t < b->jobs; t++) if (b->started >> t & 1) pthread_join(b->th[t], NULL);
    Py_END_ALLOW_THREADS
    b->started = 0;
}

/* Batch b's successors into the store, parent by parent: 0, a stop (2, 3) or -1 (an error set). */
static int batch_integrate(Explorer *e, Batch *b, long *done) {
    for (int t = 0; t < b->jobs; t++) {
        Worker *w = &b->w[t];
        if (w->error) { worker_error(w->error); return -1; }
        for (size_t i = w->lo; i < w->hi; i++) {
            const uint32_t *first = w->first + (i - w->lo);
            int code = integrate_parent(e, i, w->done + first[0], first[1] - first[0], w->buf);
            ++*done;
            if (code) return code;
        }
    }
    return 0;
}

/* explorer_run over K threads, the next batch expanded while this one is integrated; the same
 * statuses.  A batch is started ahead only when the budget will reach it, so a run of `budget`
 * parents expands no parent it does not integrate, unless a stop ends it first. */
static PyObject *run_parallel(Explorer *e, long budget, int jobs) {
    Batch b[2];
    memset(b, 0, sizeof b);
    PyObject *status = NULL;
    int ok = batch_alloc(e, &b[0], jobs) == 0 && batch_alloc(e, &b[1], jobs) == 0;
    Batch *pending = NULL;
    long done = 0;
    int k = 0;
    while (ok && !status) {
        if (!pending) {
            if (e->head >= e->n) { status = PyLong_FromLong(1); break; }
            if (done >= budget) { status = PyLong_FromLong(0); break; }
            if (batch_start(e, &b[k], e->head) < 0) { ok = 0; break; }
            pending = &b[k]; k ^= 1;
        }
        Batch *cur = pending;
        batch_join(cur);
        pending = NULL;
        if (done + (long)(cur->hi - cur->lo) < budget && cur->hi < e->n) {
            if (batch_start(e, &b[k], cur->hi) < 0) { ok = 0; break; }
            pending = &b[k]; k ^= 1;
        }
        int code = batch_integrate(e, cur, &done);
        if (code < 0) break;
        if (code) status = PyLong_FromLong(code);
    }
    if (pending) batch_join(pending);
    if (!ok && !PyErr_Occurred()) PyErr_NoMemory();
    batch_free(&b[0]); batch_free(&b[1]);
    return PyErr_Occurred() ? (Py_XDECREF(status), NULL) : status;
}
