/* The Python face of explore.c (included there): Explorer(settings, P, M, props, stops, eos, max_states). */

static PyObject *store_error(long long code) {
    if (code == -2) PyErr_SetString(PyExc_OverflowError, "the search passed the compiled store's limits "
                                    "(4 GiB of states, depth 65535, 65536 initial states)");
    else PyErr_NoMemory();
    return NULL;
}

static void explorer_dealloc(Explorer *e) {
    free(e->arena); free(e->off); free(e->parent); free(e->via);
    free(e->edge_start); free(e->edge_target); free(e->table); free(e->tags);
    Py_XDECREF(e->found);
    Py_TYPE(e)->tp_free((PyObject *)e);
}

static int int_list(PyObject *seq, int *out, int max, const char *what) {
    PyObject *fast = PySequence_Fast(seq, what);
    if (!fast) return -1;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
    if (n > max) { Py_DECREF(fast); PyErr_Format(PyExc_ValueError, "%s: too many values", what); return -1; }
    for (Py_ssize_t i = 0; i < n; i++) out[i] = (int)PyLong_AsLong(PySequence_Fast_GET_ITEM(fast, i));
    Py_DECREF(fast);
    return PyErr_Occurred() ? -1 : (int)n;
}

#include "joint_py.h"

static int add_initial(Explorer *e, PyObject *eos_choices, int arrived) {
    PyObject *fast = PySequence_Fast(eos_choices, "eos choices");
    if (!fast) return -1;
    uint8_t buf[4096];
    for (Py_ssize_t k = 0; k < PySequence_Fast_GET_SIZE(fast); k++) {
        St s;
        memset(&s, 0, sizeof s);
        memset(s.hreq, -1, sizeof s.hreq); memset(s.hidx, -1, sizeof s.hidx);
        int eos[MAXR];
        if (int_list(PySequence_Fast_GET_ITEM(fast, k), eos, MAXR, "eos") != e->cfg.n) goto bad;
        for (int r = 0; r < e->cfg.n; r++) {
            s.eos[r] = (int16_t)eos[r];
            s.c[r].P = (int16_t)e->cfg.P[r]; s.c[r].M = (int16_t)e->cfg.M[r];
            s.c[r].status = r < arrived ? WAITING : NOT_ARRIVED;
            if (r < arrived) s.wait[s.nwait++] = (uint8_t)r;
        }
        for (int b = 0; b < e->cfg.nblocks; b++) s.freeb[s.nfree++] = (uint8_t)b;
        s.fpl = (uint8_t)e->cfg.forced;
        s.pauses_left = (uint8_t)e->cfg.pauses;
        if (e->wcfg.strategy) {
            if (add_joint_initial(e, &s, (int)k) < 0) goto bad;
            continue;
        }
        int len = encoded(e, &s, buf), is_new;
        if (len < 0) goto bad;
        long long i = store_add(e, buf, (size_t)len, -1, (int)k, 0, &is_new);
        if (i < 0) { store_error(i); goto bad; }
        if (is_new && check_state(e, &s, (size_t)i) < 0) goto bad;
    }
    Py_DECREF(fast);
    return 0;
bad:
    if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "an eos choice per request is needed");
    Py_DECREF(fast);
    return -1;
}

