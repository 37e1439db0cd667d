/* Checkpoints of the compiled search (included by explore_py.h; checker/compiled_checkpoint.py
 * writes the file and reads it back).  snapshot() hands the store out as bytes at a boundary
 * between two parents; restore() takes a snapshot into a fresh Explorer of the same config, and
 * only after checking that it is one this search could have written: every offset, parent,
 * level, edge and violation inside its arrays, each state its own encoding (decoded and encoded
 * again, the same bytes), no state twice, the initial states the fresh search's own.  A file the
 * checks pass cannot make the search read or write outside its arrays. */

static PyObject *explorer_snapshot(Explorer *e, PyObject *unused) {
    uint64_t *levels = malloc((e->nlevels ? e->nlevels : 1) * sizeof *levels);
    if (!levels) return PyErr_NoMemory();
    for (size_t d = 0; d < e->nlevels; d++) levels[d] = e->levels[d];
    e->edge_start[e->head] = (uint32_t)e->edges;  /* what the next parent's expansion starts from */
    PyObject *out = Py_BuildValue(
        "{sy#sy#sy#sy#sy#sy#sy#sy#snsnsnsKsk}",
        "arena", (const char *)e->arena, (Py_ssize_t)e->arena_len,
        "off", (const char *)e->off, (Py_ssize_t)((e->n + 1) * 4),
        "parent", (const char *)e->parent, (Py_ssize_t)(e->n * 4),
        "via", (const char *)e->via, (Py_ssize_t)e->n,
        "roots", (const char *)e->roots, (Py_ssize_t)(e->nroots * 2),
        "levels", (const char *)levels, (Py_ssize_t)(e->nlevels * 8),
        "edge_start", (const char *)e->edge_start, (Py_ssize_t)((e->head + 1) * 4),
        "edge_target", (const char *)e->edge_target, (Py_ssize_t)(e->edges * 4),
        "head", (Py_ssize_t)e->head, "transitions", (Py_ssize_t)e->transitions,
        "back_edges", (Py_ssize_t)e->back_edges, "witnesses", (unsigned long long)e->witnesses,
        "violated", (unsigned long)e->violated);
    free(levels);
    return out;
}

/* The bytes of snapshot field `key`, a whole number of `item`-byte values: their count. */
static long long field_bytes(PyObject *snap, const char *key, size_t item, const char **data) {
    PyObject *v = PyDict_GetItemString(snap, key);
    if (!v || !PyBytes_Check(v)) { PyErr_Format(PyExc_ValueError, "no %s array", key); return -1; }
    Py_ssize_t len = PyBytes_GET_SIZE(v);
    if (len % (Py_ssize_t)item) { PyErr_Format(PyExc_ValueError, "its %s array has a partial entry", key); return -1; }
    *data = PyBytes_AS_STRING(v);
    return (long long)(len / (Py_ssize_t)item);
}

static long long field_int(PyObject *snap, const char *key) {
    PyObject *v = PyDict_GetItemString(snap, key);
    if (!v || !PyLong_Check(v)) { PyErr_Format(PyExc_ValueError, "no %s count", key); return -1; }
    long long x = PyLong_AsLongLong(v);
    if (x < 0 || PyErr_Occurred()) { PyErr_Clear(); PyErr_Format(PyExc_ValueError, "its %s is out of range", key); return -1; }
    return x;
}

static int bad(const char *why) { PyErr_SetString(PyExc_ValueError, why); return -1; }

typedef struct {
    const char *arena, *off, *parent, *via, *roots, *levels, *estart, *etarget;
    long long arena_len, n, nroots, nlevels, head, edges;
} Snap;

static int read_snap(PyObject *snap, Snap *s) {
    long long noff, nparent;
    if ((s->arena_len = field_bytes(snap, "arena", 1, &s->arena)) < 0
        || (noff = field_bytes(snap, "off", 4, &s->off)) < 0
        || (nparent = field_bytes(snap, "parent", 4, &s->parent)) < 0
        || (s->n = field_bytes(snap, "via", 1, &s->via)) < 0
        || (s->nroots = field_bytes(snap, "roots", 2, &s->roots)) < 0
        || (s->nlevels = field_bytes(snap, "levels", 8, &s->levels)) < 0
        || field_bytes(snap, "edge_start", 4, &s->estart) < 0
        || (s->edges = field_bytes(snap, "edge_target", 4, &s->etarget)) < 0
        || (s->head = field_int(snap, "head")) < 0) return -1;
    if (s->n < 1 || s->n >= UINT32_MAX || noff != s->n + 1 || nparent != s->n)
        return bad("its state arrays disagree on the number of states");
    if (PyBytes_GET_SIZE(PyDict_GetItemString(snap, "edge_start")) != (s->head + 1) * 4 || s->head > s->n)
        return bad("its edge starts do not match its next state");
    if (s->nroots < 1 || s->nroots > s->n || s->nroots > 65536 || s->nlevels < 1 || s->nlevels > 65535)
        return bad("its initial states or depths are out of range");
    return 0;
}

