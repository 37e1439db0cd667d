/* The joint worker model's search (included by explore_py.h; checker/compiled_joint.py drives it).
 *
 * Explorer(..., worker=(strategy, reorder_any, nbuckets, *buckets)) explores checker/joint.py's
 * JointModel instead of the engine alone: the same store, parents, levels and edges as
 * explore.c's search (run_joint is explorer_run over JSt), a state the engine's bit string
 * followed by the worker's bytes, so that the engine's own methods (unfinished, parked, ...) read
 * a joint state's engine part unchanged.  One thread: --jobs is not encoded for it. */

static int worker_settings(Explorer *e, PyObject *worker) {
    int v[3 + MAXBUCKETS];
    int n = int_list(worker, v, 3 + MAXBUCKETS, "worker");
    if (n < 0) return -1;
    if (n < 3 || v[0] < STRAT_V1 || v[0] > STRAT_NEURON || v[2] != n - 3) {
        PyErr_SetString(PyExc_ValueError, "worker: (strategy 1, 2 or 3, reorder_any, nbuckets, *buckets sorted)");
        return -1;
    }
    Wcfg *w = &e->wcfg;
    w->strategy = v[0]; w->reorder_any = v[1]; w->nbuckets = v[2]; w->nreq = e->cfg.n;
    for (int b = 0; b < w->nbuckets; b++) w->buckets[b] = v[3 + b];
    return 0;
}

/* the canonical joint state's bytes: the engine canonicalised (the worker names no block id) */
static int joint_encoded(Explorer *e, JSt *j, uint8_t *buf) {
    canonical(&j->s);
    int len = encode(&e->cfg, &j->s, buf);
    int wlen = len < 0 ? -1 : worker_encode(&e->cfg, &e->wcfg, &j->w, buf + len);
    if (wlen < 0) {
        PyErr_SetString(PyExc_OverflowError, "a value is outside the compiled joint encoding's range");
        return -1;
    }
    return len + wlen;
}

static void joint_decode(Explorer *e, size_t i, JSt *j) {
    int len = decode(&e->cfg, e->arena + e->off[i], &j->s);
    worker_decode(&e->cfg, &e->wcfg, e->arena + e->off[i] + len, &j->w);
}

/* JointModel.always: the engine's properties on the engine part, W1-W4 on the worker */
static int check_joint_state(Explorer *e, const JSt *j, size_t node) {
    uint32_t props = 0;
    for (int k = 0; k < e->nprops; k++) {
        if (e->violated >> k & 1) continue;
        int p = e->props[k];
        int bad = p >= NPROPS ? worker_prop_violated(&e->wcfg, &j->w, p - NPROPS) : prop_violated(&e->cfg, &j->s, p);
        if (bad) props |= 1u << k;
    }
    return record_props(e, props, node);
}

static int add_joint_initial(Explorer *e, const St *s, int ordinal) {
    JSt j;
    uint8_t buf[4096];
    j.s = *s;
    worker_init(&e->cfg, &j.w);
    int len = joint_encoded(e, &j, buf), is_new;
    if (len < 0) return -1;
    long long i = store_add(e, buf, (size_t)len, -1, ordinal, 0, &is_new);
    if (i < 0) { store_error(i); return -1; }
    return is_new ? check_joint_state(e, &j, (size_t)i) : 0;
}

/* explorer_run over the joint relation (worker.c joint_next_states) */
static PyObject *run_joint(Explorer *e, long budget, int jobs) {
    static JSucc succ[MAXJSUCC];
    uint8_t buf[4096];
    JSt s;
    if (jobs != 1) { PyErr_SetString(PyExc_ValueError, "the joint worker model runs on one thread"); return NULL; }
    if (e->stopped) return PyLong_FromLong(2);
    for (long done = 0; e->head < e->n; done++) {
        if (done >= budget) return PyLong_FromLong(0);
        size_t i = e->head;
        while (e->head_depth + 1 < e->nlevels && i >= e->levels[e->head_depth + 1]) e->head_depth++;
        joint_decode(e, i, &s);
        int k = joint_next_states(&e->cfg, &e->wcfg, &s, succ);
        if (k < 0) {
            PyErr_SetString(PyExc_OverflowError, "more successors than the compiled joint action ids hold");
            return NULL;
        }
        e->edge_start[i] = (uint32_t)e->edges;
        for (int t = 0; t < k; t++) {
            e->transitions++;
            e->witnesses |= succ[t].events;
            e->wwitnesses |= succ[t].wev;
            int len = joint_encoded(e, &succ[t].j, buf), is_new;
            if (len < 0) return NULL;
            long long j = store_add(e, buf, (size_t)len, (int)i, succ[t].action, e->head_depth + 1, &is_new);
            if (j < 0) return store_error(j);
            if (add_edge(e, (size_t)j) < 0) return PyErr_NoMemory();
            if ((size_t)j <= i) e->back_edges++;
            if (is_new && check_joint_state(e, &succ[t].j, (size_t)j) < 0) return NULL;
        }
        e->edge_start[i + 1] = (uint32_t)e->edges;
        e->head++;
        if (e->max_states && e->n >= e->max_states && e->head < e->n) return PyLong_FromLong(3);
        if (e->stopped) return PyLong_FromLong(2);
    }
    return PyLong_FromLong(1);
}

static PyObject *explorer_worker_witnesses(Explorer *e, PyObject *unused) {
    return PyLong_FromUnsignedLong(e->wwitnesses);
}

/* JointModel.eventually's second deadlock reason: the worker still holds outputs (Neuron) */
static PyObject *explorer_worker_outputs(Explorer *e, PyObject *arg) {
    Py_ssize_t i = PyLong_AsSsize_t(arg);
    if (i < 0 || (size_t)i >= e->n) { if (!PyErr_Occurred()) PyErr_SetString(PyExc_IndexError, "no such state"); return NULL; }
    JSt j;
    joint_decode(e, (size_t)i, &j);
    return PyLong_FromLong(j.w.nout);
}