static int explorer_init(Explorer *e, PyObject *args, PyObject *kw) {
    PyObject *settings, *P, *M, *props, *stops, *eos, *worker = NULL;
    Py_ssize_t max_states;
    int v[NSETTINGS];
    if (!PyArg_ParseTuple(args, "OOOOOOn|O", &settings, &P, &M, &props, &stops, &eos, &max_states, &worker)) return -1;
    if (int_list(settings, v, NSETTINGS, "settings") != NSETTINGS) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "101 settings are needed");
        return -1;
    }
    Cfg *c = &e->cfg;
    c->n = v[0]; c->depth = v[1]; c->loop_free = v[2]; c->budget = v[3]; c->max_seqs = v[4]; c->bs = v[5];
    c->nblocks = v[6]; c->chunked = v[7]; c->prefix = v[8]; c->full_isl = v[9]; c->defer = v[10];
    c->drop = v[11]; c->stagger = v[12]; c->aborts = v[13]; c->abort_deferred = v[14]; c->late = v[15];
    c->forced = v[16]; c->max_eos = v[17]; c->k = v[18]; c->lookahead = v[19];
    for (int r = 0; r < MAXR; r++) c->structured[r] = v[20] >> r & 1;
    c->priority = v[21]; c->lp_threshold = v[22]; c->lp_adaptive = v[23]; c->mml = v[24];
    for (int r = 0; r < MAXR; r++) c->rank[r] = v[25 + r];
    c->pauses = v[33]; c->npm = 0;
    for (int m = 0; m < NPM; m++) if (v[34 + m] >= 0) c->pm[c->npm++] = v[34 + m];
    c->connector = v[37]; c->fail = v[38]; c->loads = v[39]; c->sends = v[40]; c->whole_prompt = v[41];
    c->invalid = v[42]; c->W = v[43]; c->swa_cap = v[44]; c->offload = v[45]; c->prompt_only = v[46];
    c->nsess = 0;  /* resumable, in order (-1 pads), then stream_updates: their number, (u, m) pairs */
    for (int i = 0; i < MAXR; i++) if (v[47 + i] >= 0) c->sess[c->nsess++] = v[47 + i];
    c->nupd = v[55];
    for (int u = 0; u < MAXUPDATES; u++) { c->upd_u[u] = v[56 + 2 * u]; c->upd_m[u] = v[57 + 2 * u]; }
    c->mamba = v[64];
    c->async_sched = v[100];
    c->nimg = v[65]; c->enc_size = v[66]; c->enc_budget = v[67];  /* images grouped by request, by offset */
    for (int i = 0; i < MAXIMG; i++) {
        c->img_req[i] = v[68 + 4 * i]; c->img_off[i] = v[69 + 4 * i];
        c->img_len[i] = v[70 + 4 * i]; c->img_item[i] = v[71 + 4 * i];
    }
    if (c->n < 1 || c->n > MAXR || c->nblocks < 1 || c->nblocks > MAXB || c->depth < 1 || c->depth > MAXD
        || c->bs < 1 || c->budget < 1 || c->pauses < 0 || c->pauses > 255
        || v[34] >= NPM || v[35] >= NPM || v[36] >= NPM || c->nupd < 0 || c->nupd > MAXUPDATES
        || c->mamba < MAMBA_OFF || c->mamba > MAMBA_ALIGN || c->nimg < 0 || c->nimg > MAXIMG) {
        PyErr_SetString(PyExc_ValueError, "the config is outside the compiled encoding's bounds");
        return -1;
    }
    if (int_list(P, c->P, MAXR, "P") != c->n || int_list(M, c->M, MAXR, "M") != c->n) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "P and M need one value per request");
        return -1;
    }
    if (worker && worker != Py_None && worker_settings(e, worker) < 0) return -1;
    e->nprops = int_list(props, e->props, NPROPS + NWPROPS, "props");
    if (e->nprops < 0 || int_list(stops, e->stops, NPROPS + NWPROPS, "stops") != e->nprops) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "one stop flag per property");
        return -1;
    }
    encoder_init(c);
    cfg_widths(c);
    e->max_states = max_states > 0 ? (size_t)max_states : 0;
    e->found = PyList_New(0);
    if (!e->found || rehash(e, 1024) < 0) return -1;
    return add_initial(e, eos, c->late ? 1 : c->n);
}

#include "parallel.h"
#include "threads.h"
#include "remote.h"

/* Expand up to `budget` parents (on `jobs` threads). 0: more to do; 1: done; 2: a violation
 * stopped it; 3: --max-states. */
