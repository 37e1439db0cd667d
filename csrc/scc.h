/* The cycles of the compiled search's graph (included by explore_py.h): what checker/scc.py's
 * cycle_nodes returns for the CSR arrays (the smallest node of every strongly connected component
 * that holds a cycle, ascending), in C, so the graph phase of a multi-million-state run is not
 * an interpreted Tarjan.  Pearce's space-efficient variant of Tarjan's algorithm ("A space-efficient
 * algorithm for finding strongly connected components", IPL 2016), iterative: one rindex word per
 * node (0 = unvisited; a visited node's DFS index while its component is open; its component's
 * number, counted down from n + 1, once closed, so a closed node never lowers an open one), a root
 * byte per node, the open-node stack and the DFS frames.  Nodes at or past `head` (never expanded)
 * have no edges. */

typedef struct { uint32_t v, e; } Frame;  /* a node on the DFS path and its next edge */

typedef struct {
    const uint32_t *start, *target; size_t head;  /* node v < head: edges target[start[v]:start[v + 1]] */
    uint32_t *rindex, *open, next_index, next_component;
    uint8_t *root;
    size_t nopen;
    uint32_t *reps; size_t nreps, reps_cap;
} Tarjan;

static uint32_t edges_end(const Tarjan *t, uint32_t v) {
    return v < t->head ? t->start[v + 1] : 0;
}

static uint32_t edges_begin(const Tarjan *t, uint32_t v) {
    return v < t->head ? t->start[v] : 0;
}

static int has_self_loop(const Tarjan *t, uint32_t v) {
    for (uint32_t k = edges_begin(t, v); k < edges_end(t, v); k++) if (t->target[k] == v) return 1;
    return 0;
}

/* v is its component's root: close the component (v and the open nodes above it); its smallest
 * node kept if it holds a cycle.  -1: out of memory. */
static int close_component(Tarjan *t, uint32_t v) {
    uint32_t smallest = v, size = 1;
    t->next_index--;
    while (t->nopen && t->rindex[v] <= t->rindex[t->open[t->nopen - 1]]) {
        uint32_t w = t->open[--t->nopen];
        t->rindex[w] = t->next_component;
        t->next_index--;
        size++;
        if (w < smallest) smallest = w;
    }
    t->rindex[v] = t->next_component--;
    if (size == 1 && !has_self_loop(t, v)) return 0;
    t->reps = grow(t->reps, &t->reps_cap, t->nreps + 1, sizeof *t->reps);
    if (!t->reps) return -1;
    t->reps[t->nreps++] = smallest;
    return 0;
}

/* The DFS from `start`, frames on `frames` (room for one per node).  -1: out of memory. */
static int visit_from(Tarjan *t, uint32_t start, Frame *frames) {
    size_t depth = 0;
    t->rindex[start] = t->next_index++; t->root[start] = 1;
    frames[depth++] = (Frame){start, edges_begin(t, start)};
    while (depth) {
        Frame *f = &frames[depth - 1];
        uint32_t v = f->v;
        if (f->e < edges_end(t, v)) {
            uint32_t w = t->target[f->e];
            if (t->rindex[w] == 0) {  /* a tree edge: w first; this edge is looked at again after it */
                t->rindex[w] = t->next_index++; t->root[w] = 1;
                frames[depth++] = (Frame){w, edges_begin(t, w)};
                continue;
            }
            if (t->rindex[w] < t->rindex[v]) { t->rindex[v] = t->rindex[w]; t->root[v] = 0; }
            f->e++;
            continue;
        }
        depth--;
        if (t->root[v]) {
            if (close_component(t, v) < 0) return -1;
        } else {
            t->open[t->nopen++] = v;
        }
    }
    return 0;
}

static int cmp_u32(const void *a, const void *b) {
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return (x > y) - (x < y);
}

/* The smallest node of every cycle-holding component of nodes [0, n), ascending, as a list. */
static PyObject *cycles_of(const uint32_t *start, const uint32_t *target, size_t head, size_t n) {
    if (n >= UINT32_MAX - 2) { PyErr_SetString(PyExc_OverflowError, "too many states for cycles()"); return NULL; }
    Tarjan t = {.start = start, .target = target, .head = head, .next_index = 1, .next_component = (uint32_t)n + 1};
    t.rindex = calloc(n ? n : 1, sizeof *t.rindex);
    t.open = malloc((n ? n : 1) * sizeof *t.open);
    t.root = malloc(n ? n : 1);
    Frame *frames = malloc((n ? n : 1) * sizeof *frames);
    int ok = t.rindex && t.open && t.root && frames;
    Py_BEGIN_ALLOW_THREADS
    for (size_t v = 0; ok && v < n; v++)
        if (t.rindex[v] == 0 && visit_from(&t, (uint32_t)v, frames) < 0) ok = 0;
    if (ok && t.nreps) qsort(t.reps, t.nreps, sizeof *t.reps, cmp_u32);
    Py_END_ALLOW_THREADS
    free(t.rindex); free(t.open); free(t.root); free(frames);
    PyObject *out = ok ? PyList_New((Py_ssize_t)t.nreps) : NULL;
    for (size_t k = 0; out && k < t.nreps; k++) {
        PyObject *v = PyLong_FromUnsignedLong(t.reps[k]);
        if (!v) { Py_CLEAR(out); break; }
        PyList_SET_ITEM(out, (Py_ssize_t)k, v);
    }
    free(t.reps);
    return out ? out : (PyErr_Occurred() ? NULL : PyErr_NoMemory());
}

/* Explorer.cycles(): the search's graph; its unexpanded states have no edges. */
static PyObject *explorer_cycles(Explorer *e, PyObject *unused) {
    return cycles_of(e->edge_start, e->edge_target, e->head, e->n);
}

/* cycle_nodes(start, target): checker/scc.py's function over uint32 CSR bytes (the tests' random graphs);
 * every target must name a node. */
static PyObject *module_cycle_nodes(PyObject *unused, PyObject *args) {
    Py_buffer start, target;
    if (!PyArg_ParseTuple(args, "y*y*", &start, &target)) return NULL;
    PyObject *out = NULL;
    size_t nodes = start.len / 4 ? (size_t)start.len / 4 - 1 : 0, edges = (size_t)target.len / 4;
    const uint32_t *s = start.buf, *t = target.buf;
    int ok = start.len % 4 == 0 && target.len % 4 == 0 && (nodes == 0 ? edges == 0 : s[0] == 0 && s[nodes] == edges);
    for (size_t v = 0; ok && v < nodes; v++) ok = s[v] <= s[v + 1];
    for (size_t k = 0; ok && k < edges; k++) ok = t[k] < nodes;
    if (ok) out = cycles_of(s, t, nodes, nodes);
    else PyErr_SetString(PyExc_ValueError, "not a CSR graph: uint32 starts from 0 to len(target), targets below the node count");
    PyBuffer_Release(&start); PyBuffer_Release(&target);
    return out;
}
