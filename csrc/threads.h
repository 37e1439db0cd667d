/* run_parallel: --jobs K on K threads (included by explore_py.h after parallel.h, whose header
 * describes the scheme).  Two batches alternate: while one is integrated here, the other is
 * expanded by the pool, which this thread joins once its integration is done. */

typedef struct {          /* a batch of parents [lo, hi), copied, and its chunks' expansions */
    size_t lo, hi, nchunks;
    uint8_t *enc; size_t enc_cap;
    uint32_t *at;         /* BATCH + 1 offsets into enc */
    uint32_t *nsucc;      /* per parent: its number of successors */
    uint32_t chunk_first[NCHUNKS];  /* per chunk: its first Done in its thread's buffer */
    uint8_t chunk_thread[NCHUNKS];
    int chunk_error[NCHUNKS];       /* 0, or expand_parent's code */
    Worker w[MAXTHREADS]; /* per thread: what it expanded of this batch */
    size_t next_chunk;    /* claimed with an atomic add */
    size_t finished;      /* chunks expanded (under the pool's lock) */
    int active;           /* threads that took this batch and have not left it (under the lock) */
} Batch;

typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t published, done;
    Batch *open; unsigned gen; int quit;
    int jobs;
} Pool;

typedef struct { Pool *pool; int t; } Member;

#define SPIN_WAIT 20000   /* pause instructions a pool thread spins for before it sleeps (about a millisecond) */
#if defined(__x86_64__) || defined(__i386__)
#define CPU_RELAX() __builtin_ia32_pause()
#elif defined(__aarch64__)
#define CPU_RELAX() __asm__ __volatile__("yield")
#else
#define CPU_RELAX() do { } while (0)
#endif

/* Expand chunk c of b on thread t; its records land in b->w[t]. */
static void expand_chunk(Batch *b, size_t c, int t) {
    Worker *w = &b->w[t];
    size_t lo = b->lo + c * CHUNK_PARENTS, hi = lo + CHUNK_PARENTS < b->hi ? lo + CHUNK_PARENTS : b->hi;
    b->chunk_first[c] = (uint32_t)w->ndone;
    b->chunk_thread[c] = (uint8_t)t;
    b->chunk_error[c] = 0;
    for (size_t i = lo; i < hi; i++) {
        size_t before = w->ndone;
        int code = expand_parent(w, b->enc + b->at[i - b->lo]);
        if (code) { b->chunk_error[c] = code; break; }
        b->nsucc[i - b->lo] = (uint32_t)(w->ndone - before);
    }
}

/* Claim and expand b's chunks until none is left (thread t). */
static void expand_chunks(Pool *p, Batch *b, int t) {
    for (;;) {
        size_t c = __atomic_fetch_add(&b->next_chunk, 1, __ATOMIC_ACQ_REL);
        if (c >= b->nchunks) return;
        expand_chunk(b, c, t);
        pthread_mutex_lock(&p->mu);
        if (++b->finished == b->nchunks) pthread_cond_broadcast(&p->done);
        pthread_mutex_unlock(&p->mu);
    }
}