static PyObject *explorer_run(Explorer *e, PyObject *args) {
    long budget;
    int jobs = 1;
    if (!PyArg_ParseTuple(args, "l|i", &budget, &jobs)) return NULL;
    if (jobs < 1 || jobs > 16) { PyErr_SetString(PyExc_ValueError, "1 to 16 threads"); return NULL; }
    if (e->wcfg.strategy) return run_joint(e, budget, jobs);
    if (jobs > 1 && !e->stopped) return run_parallel(e, budget, jobs);
    static Succ succ[MAXSUCC];
    uint8_t buf[4096];
    St s;
    if (e->stopped) return PyLong_FromLong(2);
    for (long done = 0; e->head < e->n; done++) {
        if (done >= budget) return PyLong_FromLong(0);
        size_t i = e->head;
        while (e->head_depth + 1 < e->nlevels && i >= e->levels[e->head_depth + 1]) e->head_depth++;
        decode(&e->cfg, e->arena + e->off[i], &s);
        int k = next_states(&e->cfg, &s, succ);
        if (k < 0) {
            PyErr_SetString(PyExc_OverflowError, "more acceptance choices than the compiled action ids hold");
            return NULL;
        }
        e->edge_start[i] = (uint32_t)e->edges;
        for (int t = 0; t < k; t++) {
            e->transitions++;
            e->witnesses |= succ[t].events;
            int len = encoded(e, &succ[t].s, buf), is_new;
            if (len < 0) return NULL;
            long long j = store_add(e, buf, (size_t)len, (int)i, succ[t].action, e->head_depth + 1, &is_new);
            if (j < 0) return store_error(j);
            if (add_edge(e, (size_t)j) < 0) return PyErr_NoMemory();
            if ((size_t)j <= i) e->back_edges++;
            if (is_new && check_state(e, &succ[t].s, (size_t)j) < 0) return NULL;
        }
        e->edge_start[i + 1] = (uint32_t)e->edges;
        e->head++;
        if (e->max_states && e->n >= e->max_states && e->head < e->n) return PyLong_FromLong(3);
        if (e->stopped) return PyLong_FromLong(2);
    }
    return PyLong_FromLong(1);
}

static PyObject *explorer_stats(Explorer *e, PyObject *unused) {
    size_t bytes = e->arena_cap + e->cap * (sizeof *e->off + sizeof *e->parent + sizeof *e->via
                   + sizeof *e->edge_start) + e->edge_cap * 4 + (e->mask + 1) * 5;
    return Py_BuildValue("{snsnsisKsnsnsnsn}", "states", (Py_ssize_t)e->n, "transitions", (Py_ssize_t)e->transitions,
                         "depth", (int)(e->nlevels ? e->nlevels - 1 : 0), "witnesses", (unsigned long long)e->witnesses,
                         "back_edges", (Py_ssize_t)e->back_edges, "head", (Py_ssize_t)e->head,
                         "arena", (Py_ssize_t)e->arena_len, "bytes", (Py_ssize_t)bytes);
}

static PyObject *explorer_found(Explorer *e, PyObject *unused) { return PySequence_List(e->found); }

static PyObject *explorer_path(Explorer *e, PyObject *arg) {
    Py_ssize_t i = PyLong_AsSsize_t(arg);
    if (i < 0 || (size_t)i >= e->n) { if (!PyErr_Occurred()) PyErr_SetString(PyExc_IndexError, "no such state"); return NULL; }
    PyObject *actions = PyList_New(0);
    if (!actions) return NULL;
    while (e->parent[i] >= 0) {
        PyObject *a = PyLong_FromLong(e->via[i]);
        if (!a || PyList_Append(actions, a) < 0) { Py_XDECREF(a); Py_DECREF(actions); return NULL; }
        Py_DECREF(a);
        i = e->parent[i];
    }
    if (PyList_Reverse(actions) < 0) { Py_DECREF(actions); return NULL; }
    return Py_BuildValue("(iN)", (int)e->roots[i], actions);
}

static PyObject *explorer_terminal(Explorer *e, PyObject *unused) {
    PyObject *out = PyList_New(0);
    for (size_t i = 0; out && i < e->head; i++) {
        if (e->edge_start[i] != e->edge_start[i + 1]) continue;
        PyObject *v = PyLong_FromSize_t(i);
        if (!v || PyList_Append(out, v) < 0) { Py_XDECREF(v); Py_CLEAR(out); }
        Py_XDECREF(v);
    }
    return out;
}

