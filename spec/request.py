"""One request's counters and the arithmetic that moves them.

This is the only place where the per-request counters of vLLM's async
scheduling are changed.  Every function is pure and written against
``Arith`` (``spec/algebra.py``): the checker calls it with Python ints, the
prover (``proofs/``) calls the *same* function with z3 terms.  So a function
here never branches with a Python ``if`` on a counter value; it uses
``A.ite``.  Python ``if`` is allowed only on configuration constants
(``async_scheduling``, ``defer_block_free``, ...), which are fixed per run.
The fields and arguments are typed ``Int``/``Bool``, the value types of
``Arith[Int, Bool]``: ``int``/``bool`` in the checker, z3 terms in the prover.

Notation as in vLLM (``vllm/v1/request.py``, ``Request.__init__``):

=====================  ====  ===========================================
field                  math  meaning
=====================  ====  ===========================================
num_prompt_tokens      P     prompt length (a parameter)
max_tokens             M     output limit (a parameter)
num_output_tokens      O     output tokens the scheduler knows
num_tokens             N     P + O, the known sequence (derived)
num_computed_tokens    C     positions whose KV is scheduled, in-flight
                             steps counted optimistically
num_output_placeholders H    sampled positions of in-flight steps that the
                             scheduler has not seen yet
num_in_flight_tokens   F     tokens of this request's unprocessed steps
num_stale_output_tokens X    the part of F scheduled before the last
                             preemption: its output is stale
drop_stale_output      D     stale output is dropped (else delivered)
last_sched_seq         L     sched_step_seq of the latest step with r
=====================  ====  ===========================================

Example (a 4-token prompt scheduled whole, then its first output):
    >>> from asyncspec.spec.algebra import CONCRETE as A
    >>> p = RequestParams(num_prompt_tokens=4, max_tokens=2, eos_position=0)
    >>> c = admit(A, initial_counters(A), num_computed_tokens=0)
    >>> c = after_schedule(A, p, c, 4, sched_step_seq=1, knobs=ASYNC)
    >>> (c.num_computed_tokens, c.num_output_placeholders, c.is_prefill_chunk)
    (4, 1, False)
    >>> c, stale = drain_in_flight(A, c, 4)
    >>> c = deliver_token(A, p, c, stale, position=1, knobs=ASYNC)
    >>> (c.num_output_tokens, c.num_output_placeholders, c.status == RUNNING)
    (1, 0, True)
"""
from __future__ import annotations

from typing import Generic, NamedTuple

from asyncspec.spec.algebra import FALSE, ZERO, Arith, Bool, Int
from asyncspec.spec.cites import models

# Request status codes, ordered as vLLM's ``RequestStatus`` (vllm/v1/request.py):
# a request is finished iff its status is above PREEMPTED.
WAITING = 0  # queued, never scheduled (vLLM WAITING)
RUNNING = 1  # in the running list (vLLM RUNNING)
PREEMPTED = 2  # back in the waiting queue after a preemption (vLLM PREEMPTED)
FINISHED_STOPPED = 3  # sampled its EOS token (vLLM FINISHED_STOPPED)
FINISHED_LENGTH_CAPPED = 4  # reached max_tokens (vLLM FINISHED_LENGTH_CAPPED)
FINISHED_ABORTED = 5  # aborted by the client (vLLM FINISHED_ABORTED)
NOT_ARRIVED = 6  # not yet added to the scheduler (spec only: late arrivals)
WAITING_FOR_REMOTE_KVS = 7  # a KV connector is loading its prompt (vLLM WAITING_FOR_REMOTE_KVS)
FINISHED_ERROR = 8  # a failed KV load under kv_load_failure_policy="fail" (vLLM FINISHED_ERROR)
WAITING_FOR_STREAMING_REQ = 9  # a resumable session stopped, waiting for its next input (spec/streaming.py)