static uint32_t u32(const char *p, long long i) { uint32_t v; memcpy(&v, p + 4 * i, 4); return v; }
static int32_t i32(const char *p, long long i) { int32_t v; memcpy(&v, p + 4 * i, 4); return v; }
static uint64_t u64(const char *p, long long i) { uint64_t v; memcpy(&v, p + 8 * i, 8); return v; }

/* Offsets, parents and depths: each state a slice of the arena, its parent expanded before it at the
   depth above its own, the initial states first. */
static int check_states(const Snap *s) {
    if (u32(s->off, 0) != 0 || (long long)u32(s->off, s->n) != s->arena_len) return bad("its offsets do not span its arena");
    if (u64(s->levels, 0) != 0) return bad("its first depth does not start at state 0");
    long long depth = 0;
    uint16_t *depth_of = malloc((size_t)s->n * sizeof *depth_of);
    if (!depth_of) { PyErr_NoMemory(); return -1; }
    int ok = 1;
    for (long long d = 1; ok && d < s->nlevels; d++)
        ok = u64(s->levels, d) > u64(s->levels, d - 1) && u64(s->levels, d) < (uint64_t)s->n;
    for (long long i = 0; ok && i < s->n; i++) {
        uint32_t len = u32(s->off, i + 1) - u32(s->off, i);
        while (depth + 1 < s->nlevels && (uint64_t)i >= u64(s->levels, depth + 1)) depth++;
        depth_of[i] = (uint16_t)depth;
        int32_t p = i32(s->parent, i);
        ok = u32(s->off, i + 1) > u32(s->off, i) && len <= 4096
             && (i < s->nroots ? p == -1 && depth == 0
                               : p >= 0 && p < i && p < s->head && depth_of[p] + 1 == depth);
    }
    free(depth_of);
    return ok ? 0 : bad("its offsets, parents or depths are not those of a breadth-first search");
}

/* Edges: the expanded states' successor lists, every target a stored state, every state but the
   initial ones a successor of its parent; the back-edge count. */
static int check_edges(const Snap *s, long long transitions, long long back_edges) {
    if (u32(s->estart, 0) != 0 || (long long)u32(s->estart, s->head) != s->edges || transitions != s->edges)
        return bad("its edges do not match its transitions");
    uint8_t *reached = calloc((size_t)s->n, 1);
    if (!reached) { PyErr_NoMemory(); return -1; }
    long long back = 0;
    const char *why = NULL;
    for (long long i = 0; !why && i < s->head; i++) {
        if (u32(s->estart, i + 1) < u32(s->estart, i)) why = "its edge starts go backwards";
        for (uint32_t j = u32(s->estart, i); !why && j < u32(s->estart, i + 1); j++) {
            uint32_t t = u32(s->etarget, j);
            if ((long long)t >= s->n) why = "an edge leads to no stored state";
            else if (i32(s->parent, t) == i) reached[t] = 1;
            back += (long long)t <= i;
        }
    }
    for (long long i = s->nroots; !why && i < s->n; i++)
        if (!reached[i]) why = "a state is no successor of its parent";
    free(reached);
    if (why) return bad(why);
    return back == back_edges ? 0 : bad("its back-edge count does not match its edges");
}

/* Every state its own canonical encoding, the initial states the fresh search's. */
static int check_encodings(Explorer *e, const Snap *s) {
    uint8_t in[4096], out[4096];
    St st;
    if (s->nroots != (long long)e->nroots || memcmp(s->roots, e->roots, (size_t)s->nroots * 2) != 0)
        return bad("its initial states are not this config's");
    for (long long i = 0; i < s->n; i++) {
        uint32_t len = u32(s->off, i + 1) - u32(s->off, i);
        memset(in, 0, sizeof in);
        memcpy(in, s->arena + u32(s->off, i), len);
        decode(&e->cfg, in, &st);
        int again = encode(&e->cfg, &st, out);
        if (again != (int)len || memcmp(in, out, len) != 0) return bad("a stored state is not one of this config's");
        if (i < s->nroots && (e->off[i + 1] - e->off[i] != len || memcmp(e->arena + e->off[i], in, len) != 0))
            return bad("its initial states are not this config's");
    }
    return 0;
}

