/* The worker half in C: spec/worker.py's state, rows and shared mechanics, composed with the
 * engine relation as checker/joint.py composes them (docs/worker.md, "The compiled joint explorer").
 *
 * A joint state is the engine's St and the worker's Wk; its bit string is the engine's (encode.c)
 * followed by the worker's bytes (worker.c).  The worker's ghost errors (Errors in spec/worker.py)
 * are kept as the values their messages are made of, so two states are equal here exactly when
 * the spec's are: the messages themselves come from the spec, on the state replayed along the path. */
#ifndef ASYNCSPEC_WORKER_H
#define ASYNCSPEC_WORKER_H
#include "compiled.h"

#define MAXH 32      /* a request's host history (output positions) */
#define MAXTOK 8     /* rows of a padded device tensor: decode buckets up to 8 */
#define MAXBUCKETS 8
#define MAXOUTS 8    /* Neuron: outputs queued */
#define MAXORDERS 120 /* row orders of one step: 5 requests, any order */
#define ACT_ORDER (ACT_UPDATE + 1)  /* schedule, row order k >= 1 (order 0: ACT_SCHEDULE) */
#define ACT_OUTPUT_WAIT 254
#define ACT_OUTPUT_DONE 255
#define NWPROPS 4    /* W1-W4, property ids NPROPS + 0..3 */
#define MAXJSUCC (MAXSUCC + MAXORDERS)

enum { STRAT_NONE = 0, STRAT_V1 = 1, STRAT_V2 = 2, STRAT_NEURON = 3 };

/* spec/worker.py WORKER_EVENTS indices */
enum { WE_REORDER = 0, WE_COMPOSITION = 1, WE_BUCKET = 2, WE_PREFILL_TO_DECODE = 3, WE_ASYNC = 4,
       WE_CPU_ROW = 5, WE_REMAP = 6, WE_MISMATCH = 7, WE_MATERIALIZE_MAIN = 8, WE_ALREADY_ACTUALIZED = 9 };

/* spec/worker.py tokens: (request, output position); the special ones have request -1 */
typedef struct { int8_t r, p; } Tok;
#define TOK(r, p) ((Tok){(int8_t)(r), (int8_t)(p)})
#define PLACEHOLDER TOK(-1, -1)
#define STALE TOK(-1, -2)
#define PAD TOK(-1, -3)
#define DISCARDED TOK(-1, -4)
#define RESAMPLED TOK(-1, -5)
static inline int tok_eq(Tok a, Tok b) { return a.r == b.r && a.p == b.p; }

typedef struct {
    int strategy, reorder_any, nbuckets, buckets[MAXBUCKETS];  /* WorkerConfig, buckets sorted */
    int nreq;  /* the config's requests */
} Wcfg;

/* spec/worker.py Row */
typedef struct { int req, ntok, first, last, nprompt, spos, known; } Row;
static inline int row_is_decode(const Row *r) { return r->first >= r->nprompt && r->ntok == 1; }
static inline int row_fresh(const Row *r) { return r->first == 0; }
static inline int row_needs(const Row *r) { return r->last - r->nprompt + 1; }
static inline Tok row_expected(const Row *r) { int n = row_needs(r); return TOK(r->req, n > 0 ? n : 0); }

/* the values each worker property's first message is made of (spec/worker.py Errors) */
typedef struct { uint8_t set, kind, req, off_rank; Tok fed, want; } W1Err;  /* kind 1: wrong token; 2: not last sampled (want.p) */
typedef struct { uint8_t set; int16_t step, mats; } W2Err;
typedef struct { uint8_t set, prev, curr; int16_t step; } W3Err;  /* request sets as bit masks */
typedef struct { uint8_t set, n, order[MAXR]; int16_t shape; } W4Err;

typedef struct { uint8_t n, order[MAXR], all_decode, had_prefill; int16_t in_shape, out_shape; } LastExec;
typedef struct {  /* Neuron OutputRec */
    int16_t step; uint8_t n, req[MAXR]; int8_t pos[MAXR];
    uint8_t actualized, mats, waiters, thread_waiting, delivered;
} ORec;