static PyObject *explorer_unfinished(Explorer *e, PyObject *arg) {
    St s;
    if (state_at(e, PyLong_AsSsize_t(arg), &s) < 0) return NULL;
    return PyBool_FromLong(unfinished(&e->cfg, &s));
}

static PyObject *explorer_parked(Explorer *e, PyObject *arg) {
    St s;
    if (state_at(e, PyLong_AsSsize_t(arg), &s) < 0) return NULL;
    return PyLong_FromLong(s.ndf);
}

static PyObject *explorer_blocks(Explorer *e, PyObject *arg) {
    St s;
    if (state_at(e, PyLong_AsSsize_t(arg), &s) < 0) return NULL;
    PyObject *free_ = PyList_New(0), *hashes = PyList_New(0), *tables = PyList_New(0);
    for (int i = 0; i < s.nfree; i++) PyList_Append(free_, PyLong_FromLong(s.freeb[i]));
    for (int b = 0; b < e->cfg.nblocks; b++)
        PyList_Append(hashes, s.hreq[b] < 0 ? Py_None : Py_BuildValue("(ii)", s.hreq[b], s.hidx[b]));
    for (int r = 0; r < e->cfg.n; r++) {
        PyObject *t = PyList_New(0);
        for (int i = 0; i < s.btn[r]; i++) PyList_Append(t, PyLong_FromLong(s.bt[r][i]));
        PyList_Append(tables, t);
    }
    return Py_BuildValue("(NNNi)", tables, free_, hashes, s.ndf);
}

static PyObject *explorer_counters(Explorer *e, PyObject *arg) {
    St s;
    if (state_at(e, PyLong_AsSsize_t(arg), &s) < 0) return NULL;
    PyObject *out = PyList_New(0);
    for (int r = 0; r < e->cfg.n; r++) {
        const Ctr *c = &s.c[r];
        PyList_Append(out, Py_BuildValue("(iiiiiiii)", c->status, c->O, c->C, c->H, c->F, c->X, c->P, c->M));
    }
    return Py_BuildValue("(Niii)", out, s.nrun, s.nkv, s.nwait);
}

static PyObject *explorer_csr(Explorer *e, PyObject *unused) {
    return Py_BuildValue("(y#y#)", (const char *)e->edge_start, (Py_ssize_t)((e->head + (e->head ? 1 : 0)) * 4),
                         (const char *)e->edge_target, (Py_ssize_t)(e->edges * 4));
}

#include "snapshot.h"
#include "scc.h"

static PyMethodDef explorer_methods[] = {
    {"run", (PyCFunction)explorer_run, METH_VARARGS, "Expand up to N parents; 0 more, 1 done, 2 violation, 3 max-states."},
    {"frontier", (PyCFunction)explorer_frontier, METH_O, "(head, bit strings of up to N parents from head on): for --ray."},
    {"expand", (PyCFunction)explorer_expand, METH_O, "The expansion of a list of parents' bit strings (csrc/remote.h)."},
    {"integrate", (PyCFunction)explorer_integrate, METH_VARARGS, "integrate(head, expansion) -> (status, parents taken)."},
    {"stats", (PyCFunction)explorer_stats, METH_NOARGS, "Counts of the search so far."},
    {"worker_witnesses", (PyCFunction)explorer_worker_witnesses, METH_NOARGS, "The worker events reached (bit i: WORKER_EVENTS[i])."},
    {"worker_outputs", (PyCFunction)explorer_worker_outputs, METH_O, "The output records a joint state's worker holds (Neuron)."},
    {"found", (PyCFunction)explorer_found, METH_NOARGS, "(property ordinal, state) of each violation found."},
    {"path", (PyCFunction)explorer_path, METH_O, "(initial-state ordinal, action ids) of the shortest path to a state."},
    {"terminal", (PyCFunction)explorer_terminal, METH_NOARGS, "Expanded states without successors."},
    {"unfinished", (PyCFunction)explorer_unfinished, METH_O, "Whether a state is not a clean final state."},
    {"parked", (PyCFunction)explorer_parked, METH_O, "Parked frees of a state."},
    {"blocks", (PyCFunction)explorer_blocks, METH_O, "(block tables, free queue, hashes, parked frees) of a state (tests)."},
    {"counters", (PyCFunction)explorer_counters, METH_O, "((status, O, C, H, F, X, P, M) per request, running, kv_holding, waiting) of a state (tests)."},
    {"csr", (PyCFunction)explorer_csr, METH_NOARGS, "(edge_start, edge_target) as uint32 bytes."},
    {"cycles", (PyCFunction)explorer_cycles, METH_NOARGS, "Smallest node of each cycle-holding component, ascending (csrc/scc.h)."},
    {"snapshot", (PyCFunction)explorer_snapshot, METH_NOARGS, "The store as bytes, between two parents (csrc/snapshot.h)."},
    {"restore", (PyCFunction)explorer_restore, METH_VARARGS, "restore(snapshot, found): take a checked snapshot over."},
    {NULL, NULL, 0, NULL}
};

