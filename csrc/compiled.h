/* The compiled explorer's second encoding of the spec (docs/explorer.md, "The compiled explorer").
 *
 * One C mirror of spec/engine.py's next-state relation for the configs checker/compiled.py
 * lets through (encoder inputs and Mamba groups included), held to the spec by
 * tests/test_compiled_explorer.py:
 * the same states, indices, edges, verdicts and traces as `--explorer plain`. */
#ifndef ASYNCSPEC_COMPILED_H
#define ASYNCSPEC_COMPILED_H
#include <stdint.h>
#include <stddef.h>

#define MAXR 8   /* requests */
#define MAXB 16  /* KV blocks */
#define MAXD 4   /* batch queue depth */
#define NULL_BLK 0xFF  /* state.NULL_BLOCK in a sliding-window table */
#define MAXJOBS 12    /* offloading store jobs not reported complete */
#define MAXJB 8       /* blocks of one store job */

/* spec/request.py status codes */
enum { WAITING = 0, RUNNING = 1, PREEMPTED = 2, F_STOPPED = 3, F_LENGTH = 4, F_ABORTED = 5, NOT_ARRIVED = 6,
       WAITING_FOR_REMOTE_KVS = 7, F_ERROR = 8, WAITING_FOR_STREAMING_REQ = 9 };

/* spec/state.py KV_* connector transfers (kv_transfer) */
enum { KV_NONE = 0, KV_LOADING = 1, KV_RECVD = 2, KV_FAILED = 3, KV_FAILED_RECVD = 4, KV_PROMOTED = 5,
       KV_DONE = 6, KV_SENDING = 7, KV_ORPHAN = 8 };

/* spec/events.py ALL_EVENTS indices (checked against the spec by the tests) */
enum {
    EV_MAX_TOKENS_GUARD = 0, EV_WASTED_STEP = 1, EV_PREEMPT_DELIVER = 2, EV_PREEMPT_DROP = 3,
    EV_STALE_DELIVERY = 4, EV_STALE_DROP = 5, EV_STALE_RESUME_SKIP = 6, EV_DEFERRED_FREE = 7,
    EV_DEFERRED_FREE_DRAINED = 8, EV_CHUNKED_PREFILL = 9, EV_EMPTY_STEP = 10, EV_PREEMPTION = 11,
    EV_ABORT_IN_FLIGHT = 12, EV_PREFIX_CACHE_HIT = 13, EV_SPEC_REJECTION = 14, EV_SPEC_ALL_ACCEPTED = 15,
    EV_STRUCTURED_DEFERRAL = 16, EV_RESET_FAILED = 17, EV_SLIDING_WINDOW_FREE = 18, EV_KV_ASYNC_LOAD = 19,
    EV_KV_LOAD_FAILED = 20, EV_KV_SEND_DELAYED_FREE = 21, EV_KV_ABORT_DURING_LOAD = 22,
    EV_PRIORITY_PREEMPTION = 23, EV_PREEMPTED_SCHEDULED_UNDONE = 24, EV_LONG_PREFILL_CAPPED = 25,
    EV_MODEL_LEN_CAPPED = 26, EV_ABORT_DEFERRED = 27,
    EV_DEFERRED_ABORT_DELIVERY = 28, EV_DEFERRED_ABORT_WASTED_STEP = 29,
    EV_PAUSE_IN_FLIGHT = 30, EV_PAUSED_OUTPUT = 31, EV_PAUSE_HELD_WAITING = 32, EV_RESUMED_HELD = 33,
    EV_KV_INVALID_BLOCKS = 34, EV_KV_PARTIAL_RECOMPUTE = 35,
    EV_STREAM_STOP_IN_FLIGHT = 36, EV_STREAM_PAUSE = 37, EV_STREAM_CONTINUE = 38, EV_STREAM_QUEUED = 39,
    EV_STREAM_RESUME = 40, EV_STREAM_END = 41, EV_STREAM_PAUSED_SKIP = 42,
    EV_OFFLOAD_STORE = 43, EV_OFFLOAD_STORE_FINISHED = 44, EV_OFFLOAD_FLUSH = 45, EV_OFFLOAD_FLUSH_PREEMPTED = 46,
    EV_OFFLOAD_STORE_DONE = 47, EV_OFFLOAD_LOOKUP_DELAYED = 48, EV_OFFLOAD_LOAD = 49,
    EV_ENCODER_INPUT_SCHEDULED = 50, EV_ENCODER_CACHE_REVIVED = 51, EV_ENCODER_CACHE_EVICTION = 52,
    EV_ENCODER_INPUT_BLOCKED = 53, EV_ENCODER_INPUT_RELEASED = 54, EV_ENCODER_RELEASED_IN_FLIGHT = 55,
    EV_ENCODER_EVICTED_REALLOCATED = 56, EV_ENCODER_MISS = 57,
    EV_MAMBA_ALIGNED_SPLIT = 58, EV_MAMBA_SUB_BLOCK_CHUNK = 59, EV_MAMBA_SPLIT_STOPS_PASS = 60,
    EV_MAMBA_STATE_FREED = 61, EV_MAMBA_STATE_FREED_IN_FLIGHT = 62, EV_MAMBA_HIT_CUT = 63
};