static int take_arrays(Explorer *e, const Snap *s) {
    size_t cap = 1024;
    while (cap < (size_t)s->n + 2) cap *= 2;
    size_t ecap = 1024;
    while (ecap < (size_t)s->edges + 1) ecap *= 2;
    uint8_t *arena = malloc((size_t)s->arena_len), *via = malloc(cap);
    uint32_t *off = malloc(cap * 4), *estart = malloc(cap * 4), *etarget = malloc(ecap * 4);
    int32_t *parent = malloc(cap * 4);
    if (!arena || !via || !off || !estart || !etarget || !parent) {
        free(arena); free(via); free(off); free(estart); free(etarget); free(parent);
        PyErr_NoMemory();
        return -1;
    }
    memcpy(arena, s->arena, (size_t)s->arena_len); memcpy(via, s->via, (size_t)s->n);
    memcpy(off, s->off, (size_t)(s->n + 1) * 4); memcpy(parent, s->parent, (size_t)s->n * 4);
    memcpy(estart, s->estart, (size_t)(s->head + 1) * 4); memcpy(etarget, s->etarget, (size_t)s->edges * 4);
    free(e->arena); free(e->via); free(e->off); free(e->edge_start); free(e->edge_target); free(e->parent);
    e->arena = arena; e->arena_len = e->arena_cap = (size_t)s->arena_len; e->via = via; e->off = off;
    e->parent = parent; e->edge_start = estart; e->edge_target = etarget;
    e->n = (size_t)s->n; e->cap = cap; e->edges = (size_t)s->edges; e->edge_cap = ecap; e->head = (size_t)s->head;
    e->nroots = (size_t)s->nroots;
    memcpy(e->roots, s->roots, (size_t)s->nroots * 2);
    e->nlevels = (size_t)s->nlevels; e->head_depth = 0;
    for (long long d = 0; d < s->nlevels; d++) e->levels[d] = (size_t)u64(s->levels, d);
    return 0;
}

/* The store's hash table, rebuilt; a state stored twice is refused. */
static int rebuild_table(Explorer *e) {
    size_t slots = 1024;
    while (4 * e->n > 3 * slots) slots *= 2;
    uint32_t *t = calloc(slots, sizeof(uint32_t));
    uint8_t *tags = malloc(slots);
    if (!t || !tags) { free(t); free(tags); PyErr_NoMemory(); return -1; }
    for (size_t i = 0; i < e->n; i++) {
        const uint8_t *p = e->arena + e->off[i];
        size_t len = e->off[i + 1] - e->off[i];
        uint64_t h = hash_bytes(p, len);
        size_t j = h & (slots - 1);
        for (uint32_t k; (k = t[j]) != 0; j = (j + 1) & (slots - 1))
            if (e->off[k] - e->off[k - 1] == len && memcmp(e->arena + e->off[k - 1], p, len) == 0) {
                free(t); free(tags);
                return bad("a state is stored twice");
            }
        t[j] = (uint32_t)(i + 1);
        tags[j] = hash_tag(h);
    }
    free(e->table); free(e->tags);
    e->table = t; e->tags = tags; e->mask = slots - 1;
    return 0;
}

/* restore(snapshot, found): take the snapshot over, with its violations [(property ordinal, state)]. */
static PyObject *explorer_restore(Explorer *e, PyObject *args) {
    PyObject *snap, *found;
    if (!PyArg_ParseTuple(args, "O!O!", &PyDict_Type, &snap, &PyList_Type, &found)) return NULL;
    Snap s;
    long long transitions, back_edges, witnesses;
    if (read_snap(snap, &s) < 0 || (transitions = field_int(snap, "transitions")) < 0
        || (back_edges = field_int(snap, "back_edges")) < 0 || (witnesses = field_int(snap, "witnesses")) < 0
        || check_states(&s) < 0 || check_edges(&s, transitions, back_edges) < 0) return NULL;
    uint32_t violated = 0;
    for (Py_ssize_t k = 0; k < PyList_GET_SIZE(found); k++) {
        int prop;
        Py_ssize_t node;
        if (!PyArg_ParseTuple(PyList_GET_ITEM(found, k), "in", &prop, &node) || prop < 0 || prop >= e->nprops
            || node < 0 || node >= s.n || violated >> prop & 1 || e->stops[prop]) {
            PyErr_Clear();
            bad("its violations are not this run's");
            return NULL;
        }
        violated |= 1u << prop;
    }
    if (check_encodings(e, &s) < 0 || take_arrays(e, &s) < 0 || rebuild_table(e) < 0) return NULL;
    e->transitions = (size_t)transitions; e->back_edges = (size_t)back_edges;
    e->witnesses = (uint64_t)witnesses; e->violated = violated; e->stopped = 0;
    Py_SETREF(e->found, PySequence_List(found));
    if (!e->found) return NULL;
    Py_RETURN_NONE;
}