STATUS_NAMES = {
    WAITING: "WAITING",
    RUNNING: "RUNNING",
    PREEMPTED: "PREEMPTED",
    FINISHED_STOPPED: "STOPPED",
    FINISHED_LENGTH_CAPPED: "LENGTH",
    FINISHED_ABORTED: "ABORTED",
    NOT_ARRIVED: "-",
    WAITING_FOR_REMOTE_KVS: "WAITING_FOR_REMOTE_KVS",
    FINISHED_ERROR: "ERROR",
    WAITING_FOR_STREAMING_REQ: "WAITING_FOR_STREAMING_REQ",
}


class RequestParams(NamedTuple, Generic[Int, Bool]):
    """What a request is: fixed for its whole life."""

    num_prompt_tokens: Int  # P: prompt length, >= 1
    max_tokens: Int  # M: SamplingParams.max_tokens, >= 1
    eos_position: Int  # output position (1-based) whose token is EOS; 0 = never
    use_structured_output: Bool = FALSE  # a grammar constrains its tokens (Request.use_structured_output)


class Knobs(NamedTuple, Generic[Int]):
    """Engine settings the counter arithmetic depends on (fixed per run; the prover's
    block size, stagger and draft count may be symbolic)."""

    async_scheduling: bool  # AsyncScheduler (True) or Scheduler (False)
    defer_block_free: bool  # KV-consumer mode: frees wait for a step fence
    decode_stagger: Int  # V2 runner + PP: steps between two decodes (1 = none)
    block_size: Int  # tokens per KV block
    enable_prefix_caching: bool  # cache full blocks of known tokens
    num_spec_tokens: Int = ZERO  # k: draft tokens per step (speculative decoding; 0 = off)
    max_model_len: Int | None = None  # ModelConfig.max_model_len; None = no request reaches it
    spec_decode_caches_at_delivery: bool = True  # False: vLLM 0.30.0-0.32.0's Scheduler (release setting)


ASYNC = Knobs(True, False, 1, 4, True)
"""Default knobs: AsyncScheduler, no deferral, no stagger, block size 4."""


class RequestCounters(NamedTuple, Generic[Int, Bool]):
    """The mutable half of a request, as the scheduler sees it.

    The last three fields are *ghost* state: the spec keeps them to state
    properties, vLLM has no such field.
    """

    status: Int  # one of the status codes above
    num_output_tokens: Int  # O: output tokens appended so far
    num_computed_tokens: Int  # C: vLLM Request.num_computed_tokens
    num_output_placeholders: Int  # H: vLLM Request.num_output_placeholders
    num_in_flight_tokens: Int  # F: vLLM Request.num_in_flight_tokens
    num_stale_output_tokens: Int  # X: vLLM Request.num_stale_output_tokens
    drop_stale_output: Bool  # D: vLLM Request.drop_stale_output
    last_sched_seq: Int  # L: vLLM Request.last_sched_seq
    is_prefill_chunk: Bool  # vLLM Request.is_prefill_chunk
    num_cached_tokens: Int  # prefix-cache frontier: tokens in cached full blocks
    decode_wait: Int  # schedule() calls left before the next decode (V2 + PP)
    output_cached_tokens: Int  # ghost: the frontier reached by output-time caching
    num_wasted_steps: Int  # ghost: steps computed after the request finished
    output_out_of_order: Bool  # ghost: a token was appended at a wrong position
    num_spec_token_ids: Int = ZERO  # S: len(Request.spec_token_ids), drafts for the next step
    grammar_gap: Bool = FALSE  # ghost: a bitmask was built before every earlier token was known
    abort_deferred: Bool = FALSE  # SGLang's Req.to_finish = FINISH_ABORT(): the client aborted it while
    # running, and the abort waits for its next delivered token (abort_mode "deferred"; kept once finished)


@models("vllm.v1.request.Request.__init__")
def initial_counters(A: Arith[Int, Bool], status: int = WAITING) -> RequestCounters[Int, Bool]:
    """A request as ``Scheduler.add_request`` stores it: nothing computed."""
    zero = A.lit(0)
    return RequestCounters(
        status=A.lit(status),
        num_output_tokens=zero,
        num_computed_tokens=zero,
        num_output_placeholders=zero,
        num_in_flight_tokens=zero,
        num_stale_output_tokens=zero,
        drop_stale_output=A.false(),
        last_sched_seq=zero,
        is_prefill_chunk=A.false(),
        num_cached_tokens=zero,
        decode_wait=zero,
        output_cached_tokens=zero,
        num_wasted_steps=zero,
        output_out_of_order=A.false(),
        num_spec_token_ids=zero,
        grammar_gap=A.false(),
        abort_deferred=A.false(),
    )


