/* --ray for the compiled explorer (included by explore_py.h after parallel.h; checker/compiled_ray.py
 * drives it).  The parents of a batch leave this process as their bit strings (`frontier`); a Ray
 * actor holding an Explorer of the same config expands a slice of them (`expand`: expand_parent's
 * work, the successors' bit strings and records as one bytes object); this process takes the
 * records back in index order (`integrate`: run_parallel's integration), so the result is the
 * single-thread one.
 *
 * An expansion is: u32 parents; u32 first[parents + 1] (each parent's first record); per record
 * u32 at, u32 len, u32 props, u64 events, u8 action (21 bytes, native byte order: the actors run
 * the same build); then the bit strings.  `integrate` checks every offset before it reads. */

#define RECORD 21

/* frontier(max) -> (head, [bit string of each parent in head .. head + max)) */
static PyObject *explorer_frontier(Explorer *e, PyObject *arg) {
    Py_ssize_t max = PyLong_AsSsize_t(arg);
    if (max < 0) { if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "max >= 0"); return NULL; }
    size_t lo = e->head, hi = e->stopped ? lo : e->n;
    if (hi - lo > (size_t)max) hi = lo + (size_t)max;
    PyObject *out = PyList_New((Py_ssize_t)(hi - lo));
    for (size_t i = lo; out && i < hi; i++) {
        PyObject *b = PyBytes_FromStringAndSize((const char *)e->arena + e->off[i], e->off[i + 1] - e->off[i]);
        if (!b) { Py_CLEAR(out); break; }
        PyList_SET_ITEM(out, (Py_ssize_t)(i - lo), b);
    }
    return out ? Py_BuildValue("(nN)", (Py_ssize_t)lo, out) : NULL;
}

/* The expansion record of the worker's buffers over `np` parents (NULL on no memory). */
static PyObject *expansion_bytes(const Worker *w, size_t np) {
    size_t size = 4 + 4 * (np + 1) + RECORD * w->ndone + w->buf_len;
    PyObject *out = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)size);
    if (!out) return NULL;
    uint8_t *p = (uint8_t *)PyBytes_AS_STRING(out);
    uint32_t n32 = (uint32_t)np;
    memcpy(p, &n32, 4); p += 4;
    memcpy(p, w->first, 4 * (np + 1)); p += 4 * (np + 1);
    for (size_t j = 0; j < w->ndone; j++) {
        const Done *d = &w->done[j];
        memcpy(p, &d->at, 4); memcpy(p + 4, &d->len, 4); memcpy(p + 8, &d->props, 4);
        memcpy(p + 12, &d->events, 8); p[20] = d->action;
        p += RECORD;
    }
    if (w->buf_len) memcpy(p, w->buf, w->buf_len);
    return out;
}

/* expand([bit strings]) -> expansion: each parent's successors, canonical, with their properties. */
static PyObject *explorer_expand(Explorer *e, PyObject *arg) {
    if (e->wcfg.strategy) { PyErr_SetString(PyExc_ValueError, "the joint search is not expanded remotely"); return NULL; }
    PyObject *fast = PySequence_Fast(arg, "expand takes a list of bit strings");
    if (!fast) return NULL;
    size_t np = (size_t)PySequence_Fast_GET_SIZE(fast);
    Worker w;
    memset(&w, 0, sizeof w);
    w.e = e;
    w.succ = malloc(sizeof(Succ) * MAXSUCC);
    w.first = malloc(sizeof(uint32_t) * (np + 1));
    PyObject *out = NULL;
    if (!w.succ || !w.first) { PyErr_NoMemory(); goto done; }
    uint8_t enc[4096];
    for (size_t i = 0; i < np; i++) {
        char *p; Py_ssize_t len;
        if (PyBytes_AsStringAndSize(PySequence_Fast_GET_ITEM(fast, (Py_ssize_t)i), &p, &len) < 0) goto done;
        if (len > (Py_ssize_t)sizeof enc) { PyErr_SetString(PyExc_ValueError, "a bit string too long"); goto done; }
        memset(enc, 0, sizeof enc);  /* decode never reads past a bit string it was given */
        memcpy(enc, p, (size_t)len);
        w.first[i] = (uint32_t)w.ndone;
        int code = expand_parent(&w, enc);
        if (code) { worker_error(code); goto done; }
    }
    w.first[np] = (uint32_t)w.ndone;
    out = expansion_bytes(&w, np);
done:
    Py_DECREF(fast);
    free(w.succ); free(w.first); free(w.buf); free(w.done);
    return out;
}

