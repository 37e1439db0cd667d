/* asyncspec.checker._compiled: the compiled explorer's search (checker/compiled.py drives it).
 *
 * The same breadth-first search as checker/fast_explorer.py: parents expanded in index order,
 * successors integrated in the order the spec generates them, the same stop rules (the first
 * violation of a property that stops the run, after the parent; --max-states after each
 * parent).  A state is its bit string (encode.c) in one arena; an open-addressing table of
 * uint32 indices finds it; parent, via (action id, or the initial state's ordinal) and depth
 * arrays and the first index of each depth give shortest traces; edges are CSR arrays. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdlib.h>
#include <string.h>
#include "compiled.h"
#include "worker.h"

typedef struct {
    PyObject_HEAD
    Cfg cfg;
    int nprops, props[NPROPS + NWPROPS], stops[NPROPS + NWPROPS];  /* a worker property: NPROPS + its index */
    Wcfg wcfg;                      /* the worker model composed with the engine (strategy 0: none) */
    uint32_t wwitnesses;            /* the worker's events reached (worker.h WE_*) */
    uint8_t *arena; size_t arena_len, arena_cap;
    uint32_t *off;                  /* n + 1 offsets into the arena */
    int32_t *parent; uint8_t *via;  /* via of an initial state: its ordinal in roots */
    uint16_t roots[65536]; size_t nroots;
    size_t levels[65536], nlevels, head_depth;  /* levels[d]: the first state at depth d */
    uint32_t *edge_start, *edge_target;
    size_t n, cap, edges, edge_cap;
    uint32_t *table; size_t mask;   /* index + 1, 0 = empty */
    uint8_t *tags;                  /* per slot: its state's hash_tag, so a probe reads few other states */
    size_t head, transitions, back_edges, max_states;
    uint64_t witnesses;
    uint32_t violated;
    int stopped, error;
    PyObject *found;                /* [(property index, state)] in the order they were found */
} Explorer;

/* A state's hash: its bytes eight at a time, each word mixed in by a multiply, then splitmix64's
 * finalizer.  Only the table's layout depends on it (indices are insertion order), so a machine of
 * the other byte order finds the same states at the same indices. */
static uint64_t hash_bytes(const uint8_t *p, size_t n) {
    uint64_t h = 0x9E3779B97F4A7C15ULL ^ n, w;
    for (; n >= 8; p += 8, n -= 8) {
        memcpy(&w, p, 8);
        h = (h ^ w) * 0xBF58476D1CE4E5B9ULL;
        h ^= h >> 31;
    }
    w = 0;
    memcpy(&w, p, n);
    h = (h ^ w) * 0x94D049BB133111EBULL;
    h ^= h >> 30; h *= 0xBF58476D1CE4E5B9ULL; h ^= h >> 27; h *= 0x94D049BB133111EBULL;
    return h ^ (h >> 31);
}

static void *grow(void *p, size_t *cap, size_t need, size_t size) {
    if (need <= *cap) return p;
    size_t c = *cap ? *cap : 1024;
    while (c < need) c *= 2;
    void *q = realloc(p, c * size);
    if (q) *cap = c;
    return q;
}

/* The top byte of a state's hash, kept beside its slot. */
static uint8_t hash_tag(uint64_t h) { return (uint8_t)(h >> 56); }

#define REHASH_AHEAD 16  /* states whose new slots are fetched while an earlier one is placed */

static int rehash(Explorer *e, size_t slots) {
    uint32_t *t = calloc(slots, sizeof(uint32_t));
    uint8_t *tags = malloc(slots);
    if (!t || !tags) { free(t); free(tags); return -1; }
    uint64_t ring[REHASH_AHEAD];  /* the hashes of states i .. i + REHASH_AHEAD - 1 */
    for (size_t i = 0; i < e->n + REHASH_AHEAD; i++) {
        if (i >= REHASH_AHEAD) {  /* state k placed, then its ring entry reused for state i */
            size_t k = i - REHASH_AHEAD;
            uint64_t h = ring[k % REHASH_AHEAD];
            size_t j = h & (slots - 1);
            while (t[j]) j = (j + 1) & (slots - 1);
            t[j] = (uint32_t)(k + 1);
            tags[j] = hash_tag(h);
        }
        if (i < e->n) {
            uint64_t h = hash_bytes(e->arena + e->off[i], e->off[i + 1] - e->off[i]);
            __builtin_prefetch(&t[h & (slots - 1)], 1);
            ring[i % REHASH_AHEAD] = h;
        }
    }
    free(e->table); free(e->tags);
    e->table = t; e->tags = tags; e->mask = slots - 1;
    return 0;
}