# ---------------------------------------------------------------- derived values


@models("vllm.v1.request.Request.num_tokens")
def num_tokens(p: RequestParams[Int, Bool], c: RequestCounters[Int, Bool]) -> Int:
    """N = P + O: ``Request.num_tokens`` (no spec tokens in this model)."""
    return p.num_prompt_tokens + c.num_output_tokens


@models("vllm.v1.request.Request.is_finished")
def is_finished(A: Arith[Int, Bool], c: RequestCounters[Int, Bool]) -> Bool:
    """``Request.is_finished()``: the status is a FINISHED_* one."""
    return A.or_(A.and_(c.status >= FINISHED_STOPPED, c.status <= FINISHED_ABORTED), c.status == FINISHED_ERROR)


def is_stopped_by_engine(A: Arith[Int, Bool], c: RequestCounters[Int, Bool]) -> Bool:
    """Finished by EOS or max_tokens (not by the client)."""
    return A.or_(c.status == FINISHED_STOPPED, c.status == FINISHED_LENGTH_CAPPED)


@models("vllm.v1.core.sched.scheduler.Scheduler.schedule", pr=27922)
def max_tokens_guard(A: Arith[Int, Bool], p: RequestParams[Int, Bool], c: RequestCounters[Int, Bool]) -> Bool:
    """The pass-1 skip of ``Scheduler.schedule`` (scheduler.py, running loop).

    True when the step already in flight is sure to reach max_tokens:
    ``H > 0 and C + 2 - H >= P + M`` (vLLM PR #27922).
    """
    return A.and_(
        c.num_output_placeholders > 0,
        c.num_computed_tokens + 2 - c.num_output_placeholders
        >= p.num_prompt_tokens + p.max_tokens,
    )


@models("vllm.v1.core.sched.scheduler.Scheduler.schedule")
def stale_output_blocks_resume(A: Arith[Int, Bool], c: RequestCounters[Int, Bool]) -> Bool:
    """The pass-2 stale skip: deliverable stale output is still in flight (X > 0, not D).

    Resuming now could resample a position that the stale output delivers later.
    """
    return A.and_(c.num_stale_output_tokens > 0, A.not_(c.drop_stale_output))


@models("vllm.v1.core.sched.scheduler.Scheduler.schedule", "vllm.v1.request.Request.num_tokens_with_spec")
def num_new_tokens(p: RequestParams[Int, Bool], c: RequestCounters[Int, Bool]) -> Int:
    """The gap ``num_tokens_with_spec + H - C`` of the running pass (N + S + H - C)."""
    return num_tokens(p, c) + c.num_spec_token_ids + c.num_output_placeholders - c.num_computed_tokens


@models("vllm.v1.core.sched.scheduler.Scheduler.schedule")
def scheduled_drafts(A: Arith[Int, Bool], p: RequestParams[Int, Bool], c: RequestCounters[Int, Bool], n: Int) -> Int:
    """Draft positions among ``n`` scheduled tokens (scheduler.py, running loop):
    ``n + C - N - H``, clipped to the drafts the request has."""
    beyond = n + c.num_computed_tokens - num_tokens(p, c) - c.num_output_placeholders
    return A.max(A.lit(0), A.min(beyond, c.num_spec_token_ids))


@models("vllm.v1.core.kv_cache_manager.KVCacheManager.cache_blocks")
def cached_frontier(A: Arith[Int, Bool], k: Knobs[Int], p: RequestParams[Int, Bool], c: RequestCounters[Int, Bool],
                    upto: Int) -> Int:
    """``KVCacheManager.cache_blocks(r, upto)``: full blocks of known tokens, never backwards."""
    if not k.enable_prefix_caching:
        return c.num_cached_tokens
    limit = A.min(upto, num_tokens(p, c))
    full = A.div(limit, k.block_size) * k.block_size
    return A.max(c.num_cached_tokens, full)