/* spec/config.py mamba_cache_mode: no Mamba group, "none", "align" */
enum { MAMBA_OFF = 0, MAMBA_NONE = 1, MAMBA_ALIGN = 2 };

/* spec/state.py pause states (Scheduler._pause_state); spec/config.py PAUSE_MODES indices */
enum { UNPAUSED = 0, PAUSED_NEW = 1, PAUSED_ALL = 2 };
enum { PM_ABORT = 0, PM_WAIT = 1, PM_KEEP = 2, NPM = 3 };

/* action ids (one byte): schedule, abort rI, add_request rI, reset_prefix_cache, pause_abort /
 * pause_wait / pause_keep (ACT_PAUSE + PM_*), resume, session rI's next input (stream_update or
 * stream_close, whichever streaming.next_input names), update_from_output with the I-th vector of
 * engine.enabled_actions' (acceptance vector, connector report) pairs (at most MAXUPD of them) */
#define ACT_SCHEDULE 0
#define ACT_ABORT 1
#define ACT_ADD (1 + MAXR)
#define ACT_RESET (1 + 2 * MAXR)
#define ACT_PAUSE (2 + 2 * MAXR)
#define ACT_RESUME (ACT_PAUSE + NPM)
#define ACT_STREAM (ACT_RESUME + 1)
#define ACT_UPDATE (ACT_STREAM + MAXR)
#define MAXUPD (256 - ACT_UPDATE)
#define MAXSUCC (MAXUPD + 3 * MAXR + 2 + NPM)
#define MAXUPDATES 4  /* config.stream_updates: at most 4 */
#define MAXIMG 8      /* config.images: at most 8 (items too) */
#define NSETTINGS 101 /* checker/compiled.py _settings */

typedef struct {
    int16_t status, O, C, H, F, X, L, cached, dwait, ocached, wasted, S;
    uint8_t D, chunk, ooo, abort_def, gap;
    int16_t P, M;  /* RequestParams.num_prompt_tokens, max_tokens: a session's change with its turns */
} Ctr;

/* state.StoreJob: outputs ahead (before one may report it), flushed, registered (watched) */
typedef struct { uint8_t req, nb, ahead, flushed, registered; uint8_t b[MAXJB]; } Job;
typedef struct {  /* sb: the Mamba state blocks it reads and writes (NULL_BLK: the null block) */
    uint8_t req, nw, padded, nsb; int16_t ntok, spos, start, ndraft; uint8_t w[MAXB], sb[2];
} Entry;
#define MAXFREED 16  /* evictions in one schedule() pass: at most 8 entries + 8 allocations */
typedef struct {  /* esched: scheduled_encoder_inputs (input ids, bit i, per request); fe: free_encoder_mm_hashes */
    uint8_t n; int16_t seq; Entry e[MAXR];
    uint8_t esched[MAXR], nfe, fe[MAXFREED];
} StepC;
typedef struct { int16_t fence; uint8_t nf, nl; uint8_t f[MAXB], l[MAXB]; } DFree;