/* The records of an expansion over parents [head, head + np), checked; NULL with ValueError. */
static Done *expansion_records(Explorer *e, const uint8_t *p, size_t size, size_t *np, uint32_t **first,
                               const uint8_t **buf) {
    uint32_t n32;
    if (size < 4) goto bad;
    memcpy(&n32, p, 4);
    *np = n32;
    if (*np > e->n - e->head || size < 4 + 4 * (*np + 1)) goto bad;
    *first = malloc(4 * (*np + 1));
    if (!*first) { PyErr_NoMemory(); return NULL; }
    memcpy(*first, p + 4, 4 * (*np + 1));
    size_t nd = (*first)[*np], at = 4 + 4 * (*np + 1);
    if ((*first)[0] != 0 || nd > (size - at) / RECORD) goto bad;
    for (size_t i = 0; i < *np; i++) if ((*first)[i] > (*first)[i + 1]) goto bad;
    *buf = p + at + RECORD * nd;
    size_t buf_len = size - at - RECORD * nd;
    Done *d = malloc(sizeof(Done) * (nd ? nd : 1));
    if (!d) { free(*first); *first = NULL; PyErr_NoMemory(); return NULL; }
    for (size_t j = 0; j < nd; j++) {
        const uint8_t *r = p + at + RECORD * j;
        memcpy(&d[j].at, r, 4); memcpy(&d[j].len, r + 4, 4); memcpy(&d[j].props, r + 8, 4);
        memcpy(&d[j].events, r + 12, 8); d[j].action = r[20];
        if (d[j].at > buf_len || d[j].len > buf_len - d[j].at) { free(d); goto bad; }
        d[j].hash = hash_bytes(*buf + d[j].at, d[j].len);  /* computed here: the store's hash is this build's */
    }
    return d;
bad:
    free(*first); *first = NULL;
    PyErr_SetString(PyExc_ValueError, "a malformed expansion");
    return NULL;
}

/* integrate(head, expansion) -> (status, parents integrated): 0 go on, 2 a violation stopped the
 * run, 3 --max-states; the records of parents after a stop are not read. */
static PyObject *explorer_integrate(Explorer *e, PyObject *args) {
    Py_ssize_t lo;
    Py_buffer view;
    if (!PyArg_ParseTuple(args, "ny*", &lo, &view)) return NULL;
    PyObject *out = NULL;
    size_t np = 0, taken = 0;
    uint32_t *first = NULL;
    const uint8_t *buf;
    if ((size_t)lo != e->head) { PyErr_SetString(PyExc_ValueError, "an expansion of other parents"); goto done; }
    if (e->stopped) { out = Py_BuildValue("(in)", 2, (Py_ssize_t)0); goto done; }
    Done *d = expansion_records(e, view.buf, (size_t)view.len, &np, &first, &buf);
    if (!d) goto done;
    int code = 0;
    while (taken < np && code == 0) {
        code = integrate_parent(e, e->head, d + first[taken], first[taken + 1] - first[taken], buf, d + first[np]);
        if (code >= 0) taken++;
    }
    free(d); free(first);
    if (code >= 0) out = Py_BuildValue("(in)", code, (Py_ssize_t)taken);
done:
    PyBuffer_Release(&view);
    return out;
}