# ---------------------------------------------------------------- transitions


@models("vllm.v1.core.sched.scheduler.Scheduler.schedule")
def admit(A: Arith[Int, Bool], c: RequestCounters[Int, Bool],
          num_computed_tokens: Int) -> RequestCounters[Int, Bool]:
    """The waiting pass admits r (scheduler.py ``schedule``, waiting loop):
    RUNNING, C = the prefix-cache hit, whose blocks are already cached."""
    return c._replace(
        status=A.lit(RUNNING),
        num_computed_tokens=num_computed_tokens,
        num_cached_tokens=A.max(c.num_cached_tokens, num_computed_tokens),
    )


@models("vllm.v1.core.sched.scheduler.Scheduler._update_after_schedule",
        "vllm.v1.core.sched.async_scheduler.AsyncScheduler._update_after_schedule")
def after_schedule(A: Arith[Int, Bool], p: RequestParams[Int, Bool], c: RequestCounters[Int, Bool], n: Int,
                   sched_step_seq: Int, knobs: Knobs[Int]) -> RequestCounters[Int, Bool]:
    """r was scheduled ``n`` tokens in a step.

    ``Scheduler._update_after_schedule`` (C += n, F += n, L := Q when
    deferring, is_prefill_chunk := C < N + H) and then
    ``AsyncScheduler._update_after_schedule`` (H += 1 + drafts when the step
    samples; ``spec_token_ids`` := k placeholders; V2 runner + PP: the next
    decode waits ``decode_stagger`` steps).  Also the
    allocation-time ``cache_blocks`` of ``KVCacheManager.allocate_slots``.
    """
    computed = c.num_computed_tokens + n
    chunk = computed < num_tokens(p, c) + c.num_output_placeholders
    samples = A.not_(chunk)
    drafts = scheduled_drafts(A, p, c, n)
    placeholders = c.num_output_placeholders
    spec_token_ids = A.lit(0)  # spec_token_ids is cleared when the request is scheduled
    if knobs.async_scheduling:
        placeholders = placeholders + A.ite(samples, 1 + drafts, A.lit(0))
        spec_token_ids = A.ite(samples, knobs.num_spec_tokens, A.lit(0))  # -1 placeholders
    decode_wait = c.decode_wait
    if knobs.async_scheduling:
        staggered = A.and_(samples, knobs.decode_stagger > 1)
        decode_wait = A.ite(staggered, knobs.decode_stagger, c.decode_wait)
    cached = cached_frontier(A, knobs, p, c, computed)
    return c._replace(
        num_computed_tokens=computed,
        num_in_flight_tokens=c.num_in_flight_tokens + n,
        last_sched_seq=sched_step_seq if knobs.defer_block_free else c.last_sched_seq,
        is_prefill_chunk=chunk,
        num_output_placeholders=placeholders,
        decode_wait=decode_wait,
        num_cached_tokens=cached,
        num_spec_token_ids=spec_token_ids,
    )


@models("vllm.v1.core.sched.async_scheduler.AsyncScheduler._update_after_schedule")
def defers_sampling(A: Arith[Int, Bool], p: RequestParams[Int, Bool], c: RequestCounters[Int, Bool]) -> Bool:
    """``AsyncScheduler._update_after_schedule``: a structured-output request
    with placeholders outstanding (H before this step's increment) sets
    ``pending_structured_output_tokens``: its bitmask needs tokens still in flight."""
    return A.and_(p.use_structured_output, c.num_output_placeholders > 0)


@models("vllm.v1.core.sched.scheduler.Scheduler.get_grammar_bitmask")
def grammar_bitmask(A: Arith[Int, Bool], p: RequestParams[Int, Bool], c: RequestCounters[Int, Bool],
                    position: Int) -> RequestCounters[Int, Bool]:
    """``get_grammar_bitmask`` for a step that samples output ``position``: the
    grammar has consumed the O known tokens; a gap (O < position - 1) is recorded.
    A finished request has no grammar any more."""
    gap = A.and_(p.use_structured_output, A.not_(is_finished(A, c)), c.num_output_tokens < position - 1)
    return c._replace(grammar_gap=A.or_(c.grammar_gap, gap))