static void *pool_thread(void *arg) {
    Member *m = arg;
    Pool *p = m->pool;
    unsigned seen = 0;
    for (;;) {
        /* the next batch comes within a chunk's time of this thread's last: wait for it awake, since
         * waking a sleeping thread can take longer than the wait (a virtual machine's idle core) */
        for (int spin = 0; spin < SPIN_WAIT && __atomic_load_n(&p->gen, __ATOMIC_ACQUIRE) == seen
             && !__atomic_load_n(&p->quit, __ATOMIC_ACQUIRE); spin++) CPU_RELAX();
        pthread_mutex_lock(&p->mu);
        while (!p->quit && p->gen == seen) pthread_cond_wait(&p->published, &p->mu);
        if (p->quit) break;
        seen = p->gen;
        Batch *b = p->open;
        if (!b) { pthread_mutex_unlock(&p->mu); continue; }  /* finished before this thread woke */
        b->active++;
        pthread_mutex_unlock(&p->mu);
        expand_chunks(p, b, m->t);
        pthread_mutex_lock(&p->mu);
        if (--b->active == 0) pthread_cond_broadcast(&p->done);
        pthread_mutex_unlock(&p->mu);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

/* Copy parents [lo, lo + BATCH) (as far as they are known) and hand the batch to the pool. */
static int batch_publish(Explorer *e, Pool *p, Batch *b, size_t lo) {
    size_t hi = e->n - lo > BATCH ? lo + BATCH : e->n, bytes = e->off[hi] - e->off[lo];
    b->enc = grow(b->enc, &b->enc_cap, bytes ? bytes : 1, 1);
    if (!b->enc) return -1;
    memcpy(b->enc, e->arena + e->off[lo], bytes);
    for (size_t i = lo; i <= hi; i++) b->at[i - lo] = e->off[i] - e->off[lo];
    b->lo = lo; b->hi = hi;
    b->nchunks = (hi - lo + CHUNK_PARENTS - 1) / CHUNK_PARENTS;
    for (int t = 0; t < p->jobs; t++) { b->w[t].ndone = 0; b->w[t].buf_len = 0; }
    b->next_chunk = 0; b->finished = 0; b->active = 0;
    pthread_mutex_lock(&p->mu);
    p->open = b;
    __atomic_store_n(&p->gen, p->gen + 1, __ATOMIC_RELEASE);
    pthread_cond_broadcast(&p->published);
    pthread_mutex_unlock(&p->mu);
    return 0;
}

/* This thread's share of b's expansion, then the wait until every chunk is expanded and every
 * thread that took b has left it; no thread takes b after this, so b may be published again. */
static void batch_finish(Pool *p, Batch *b) {
    Py_BEGIN_ALLOW_THREADS
    expand_chunks(p, b, p->jobs - 1);
    pthread_mutex_lock(&p->mu);
    while (b->finished < b->nchunks || b->active) pthread_cond_wait(&p->done, &p->mu);
    if (p->open == b) p->open = NULL;
    pthread_mutex_unlock(&p->mu);
    Py_END_ALLOW_THREADS
}

/* Batch b's successors into the store, chunk by chunk in parent order: 0, a stop (2, 3) or -1. */
static int batch_integrate(Explorer *e, Batch *b, long *done) {
    for (size_t c = 0; c < b->nchunks; c++) {
        if (b->chunk_error[c]) { worker_error(b->chunk_error[c]); return -1; }
        const Worker *w = &b->w[b->chunk_thread[c]];
        const Done *d = w->done + b->chunk_first[c], *end = w->done + w->ndone;
        size_t lo = b->lo + c * CHUNK_PARENTS, hi = lo + CHUNK_PARENTS < b->hi ? lo + CHUNK_PARENTS : b->hi;
        for (size_t i = lo; i < hi; i++) {
            size_t nd = b->nsucc[i - b->lo];
            int code = integrate_parent(e, i, d, nd, w->buf, end);
            d += nd;
            ++*done;
            if (code) return code;
        }
    }
    return 0;
}

static int batch_alloc(Explorer *e, Batch *b, int jobs) {  /* b zeroed by the caller */
    b->at = malloc(sizeof(uint32_t) * (BATCH + 1));
    b->nsucc = malloc(sizeof(uint32_t) * BATCH);
    if (!b->at || !b->nsucc) return -1;
    for (int t = 0; t < jobs; t++) {
        b->w[t].e = e;
        b->w[t].succ = malloc(sizeof(Succ) * MAXSUCC);
        if (!b->w[t].succ) return -1;
    }
    return 0;
}

static void batch_free(Batch *b, int jobs) {
    for (int t = 0; t < jobs; t++) { free(b->w[t].succ); free(b->w[t].buf); free(b->w[t].done); }
    free(b->enc); free(b->at); free(b->nsucc);
}

/* The pool's K - 1 threads started (fewer if the system refuses some: their chunks are claimed by
 * the rest); the number started. */
static int pool_start(Pool *p, pthread_t *th, Member *members, int jobs) {
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->published, NULL);
    pthread_cond_init(&p->done, NULL);
    p->jobs = jobs;
    int started = 0;
    for (int t = 0; t < jobs - 1; t++) {
        members[t] = (Member){p, t};
        if (pthread_create(&th[started], NULL, pool_thread, &members[t]) == 0) started++;
    }
    return started;
}

static void pool_stop(Pool *p, pthread_t *th, int started) {
    pthread_mutex_lock(&p->mu);
    __atomic_store_n(&p->quit, 1, __ATOMIC_RELEASE);
    pthread_cond_broadcast(&p->published);
    pthread_mutex_unlock(&p->mu);
    Py_BEGIN_ALLOW_THREADS
    for (int t = 0; t < started; t++) pthread_join(th[t], NULL);
    Py_END_ALLOW_THREADS
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->published);
    pthread_cond_destroy(&p->done);
}

/* explorer_run over K threads, the same statuses.  A batch is published ahead only when the budget
 * will reach it, so a run of `budget` parents expands no parent it does not integrate, unless a
 * stop ends it first. */
static PyObject *run_parallel(Explorer *e, long budget, int jobs) {
    Batch b[2];
    Pool pool;
    pthread_t th[MAXTHREADS];
    Member members[MAXTHREADS];
    memset(b, 0, sizeof b);
    memset(&pool, 0, sizeof pool);
    PyObject *status = NULL;
    int ok = batch_alloc(e, &b[0], jobs) == 0 && batch_alloc(e, &b[1], jobs) == 0;
    int pool_on = ok, started = ok ? pool_start(&pool, th, members, jobs) : 0;
    Batch *pending = NULL;
    long done = 0;
    int k = 0;
    while (ok && !status) {
        if (!pending) {
            if (e->head >= e->n) { status = PyLong_FromLong(1); break; }
            if (done >= budget) { status = PyLong_FromLong(0); break; }
            if (batch_publish(e, &pool, &b[k], e->head) < 0) { ok = 0; break; }
            pending = &b[k]; k ^= 1;
        }
        Batch *cur = pending;
        batch_finish(&pool, cur);
        pending = NULL;
        if (done + (long)(cur->hi - cur->lo) < budget && cur->hi < e->n) {
            if (batch_publish(e, &pool, &b[k], cur->hi) < 0) { ok = 0; break; }
            pending = &b[k]; k ^= 1;
        }
        int code = batch_integrate(e, cur, &done);
        if (code < 0) break;
        if (code) status = PyLong_FromLong(code);
    }
    if (pending) batch_finish(&pool, pending);
    if (pool_on) pool_stop(&pool, th, started);
    if (!ok && !PyErr_Occurred()) PyErr_NoMemory();
    batch_free(&b[0], jobs); batch_free(&b[1], jobs);
    return PyErr_Occurred() ? (Py_XDECREF(status), NULL) : status;
}