typedef struct {
    Ctr c[MAXR];
    int16_t eos[MAXR];
    uint8_t btn[MAXR], bt[MAXR][MAXB];
    uint8_t nwait, wait[MAXR], nrun, run[MAXR];
    uint8_t nbq; StepC bq[MAXD];
    uint8_t has_def; StepC defstep;  /* deferred_step (structured output) */
    uint8_t nfree, freeb[MAXB];
    int8_t hreq[MAXB], hidx[MAXB];  /* block hash (request, block index); hreq -1 = none */
    uint8_t hgrp[MAXB];             /* its kv_cache_group_id (1: a Mamba state's or a window block's) */
    uint8_t ndf; DFree df[MAXB];
    int16_t qseq, rseq;
    uint8_t finished_pending, fpl, call_in_progress;
    uint8_t pause_state, pauses_left, pause_breached;  /* pause_breached: the ghost of pause_respected */
    uint8_t kvt[MAXR], nkv, kv[MAXR];  /* KV connector: kv_transfer (KV_*), kv_holding_waiting */
    uint8_t sbtn[MAXR], sbt[MAXR][MAXB];  /* sliding window: swa_block_tables (NULL_BLK: passed) */
    uint8_t njobs; Job jobs[MAXJOBS];     /* kv_offloading: store_jobs, in issue order */
    uint8_t ostored[MAXR], otn[MAXR], ot[MAXR][MAXB];  /* offload_stored, offload_tables */
    uint8_t nofin, ofin[MAXR], store_breached;         /* offload_finished; the ghost store_breached */
    uint8_t ssent[MAXR], sapplied[MAXR];               /* streaming sessions: stream_sent, stream_applied */
    uint8_t mtn[MAXR], mt[MAXR][MAXB];  /* mamba_tables (NULL_BLK: a skipped or freed position) */
    int16_t mjunc[MAXR];                /* mamba_junction */
    uint8_t misaligned;                 /* the ghost mamba_misaligned */
    uint8_t enc_in[MAXR];               /* enc_inputs: input ids held, bit i, per request */
    uint8_t enc_entries, nfreeable, freeable[MAXIMG];  /* enc_entries (items, bit i); enc_freeable, oldest first */
    uint8_t worker_enc, enc_miss;       /* the ghosts worker_encoder (items, bit i) and encoder_miss */
} St;

typedef struct {
    int async_sched;  /* SpecConfig.async_scheduling: depth > 1 and not sync_scheduler (placeholders) */
    int n, depth, loop_free, budget, max_seqs, bs, nblocks, chunked, prefix, full_isl, defer, drop;
    int stagger, aborts, abort_deferred, late, forced, max_eos, k, lookahead, structured[MAXR];
    int priority, rank[MAXR];            /* the priority policy; rank of (priority, arrival) */
    int lp_threshold, lp_adaptive, mml;  /* long_prefill_token_threshold; max_model_len (-1: none) */
    int pauses, npm, pm[NPM];            /* pause_scheduler calls allowed; pause_modes as PM_*, in order */
    int W, swa_cap;                      /* sliding_window; swa_admission_cap */
    int connector, fail, loads, sends, whole_prompt, invalid, offload, prompt_only;  /* + kv_offloading,
                                         kv_offload_prompt_only */  /* kv_connector; policy fail; remote_loads and
                                         remote_sends (bit r); kv_load_whole_prompt; kv_invalid_blocks */
    int nsess, sess[MAXR], nupd, upd_u[MAXUPDATES], upd_m[MAXUPDATES];  /* resumable (in order),
                                         stream_updates */
    int mamba;                           /* mamba_cache_mode as MAMBA_* */
    int nimg, enc_size, enc_budget;      /* images; encoder_cache_size, encoder_compute_budget */
    int img_req[MAXIMG], img_off[MAXIMG], img_len[MAXIMG], img_item[MAXIMG];  /* grouped by request, in
                                         encoder.images_of order; items renumbered 0.. in sorted order */
    int img_first[MAXR], img_count[MAXR], nitems, item_len[MAXIMG];  /* derived (encoder_init) */
    int P[MAXR], M[MAXR];
    /* encoding widths (bits) */
    int w_tok, w_k, w_req, w_blk, w_nblk, w_nreq, w_seq, w_idx, w_eos, w_wasted, w_dwait, w_fpl, w_nbq, w_pl, w_status, w_sent;
    int w_item, w_nitem;
} Cfg;

typedef struct { St s; int action; uint64_t events; } Succ;

/* step.c */
int next_states(const Cfg *cfg, const St *s, Succ *out);
/* encoder.EncoderPass: what one schedule() call keeps about encoder inputs */
typedef struct { int budget, nfreed; uint8_t freed[MAXFREED], sched[MAXR]; } EncPass;
typedef struct { St s; uint64_t ev; EncPass enc; } Draft;

#define EMIT(d, e) ((d)->ev |= (uint64_t)1 << (e))

static inline int imax(int a, int b) { return a > b ? a : b; }
static inline int imin(int a, int b) { return a < b ? a : b; }
static inline int pyfloordiv(int a, int b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }

/* request.is_finished */
static inline int is_finished(const Ctr *c) {
    return (c->status >= F_STOPPED && c->status <= F_ABORTED) || c->status == F_ERROR;
}
static inline int num_tokens(const Cfg *cfg, int r, const Ctr *c) { (void)cfg; (void)r; return c->P + c->O; }
static inline int blocks_for(const Cfg *cfg, int tokens) { return (tokens + cfg->bs - 1) / cfg->bs; }