@models("vllm.v1.core.sched.scheduler.Scheduler.schedule")
def tick_decode_wait(A: Arith[Int, Bool], c: RequestCounters[Int, Bool]) -> RequestCounters[Int, Bool]:
    """``current_step += 1`` at the top of ``schedule()``, seen from r."""
    return c._replace(decode_wait=A.max(c.decode_wait - 1, A.lit(0)))


@models("vllm.v1.core.sched.scheduler.Scheduler._preempt_request")
def preempt(A: Arith[Int, Bool], c: RequestCounters[Int, Bool],
            drop_stale_output: Bool) -> RequestCounters[Int, Bool]:
    """``Scheduler._preempt_request``: reset and mark in-flight output stale.

    C := 0, H := 0, X := F (assigned: F already holds any undrained stale
    share), D := drop or (D and X > 0).  Its blocks are freed by the caller.
    ``next_decode_eligible_step`` is not reset (``decode_wait`` keeps counting
    down): a request resumed within the stagger waits for its old cadence.
    """
    return c._replace(
        status=A.lit(PREEMPTED),
        num_computed_tokens=A.lit(0),
        num_output_placeholders=A.lit(0),
        num_stale_output_tokens=c.num_in_flight_tokens,
        drop_stale_output=A.or_(
            drop_stale_output, A.and_(c.drop_stale_output, c.num_stale_output_tokens > 0)
        ),
        num_cached_tokens=A.lit(0),
        output_cached_tokens=A.lit(0),
        num_spec_token_ids=A.lit(0),
    )


@models("vllm.v1.core.sched.scheduler.Scheduler.update_from_output")
def drain_in_flight(A: Arith[Int, Bool], c: RequestCounters[Int, Bool],
                    n: Int) -> tuple[RequestCounters[Int, Bool], Bool]:
    """The lockstep drain at the top of ``update_from_output``'s request loop.

    F -= n; if X > 0 the output is stale and X -= n.  Returns the new
    counters and whether the output is stale.
    """
    stale = c.num_stale_output_tokens > 0
    stale_left = A.ite(stale, c.num_stale_output_tokens - n, c.num_stale_output_tokens)
    return c._replace(num_in_flight_tokens=c.num_in_flight_tokens - n, num_stale_output_tokens=stale_left), stale


@models("vllm.v1.core.sched.scheduler.Scheduler.update_from_output")
def reject_drafts(A: Arith[Int, Bool], c: RequestCounters[Int, Bool], num_rejected: Int,
                  is_stale: Bool) -> RequestCounters[Int, Bool]:
    """Spec-decode verification in ``update_from_output``: rejected drafts roll
    back C and H (each only if positive), never for stale output."""
    fresh = A.not_(is_stale)
    return c._replace(
        num_computed_tokens=A.ite(A.and_(fresh, c.num_computed_tokens > 0),
                                  c.num_computed_tokens - num_rejected, c.num_computed_tokens),
        num_output_placeholders=A.ite(A.and_(fresh, c.num_output_placeholders > 0),
                                      c.num_output_placeholders - num_rejected, c.num_output_placeholders),
    )


@models("vllm.v1.core.sched.utils.check_stop")
def first_stop(A: Arith[Int, Bool], p: RequestParams[Int, Bool], c: RequestCounters[Int, Bool], position: Int,
               count: Int, max_model_len: Int | None = None) -> tuple[Int, Bool]:
    """Where ``check_stop`` stops among ``count`` tokens of output positions
    ``position, position + 1, ...`` appended after O tokens.

    Returns (index of the stopping token, 1-based, or ``count + 1`` if none;
    whether that stop is the EOS token).  EOS is tested before the length cap,
    which is max_tokens or, with ``max_model_len``, N reaching it (O = max_model_len - P).
    """
    limit = p.max_tokens if max_model_len is None else A.min(p.max_tokens, max_model_len - p.num_prompt_tokens)
    last = position + count - 1
    eos_here = A.and_(p.eos_position > 0, p.eos_position >= position, p.eos_position <= last)
    i_eos = A.ite(eos_here, p.eos_position - position + 1, count + 1)
    i_len = A.max(limit - c.num_output_tokens, A.lit(1))
    i_len = A.ite(i_len <= count, i_len, count + 1)
    return A.min(i_eos, i_len), A.and_(eos_here, i_eos <= i_len)