static PyTypeObject ExplorerType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "asyncspec.checker._compiled.Explorer",
    .tp_basicsize = sizeof(Explorer),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "The compiled explorer's search over one config.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)explorer_init,
    .tp_dealloc = (destructor)explorer_dealloc,
    .tp_methods = explorer_methods,
};

static PyMethodDef module_methods[] = {
    {"cycle_nodes", (PyCFunction)module_cycle_nodes, METH_VARARGS, "checker/scc.py's cycle_nodes over uint32 CSR bytes (csrc/scc.h)."},
    {NULL, NULL, 0, NULL}
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_compiled", "The compiled explorer (csrc/).", -1, module_methods};

PyMODINIT_FUNC PyInit__compiled(void) {
    if (PyType_Ready(&ExplorerType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (!m) return NULL;
    PyObject *names = PyTuple_New(NPROPS);
    for (int i = 0; names && i < NPROPS; i++) PyTuple_SET_ITEM(names, i, PyUnicode_FromString(PROP_NAMES[i]));
    Py_INCREF(&ExplorerType);
    if (!names || PyModule_AddObject(m, "PROPERTIES", names) < 0
        || PyModule_AddObject(m, "Explorer", (PyObject *)&ExplorerType) < 0
        || PyModule_AddIntConstant(m, "ACT_ADD", ACT_ADD) < 0 || PyModule_AddIntConstant(m, "ACT_RESET", ACT_RESET) < 0
        || PyModule_AddIntConstant(m, "ACT_ABORT", ACT_ABORT) < 0 || PyModule_AddIntConstant(m, "ACT_UPDATE", ACT_UPDATE) < 0
        || PyModule_AddIntConstant(m, "ACT_PAUSE", ACT_PAUSE) < 0 || PyModule_AddIntConstant(m, "ACT_RESUME", ACT_RESUME) < 0
        || PyModule_AddIntConstant(m, "ACT_STREAM", ACT_STREAM) < 0
        || PyModule_AddIntConstant(m, "ACT_ORDER", ACT_ORDER) < 0 || PyModule_AddIntConstant(m, "NPROPS", NPROPS) < 0
        || PyModule_AddIntConstant(m, "ACT_OUTPUT_WAIT", ACT_OUTPUT_WAIT) < 0
        || PyModule_AddIntConstant(m, "ACT_OUTPUT_DONE", ACT_OUTPUT_DONE) < 0
        || PyModule_AddIntConstant(m, "MAXORDERS", MAXORDERS) < 0 || PyModule_AddIntConstant(m, "MAXTOK", MAXTOK) < 0
        || PyModule_AddIntConstant(m, "MAXR", MAXR) < 0 || PyModule_AddIntConstant(m, "MAXB", MAXB) < 0
        || PyModule_AddIntConstant(m, "MAXD", MAXD) < 0 || PyModule_AddIntConstant(m, "MAXJOBS", MAXJOBS) < 0
        || PyModule_AddIntConstant(m, "MAXJB", MAXJB) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