/* draft.num_waiting_for_streaming_input: the paused sessions */
static inline int num_paused_sessions(const St *s) {
    int n = 0;
    for (int r = 0; r < MAXR; r++) n += s->c[r].status == WAITING_FOR_STREAMING_REQ;
    return n;
}
/* draft.has_unfinished_requests: a paused session never counts */
static inline int has_unfinished_requests(const St *s) {
    if (s->pause_state == PAUSED_ALL) return 0;
    return s->nrun + s->nkv + (s->pause_state == UNPAUSED ? s->nwait : 0) - num_paused_sessions(s) > 0;
}
/* draft.has_requests: a finished request whose blocks the connector holds counts too */
static inline int has_requests(const St *s) {
    if (has_unfinished_requests(s) || s->finished_pending) return 1;
    for (int r = 0; r < MAXR; r++) if (s->kvt[r] == KV_SENDING || s->kvt[r] == KV_ORPHAN) return 1;
    return s->njobs > 0;  /* OffloadingConnectorScheduler.has_pending_push_work */
}

/* list edits in the spec's order (Python's list.remove / insert / index) */
static inline void list_remove_at(uint8_t *a, uint8_t *n, int i) {
    for (int k = i; k + 1 < *n; k++) a[k] = a[k + 1];
    (*n)--;
}
static inline int list_index(const uint8_t *a, int n, int v) {
    for (int i = 0; i < n; i++) if (a[i] == v) return i;
    return -1;
}
static inline void list_drop(uint8_t *a, uint8_t *n, int v) {
    int i = list_index(a, *n, v);
    if (i >= 0) list_remove_at(a, n, i);
}

/* policy.order_queues: under the priority policy, both waiting queues in (priority, arrival) order */
static inline void order_queue(const Cfg *cfg, uint8_t *q, int n) {
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && cfg->rank[q[j - 1]] > cfg->rank[q[j]]; j--) {
            uint8_t t = q[j]; q[j] = q[j - 1]; q[j - 1] = t;
        }
}
static inline void order_queues(const Cfg *cfg, St *s) {
    if (!cfg->priority) return;
    order_queue(cfg, s->wait, s->nwait);
    order_queue(cfg, s->kv, s->nkv);
}
static inline int cap_long_prefill(int n, int threshold) { return 0 < threshold && threshold < n ? threshold : n; }

/* the requests a schedule() call has scheduled so far, with their tokens */
typedef struct { int n; uint8_t req[MAXR], padded[MAXR]; int16_t tok[MAXR]; } Out;

/* waiting.c: scheduler.schedule_waiting */
void schedule_waiting(const Cfg *cfg, Draft *d, int budget, Out *out, int threshold);
/* step.c */
void free_finished(const Cfg *cfg, Draft *d, int r, int orphan);

/* connector.c: spec/connector.py */
typedef struct { uint8_t kind, req, j; } Report;  /* kind: REP_* ; j: the first invalid block */
enum { REP_NONE = 0, REP_RECV = 1, REP_FAIL = 2, REP_SENT = 3, REP_INVALID = 4, REP_STORED = 5 };
#define MAXREP (1 + 3 * MAXR + MAXB)
int report_choices(const Cfg *cfg, const St *s, Report *out);
int holds_kv_blocks(const St *s, int r);
int ready_to_schedule(const Cfg *cfg, Draft *d, int r);
int starts_load(const Cfg *cfg, const St *s, int r);
int admit_async_load(const Cfg *cfg, Draft *d, int r);
int load_pending(const Cfg *cfg, const St *s, int r);
int held(const Cfg *cfg, const St *s, int r);
int keeps_blocks(const Cfg *cfg, Draft *d, int r, int orphan);
int failed_recving(const Cfg *cfg, Draft *d, const Report *rep);
int invalid_blocks(const Cfg *cfg, Draft *d, const Report *rep);
void xfer_finished(const Cfg *cfg, Draft *d, const Report *rep);
/* offload.c: spec/offload.py */
int pending_jobs(const St *s, int r);
void offload_request_finished(const Cfg *cfg, St *s, int r);
void offload_preempted(const Cfg *cfg, Draft *d, int r);
void build_connector_meta(const Cfg *cfg, const St *in, Draft *d, const Out *out);
void check_store_reads(const Cfg *cfg, const St *in, St *s, const StepC *step);
int offload_report_choices(const Cfg *cfg, const St *s, Report *out);
void update_connector_output(const Cfg *cfg, Draft *d, const Report *rep);