@models("vllm.v1.core.sched.scheduler.Scheduler._update_request_with_output",
        "vllm.v1.core.sched.scheduler.Scheduler.update_from_output",
        "vllm.v1.core.sched.scheduler.Scheduler.update_draft_token_ids")
def deliver_tokens(A: Arith[Int, Bool], p: RequestParams[Int, Bool], c: RequestCounters[Int, Bool], is_stale: Bool,
                   position: Int, num_accepted: Int, knobs: Knobs[Int]) -> RequestCounters[Int, Bool]:
    """A step's sampled tokens reach the scheduler (non-dropped output).

    ``num_accepted`` drafts were accepted, so ``num_accepted + 1`` tokens of
    output positions ``position, position + 1, ...`` arrive (EOS iff a
    position is ``eos_position``).  ``Scheduler._update_request_with_output``:
    append them one at a time with ``check_stop``; at the first stop, if not
    stale, C -= the tokens after it, which are trimmed.  Then, if not stale and
    H > 0: H -= the untrimmed count (vLLM 0.33.0).  Then, in
    ``update_from_output``: for fresh output of a RUNNING request that had
    placeholders (or with spec decode on, unless ``knobs.spec_decode_caches_at_delivery`` is off:
    the release setting ``sync-drafts-cache-at-schedule``), ``cache_blocks(r, C - F)``.  Stale
    output (deliver mode) appends and may stop the request, but never touches
    C or H.  Synchronous scheduling: the worker's drafts become
    ``spec_token_ids`` (``update_draft_token_ids``).
    """
    count = num_accepted + 1
    i_stop, by_eos = first_stop(A, p, c, position, count, knobs.max_model_len)
    stops = i_stop <= count
    appended_count = A.ite(stops, i_stop, count)
    fresh = A.not_(is_stale)
    had_placeholders = c.num_output_placeholders > 0
    was_running = c.status == RUNNING
    trimmed = count - appended_count
    appended = c._replace(
        num_output_tokens=c.num_output_tokens + appended_count,
        num_computed_tokens=A.ite(fresh, c.num_computed_tokens - trimmed, c.num_computed_tokens),
    )
    spec_on = knobs.num_spec_tokens > 0 if knobs.spec_decode_caches_at_delivery else A.false()
    cache_now = A.and_(fresh, was_running, A.or_(had_placeholders, spec_on))
    processed = appended.num_computed_tokens - appended.num_in_flight_tokens
    cached = A.ite(cache_now, cached_frontier(A, knobs, p, appended, processed), c.num_cached_tokens)
    by_output = appended._replace(num_cached_tokens=c.output_cached_tokens)
    output_cached = A.ite(
        cache_now, cached_frontier(A, knobs, p, by_output, processed), c.output_cached_tokens
    )
    status = A.ite(stops, A.ite(by_eos, A.lit(FINISHED_STOPPED), A.lit(FINISHED_LENGTH_CAPPED)), c.status)
    spec_token_ids = c.num_spec_token_ids
    if not knobs.async_scheduling:
        goes_on = A.and_(fresh, was_running, A.not_(stops))
        spec_token_ids = A.ite(goes_on, knobs.num_spec_tokens, c.num_spec_token_ids)
    return appended._replace(
        status=status,
        output_cached_tokens=output_cached,
        num_output_placeholders=A.ite(
            A.and_(fresh, had_placeholders),
            c.num_output_placeholders - count,
            c.num_output_placeholders,
        ),
        num_cached_tokens=cached,
        output_out_of_order=A.or_(c.output_out_of_order, position != c.num_output_tokens + 1),
        num_spec_token_ids=spec_token_ids,
    )