typedef struct {
    uint8_t nslots, slots[MAXR];
    uint8_t hn[MAXR]; int8_t host[MAXR][MAXH];
    int8_t last_sampled[MAXR];
    uint8_t has_prev, nprev, prev_req[MAXR], prev_row[MAXR];  /* V1 prev_req_id_to_index */
    uint8_t nps; Tok prev_sampled[MAXTOK];                     /* V1 prev_sampled_token_ids */
    int8_t req_slot[MAXR]; int16_t prefill_len[MAXR]; Tok slot_tokens[MAXR];  /* V2 */
    uint8_t has_buf, nfut, nbo, bo[MAXR], off_act; Tok fut[MAXTOK]; int16_t bstep;  /* Neuron buffer */
    uint8_t nout; ORec out[MAXOUTS];
    uint8_t ohn[MAXR]; int8_t off_host[MAXR][MAXH];
    int16_t steps, async_steps, sync_steps, dev_steps;
    uint8_t has_last; LastExec last;
    W1Err w1; W2Err w2; W3Err w3; W4Err w4;
    uint8_t bad;  /* a bound of this encoding was passed (never a spec state's value) */
} Wk;

typedef struct { St s; Wk w; } JSt;
typedef struct { JSt j; int action; uint64_t events; uint32_t wev; } JSucc;

/* one worker action's working copy (spec/worker.py WDraft): the state and its events */
typedef struct { Wk w; uint32_t ev; } WDraft;
#define WEMIT(d, e) ((d)->ev |= 1u << (e))

/* worker.c */
void worker_init(const Cfg *cfg, Wk *w);
int joint_next_states(const Cfg *cfg, const Wcfg *wc, const JSt *s, JSucc *out);
int worker_prop_violated(const Wcfg *wc, const Wk *w, int wprop);
int worker_encode(const Cfg *cfg, const Wcfg *wc, const Wk *w, uint8_t *buf);
int worker_decode(const Cfg *cfg, const Wcfg *wc, const uint8_t *buf, Wk *w);
int batch_orders(const Wcfg *wc, const Wk *w, const Row *rows, int nrows, uint8_t orders[][MAXR]);
Tok host_read(const int8_t *host, int hn, const Row *row);
void check_feed(WDraft *d, const Row *row, Tok fed, int off_rank);
int all_decode_of(const Row *rows, int nrows);
int in_shape_of(const Wcfg *wc, const Row *rows, int nrows);
void step_events(const Wcfg *wc, WDraft *d, const Wk *ws, const uint8_t *order, int n, const Row *rows);
void finish_step(const Wcfg *wc, WDraft *d, const Wk *ws, const Row *rows, int n, const uint8_t *order,
                 int out_shape, int counted_async);
void count_step(WDraft *d, const Wk *ws, int counted_async, int device_fed);
void reset_host(WDraft *d, const Wk *ws, const Row *rows, int n, int finished, int refresh_absent);
void forget_dropped_samples(WDraft *d, const Row *rows, int n);
void host_append(Wk *w, int req, int value);
const Row *row_of(const Row *rows, int n, int req);
/* worker_v1.c, worker_v2.c, worker_neuron.c: one successor per row order, the drafts in `out`
 * (Neuron: none while the main thread would wait on the output thread's lock) */
int v1_execute(const Wcfg *wc, const Wk *ws, const Row *rows, int n, int finished, WDraft *out);
int v2_execute(const Wcfg *wc, const Wk *ws, const Row *rows, int n, int finished, WDraft *out);
int neuron_execute(const Wcfg *wc, const Wk *ws, const Row *rows, int n, int finished, WDraft *out);
/* worker_neuron.c: the empty step, the output thread, the engine's side of the outputs, W2 */
int neuron_empty_step(const Wk *ws, int finished, WDraft *d);
int neuron_output_thread(const Wk *ws, WDraft *d, int *action);
int neuron_can_deliver(const Wk *w);
void neuron_engine_processed(Wk *w);
int neuron_w2_violated(const Wk *w);
#endif
