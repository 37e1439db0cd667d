/* --jobs K for the compiled explorer (included by explore_py.h): K threads, this one and K - 1
 * others that live for one run() call.  A batch of known parents, copied out of the arena, is cut
 * into chunks of CHUNK_PARENTS; the threads claim chunks in turn (decode, next_states, canonical
 * form, encoding, the hash, every property), so an uneven chunk never leaves a core idle.  While
 * the others expand the next batch, this thread integrates the batch before it into the store in
 * index order, exactly as explorer_run does one parent at a time, then claims chunks of the next
 * batch itself.  So the result is the single-thread one whichever thread expanded a chunk, and K
 * threads keep K cores busy: the store's serial share (hashing in, the edges) overlaps expansion.
 * The threads read only their batch's copy and the config, never the store this thread grows. */
#include <pthread.h>

#define BATCH 8192            /* parents per batch */
#define CHUNK_PARENTS 32      /* parents a thread claims at a time */
#define NCHUNKS (BATCH / CHUNK_PARENTS)
#define MAXTHREADS 16

typedef struct {          /* one successor, expanded: its bit string in the worker's buffer */
    uint32_t at, len, props;
    uint64_t events, hash;    /* hash: hash_bytes of the bit string, computed by the worker */
    uint8_t action;
} Done;

#define PREFETCH_AHEAD 8      /* successors whose table slots are fetched before they are looked up */

typedef struct {          /* one thread's output for one batch (remote.h: one expand() call's) */
    Explorer *e;
    Succ *succ;
    uint8_t *buf; size_t buf_len, buf_cap;
    Done *done; size_t ndone, done_cap;
    uint32_t *first;      /* remote.h: per parent, the index of its first Done */
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
        d->props = props; d->action = (uint8_t)w->succ[t].action; d->hash = hash_bytes(out, (size_t)len);
        memcpy(w->buf + w->buf_len, out, (size_t)len);
        w->buf_len += (size_t)len;
    }
    return 0;
}

/* Parent i's successors (records d[0:nd], bit strings in buf) into the store, in order, exactly as
 * explorer_run adds them one parent at a time.  -1 with a Python error set; else 0 (go on), 2 (a
 * violation stopped the run) or 3 (--max-states). */
static int integrate_parent(Explorer *e, size_t i, const Done *d, size_t nd, const uint8_t *buf, const Done *end) {
    e->edge_start[i] = (uint32_t)e->edges;
    while (e->head_depth + 1 < e->nlevels && i >= e->levels[e->head_depth + 1]) e->head_depth++;
    for (size_t j = 0; j < nd; j++) {
        int is_new;
        if (d + j + PREFETCH_AHEAD < end) {  /* a later successor's slot, while this one is looked up */
            size_t slot = d[j + PREFETCH_AHEAD].hash & e->mask;
            __builtin_prefetch(&e->table[slot]);
            __builtin_prefetch(&e->tags[slot]);
        }
        e->transitions++;
        e->witnesses |= d[j].events;
        long long k = store_add_hashed(e, buf + d[j].at, d[j].len, d[j].hash, (int)i, d[j].action, e->head_depth + 1,
                                       &is_new);
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