@models("vllm.v1.core.sched.scheduler.Scheduler._update_request_with_output")
def deliver_token(A: Arith[Int, Bool], p: RequestParams[Int, Bool], c: RequestCounters[Int, Bool], is_stale: Bool,
                  position: Int, knobs: Knobs[Int]) -> RequestCounters[Int, Bool]:
    """One sampled token, no drafts: ``deliver_tokens`` with nothing accepted."""
    return deliver_tokens(A, p, c, is_stale, position, A.lit(0), knobs)


@models("vllm.v1.core.sched.scheduler.Scheduler.update_from_output")
def wastes_output_after_finish(A: Arith[Int, Bool], c: RequestCounters[Int, Bool]) -> Bool:
    """A finished request's late output is a wasted forward pass: the engine itself
    finished it (EOS or max_tokens) or, in SGLang, a deferred abort did (``abort_deferred``:
    the engine scheduled it after the client's abort)."""
    return A.or_(is_stopped_by_engine(A, c),
                 A.and_(c.status == FINISHED_ABORTED, c.abort_deferred))


@models("vllm.v1.core.sched.scheduler.Scheduler.update_from_output")
def note_output_after_finish(A: Arith[Int, Bool], c: RequestCounters[Int, Bool]) -> RequestCounters[Int, Bool]:
    """Output of a step arrives for a request that has already finished.

    ``update_from_output`` ignores it (the request is gone from
    ``Scheduler.requests``).  The spec counts it as a wasted forward pass when
    ``wastes_output_after_finish``.
    """
    wasted = A.ite(wastes_output_after_finish(A, c), A.lit(1), A.lit(0))
    return c._replace(num_wasted_steps=c.num_wasted_steps + wasted)


# ---------------------------------------------------------------- SGLang's deferred abort
# abort_mode "deferred" (spec/config.py).  SGLang 0.5.23, python/sglang/srt/managers/:
# scheduler.py Scheduler.abort_request sets Req.to_finish on a request of the running or last
# batch (not the chunked request: process_pending_chunked_abort ends that one at once);
# schedule_batch.py Req.update_finish_state honours to_finish first, before EOS and the
# length cap, after process_batch_result_decode / _prefill appended the row's token.


@models("vllm.v1.core.sched.scheduler.Scheduler.finish_requests")
def abort_defers(A: Arith[Int, Bool], c: RequestCounters[Int, Bool]) -> Bool:
    """Whether SGLang's ``Scheduler.abort_request`` defers the abort (sets ``Req.to_finish``):
    the request is running and not mid chunked prefill.  A queued request is popped at
    once, one mid chunked prefill is ended by ``process_pending_chunked_abort`` before
    the next schedule: both finish as vLLM's ``finish_requests`` does."""
    return A.and_(c.status == RUNNING, A.not_(c.is_prefill_chunk))


@models("vllm.v1.core.sched.scheduler.Scheduler.finish_requests")
def defer_abort(A: Arith[Int, Bool], c: RequestCounters[Int, Bool]) -> RequestCounters[Int, Bool]:
    """``Req.to_finish = FINISH_ABORT()``: nothing else changes; the request stays
    scheduled (SGLang keeps it in the running batch) until a row delivers."""
    return c._replace(abort_deferred=A.true())


@models("vllm.v1.core.sched.scheduler.Scheduler._update_request_with_output")
def honour_deferred_abort(A: Arith[Int, Bool], c: RequestCounters[Int, Bool]) -> RequestCounters[Int, Bool]:
    """``Req.update_finish_state`` after a row's token was appended: a deferred abort
    ends the request, before EOS and the length cap are looked at (so it ends ABORTED
    even when that token was its EOS or its last).  Call only on a request that was
    unfinished before the delivery."""
    return c._replace(status=A.ite(c.abort_deferred, A.lit(FINISHED_ABORTED), c.status))


@models("vllm.v1.core.sched.scheduler.Scheduler.finish_requests",
        "vllm.v1.core.sched.scheduler.Scheduler._free_request")
def finish(A: Arith[Int, Bool], c: RequestCounters[Int, Bool], status: Int) -> RequestCounters[Int, Bool]:
    """``Scheduler.finish_requests``/``_free_request``: the request ends."""
    return c._replace(status=status)