/* blocks.c: spec/blocks.py */
int py_slice(const uint8_t *table, int len, int lo, int hi, uint8_t *out);
int can_be_freed(const Cfg *cfg, const St *s, int r);
void return_to_pool(St *s, const uint8_t *first, int nf, const uint8_t *last, int nl);
void split_by_hash(const Cfg *cfg, const St *s, int r, uint8_t *first, int *nf, uint8_t *last, int *nl);
void take(St *s, int r, int need, int swa_need);
void free_request_blocks(const Cfg *cfg, Draft *d, int r);
int allocate_slots(const Cfg *cfg, Draft *d, int r, int n);
/* swa.c: the sliding-window group of spec/blocks.py, spec/swa.py */
int swa_blocks_needed(const Cfg *cfg, const St *s, int r, int tokens);
void remove_skipped_blocks(const Cfg *cfg, Draft *d, int r);
int swa_admission_blocks(const Cfg *cfg, const St *s, int r, int tokens, const uint8_t *swa_hit, int nswa);
void swa_pop_for_free(const Cfg *cfg, St *s, int r, uint8_t *first, int *nf, uint8_t *last, int *nl);
void swa_record_hashes(const Cfg *cfg, St *s, int r, int old_frontier);
int swa_cut_hit(const Cfg *cfg, const St *s, int r, int nhit, uint8_t *swa_hit, int *nswa);
int window_kv_held(const Cfg *cfg, const St *s);
int longest_cache_hit(const Cfg *cfg, const St *s, int r, uint8_t *hit);
int admit_with_hit(const Cfg *cfg, St *s, int r, const uint8_t *hit, int nhit, int n, int state,
                   const uint8_t *swa_hit, int nswa);
void record_hashes(const Cfg *cfg, St *s, int r, int old_frontier);

/* mamba.c: spec/mamba.py */
int mamba_blocks_needed(const Cfg *cfg, const St *s, int r, int tokens, int hit);
void mamba_take(const Cfg *cfg, St *s, int r, int tokens);
void mamba_remove_skipped_blocks(const Cfg *cfg, Draft *d, int r);
void mamba_pop_for_free(const Cfg *cfg, St *s, int r, uint8_t *first, int *nf, uint8_t *last, int *nl);
void mamba_record_hashes(const Cfg *cfg, St *s, int r, int old_frontier);
int mamba_cut_hit(const Cfg *cfg, Draft *d, int r, int nhit, int *state);
int aligned_split(const Cfg *cfg, Draft *d, int r, int start, int n);
void check_aligned(const Cfg *cfg, Draft *d, int r, int start, int n);
void mamba_state_blocks(const Cfg *cfg, const St *s, int r, int start, int end, Entry *e);
int mamba_states_held(const Cfg *cfg, const St *s);

/* encoder.c: spec/encoder.py */
void encoder_init(Cfg *cfg);
void encoder_new_pass(const Cfg *cfg, Draft *d);
void encoder_free_request(const Cfg *cfg, Draft *d, int r);
int encoder_try_schedule(const Cfg *cfg, Draft *d, int r, int computed, int n, int *to_compute, int *budget);
void encoder_commit(const Cfg *cfg, Draft *d, int r, int to_compute, int budget);
void encoder_undo(const Cfg *cfg, Draft *d, int r);
void encoder_free_processed(const Cfg *cfg, Draft *d, int r);
void encoder_finish_step(const Cfg *cfg, Draft *d, StepC *step);
int encoder_cache_bounded(const Cfg *cfg, const St *s);

/* streaming.c: spec/streaming.py */
int is_session(const Cfg *cfg, int r);
int resumes_after_stop(const Cfg *cfg, Draft *d, int r);
int next_input(const Cfg *cfg, const St *s, int r);  /* 0: none, 1: stream_update, 2: stream_close */
void stream_input(const Cfg *cfg, Draft *d, int r);

/* encode.c */
void cfg_widths(Cfg *cfg);
void canonical(St *s);
int encode(const Cfg *cfg, const St *s, uint8_t *buf);  /* bytes written, -1 when a value does not fit */
int decode(const Cfg *cfg, const uint8_t *buf, St *s);  /* bytes read */
/* props.c */
#define NPROPS 29
extern const char *PROP_NAMES[NPROPS];
int prop_violated(const Cfg *cfg, const St *s, int prop);
int unfinished(const Cfg *cfg, const St *s);
#endif