/* The index of the state `buf[0:len]` (hash h), added if new (*is_new). -1: out of memory. */
static long long store_add_hashed(Explorer *e, const uint8_t *buf, size_t len, uint64_t h, int parent, int via,
                                  size_t depth, int *is_new) {
    size_t j = h & e->mask;
    uint8_t tag = hash_tag(h);
    for (uint32_t k; (k = e->table[j]) != 0; j = (j + 1) & e->mask) {
        size_t i = k - 1;
        if (e->tags[j] == tag && e->off[i + 1] - e->off[i] == len && memcmp(e->arena + e->off[i], buf, len) == 0) {
            *is_new = 0;
            return (long long)i;
        }
    }
    size_t cap = e->cap;
    if (e->n + 2 > cap) {
        size_t c1 = cap, c2 = cap, c3 = cap, c5 = cap;
        e->off = grow(e->off, &c1, e->n + 2, sizeof *e->off);
        e->parent = grow(e->parent, &c2, e->n + 2, sizeof *e->parent);
        e->via = grow(e->via, &c3, e->n + 2, sizeof *e->via);
        e->edge_start = grow(e->edge_start, &c5, e->n + 2, sizeof *e->edge_start);
        if (!e->off || !e->parent || !e->via || !e->edge_start) return -1;
        e->cap = c1;
    }
    if (e->n == 0) e->off[0] = 0;
    if (e->arena_len + len > UINT32_MAX || depth >= 65535) return -2;
    if (parent < 0 && e->nroots >= 65536) return -2;
    e->arena = grow(e->arena, &e->arena_cap, e->arena_len + len, 1);
    if (!e->arena) return -1;
    memcpy(e->arena + e->arena_len, buf, len);
    e->arena_len += len;
    size_t i = e->n++;
    e->off[i + 1] = (uint32_t)e->arena_len;
    e->parent[i] = parent;
    if (parent < 0) { e->via[i] = 0; e->roots[e->nroots++] = (uint16_t)via; }
    else e->via[i] = (uint8_t)via;
    if (depth + 1 > e->nlevels) e->levels[e->nlevels++] = i;
    e->table[j] = (uint32_t)(i + 1);
    e->tags[j] = tag;
    *is_new = 1;
    if (4 * e->n > 3 * (e->mask + 1) && rehash(e, 2 * (e->mask + 1)) < 0) return -1;
    return (long long)i;
}

/* store_add_hashed, the hash computed here. */
static long long store_add(Explorer *e, const uint8_t *buf, size_t len, int parent, int via, size_t depth, int *is_new) {
    return store_add_hashed(e, buf, len, hash_bytes(buf, len), parent, via, depth, is_new);
}

/* The violations of a new state, from its property bits (bit k: e->props[k] fails), recorded in
   order; a stopping one ends the run.  The search and the --jobs threads (parallel.h) both call it. */
static int record_props(Explorer *e, uint32_t props, size_t node) {
    for (int k = 0; k < e->nprops; k++) {
        if (e->violated >> k & 1 || !(props >> k & 1)) continue;
        e->violated |= 1u << k;
        PyObject *item = Py_BuildValue("(in)", k, (Py_ssize_t)node);
        if (!item || PyList_Append(e->found, item) < 0) { Py_XDECREF(item); return -1; }
        Py_DECREF(item);
        if (e->stops[k]) e->stopped = 1;
    }
    return 0;
}

/* The properties a new state violates that no earlier state did. */
static int check_state(Explorer *e, const St *s, size_t node) {
    uint32_t props = 0;
    for (int k = 0; k < e->nprops; k++)
        if (!(e->violated >> k & 1) && prop_violated(&e->cfg, s, e->props[k])) props |= 1u << k;
    return record_props(e, props, node);
}

static int add_edge(Explorer *e, size_t target) {
    e->edge_target = grow(e->edge_target, &e->edge_cap, e->edges + 1, sizeof *e->edge_target);
    if (!e->edge_target) return -1;
    e->edge_target[e->edges++] = (uint32_t)target;
    return 0;
}

static int state_at(Explorer *e, Py_ssize_t i, St *s) {
    if (i < 0 || (size_t)i >= e->n) { PyErr_SetString(PyExc_IndexError, "no such state"); return -1; }
    decode(&e->cfg, e->arena + e->off[i], s);
    return 0;
}

static int encoded(Explorer *e, St *s, uint8_t *buf) {
    canonical(s);
    int len = encode(&e->cfg, s, buf);
    if (len < 0) PyErr_SetString(PyExc_OverflowError, "a counter is outside the compiled encoding's range");
    return len;
}

#include "explore_py.h"
