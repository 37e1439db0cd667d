"""What must hold: *always* (every reachable state), *sometimes* (witnesses),
*eventually* (deadlock, livelock, drains).

An ``Always`` property is a function of one state returning ``None`` or a
one-line description of the violation.  ``Sometimes`` properties are event
names (``spec/events.py``) that some reachable transition must exercise.
``Eventually`` properties are evaluated on the whole state graph by the
checker (``checker/graph.py``); they are declared here so that the spec says
what they mean.
"""
from __future__ import annotations

from typing import Callable, NamedTuple

from asyncspec.spec import encoder, mamba, offload, swa
from asyncspec.spec import request as rq
from asyncspec.spec.algebra import CONCRETE as A
from asyncspec.spec.config import SpecConfig
from asyncspec.spec.state import KV_FAILED, KV_FAILED_RECVD, NULL_BLOCK, EngineState, in_flight_steps, request_name
from asyncspec.spec.cites import models

Check = Callable[[SpecConfig, EngineState], "str | None"]


class Always(NamedTuple):
    """A safety property checked on every reachable state."""

    name: str
    check: Check
    applies: Callable[[SpecConfig], bool]
    why: str  # one line: what breaks in production if it fails


class Eventually(NamedTuple):
    """A property of the state graph (liveness under the bounded model)."""

    name: str
    why: str
    models: tuple[str, ...] = ()  # the vLLM functions whose progress it states (spec/cites.py)


def _every_config(cfg: SpecConfig) -> bool:
    return True


def _per_request(
    cfg: SpecConfig, s: EngineState, bad: Callable[[rq.RequestParams, rq.RequestCounters], str | None]
) -> str | None:
    for i, (p, c) in enumerate(zip(s.params, s.counters)):
        message = bad(p, c)
        if message is not None:
            return f"{request_name(i)}: {message}"
    return None


def expected_output(p: rq.RequestParams) -> tuple[int, int]:
    """What the synchronous engine delivers: (number of tokens, finish status)."""
    if 0 < p.eos_position <= p.max_tokens:
        return p.eos_position, rq.FINISHED_STOPPED
    return p.max_tokens, rq.FINISHED_LENGTH_CAPPED


def fresh_sampling_steps(s: EngineState, req: int) -> int:
    """In-flight steps of ``req`` that sample and whose output is not stale."""
    total, stale_left = 0, s.counters[req].num_stale_output_tokens
    for step in in_flight_steps(s):
        for e in step.entries:
            if e.req != req:
                continue
            if stale_left > 0:
                stale_left -= e.num_tokens
            elif e.sampled_position > 0:
                total += 1 + e.num_drafts
    return total


# ---------------------------------------------------------------- the properties


@models("vllm.v1.core.sched.scheduler.Scheduler._update_request_with_output")
def placeholders_nonnegative(cfg: SpecConfig, s: EngineState) -> str | None:
    """num_output_placeholders >= 0 (vLLM asserts it in _update_request_with_output)."""
    return _per_request(cfg, s, lambda p, c: (
        f"num_output_placeholders = {c.num_output_placeholders} < 0"
        if c.num_output_placeholders < 0 else None))


@models("vllm.v1.core.sched.scheduler.Scheduler.update_from_output")
def stale_nonnegative(cfg: SpecConfig, s: EngineState) -> str | None:
    """num_stale_output_tokens >= 0 (vLLM asserts it in update_from_output)."""
    return _per_request(cfg, s, lambda p, c: (
        f"num_stale_output_tokens = {c.num_stale_output_tokens} < 0"
        if c.num_stale_output_tokens < 0 else None))


@models("vllm.v1.core.sched.scheduler.Scheduler.schedule",
        "vllm.v1.core.sched.async_scheduler.AsyncScheduler._update_after_schedule")
def computed_minus_placeholders(cfg: SpecConfig, s: EngineState) -> str | None:
    """Running, not mid-prefill: num_computed_tokens - placeholders == num_tokens - 1."""
    def bad(p: rq.RequestParams, c: rq.RequestCounters) -> str | None:
        if c.status != rq.RUNNING or c.is_prefill_chunk:
            return None
        lhs = c.num_computed_tokens - c.num_output_placeholders
        rhs = rq.num_tokens(p, c) - 1
        return None if lhs == rhs else f"num_computed_tokens - num_output_placeholders = {lhs} != num_tokens - 1 = {rhs}"
    return _per_request(cfg, s, bad)


@models("vllm.v1.core.sched.async_scheduler.AsyncScheduler._update_after_schedule")
def placeholders_count_sampling_steps(cfg: SpecConfig, s: EngineState) -> str | None:
    """Placeholders == sampled positions (1 + drafts) of the request's fresh in-flight steps."""
    for i, c in enumerate(s.counters):
        if rq.is_finished(A, c):
            continue
        expect = fresh_sampling_steps(s, i) if cfg.async_scheduling else 0
        if c.num_output_placeholders != expect:
            return (f"{request_name(i)}: num_output_placeholders = {c.num_output_placeholders} "
                    f"but {expect} fresh sampling step(s) are in flight")
    return None


@models("vllm.v1.core.sched.async_scheduler.AsyncScheduler._update_after_schedule",
        "vllm.v1.core.sched.scheduler.Scheduler._preempt_request",
        "vllm.v1.core.sched.scheduler.Scheduler.update_from_output")
def placeholders_le_in_flight(cfg: SpecConfig, s: EngineState) -> str | None:
    """num_output_placeholders <= num_in_flight_tokens, for an unfinished request.

    A finished request the connector keeps for its send (``connector.held``) still has its
    in-flight share drained by ``update_from_output``, which then skips it (``is_finished``)
    before resolving placeholders: vLLM leaves them, unread, until the send frees it."""
    return _per_request(cfg, s, lambda p, c: (
        f"num_output_placeholders {c.num_output_placeholders} > num_in_flight_tokens {c.num_in_flight_tokens}"
        if not rq.is_finished(A, c) and c.num_output_placeholders > c.num_in_flight_tokens else None))


@models("vllm.v1.core.sched.scheduler.Scheduler._preempt_request")
def stale_le_in_flight(cfg: SpecConfig, s: EngineState) -> str | None:
    """num_stale_output_tokens <= num_in_flight_tokens."""
    return _per_request(cfg, s, lambda p, c: (
        f"num_stale_output_tokens {c.num_stale_output_tokens} > num_in_flight_tokens {c.num_in_flight_tokens}"
        if c.num_stale_output_tokens > c.num_in_flight_tokens else None))


@models("vllm.v1.core.sched.utils.check_stop")
def output_within_max_tokens(cfg: SpecConfig, s: EngineState) -> str | None:
    """No request receives more than max_tokens output tokens."""
    return _per_request(cfg, s, lambda p, c: (
        f"{c.num_output_tokens} output tokens > max_tokens {p.max_tokens}"
        if c.num_output_tokens > p.max_tokens else None))


@models("vllm.v1.core.kv_cache_manager.KVCacheManager.cache_blocks")
def prefix_cache_frontier_known(cfg: SpecConfig, s: EngineState) -> str | None:
    """The prefix-cache frontier covers only known tokens (never a placeholder)."""
    return _per_request(cfg, s, lambda p, c: (
        f"cached frontier {c.num_cached_tokens} > num_tokens {rq.num_tokens(p, c)}"
        if c.num_cached_tokens > rq.num_tokens(p, c) else None))


def _frontier_within_processed(
    cfg: SpecConfig, s: EngineState, what: str, frontier: Callable[[rq.RequestCounters], int]
) -> str | None:
    """A running request without stale output: ``frontier`` <= C - F (KV written)."""
    def bad(p: rq.RequestParams, c: rq.RequestCounters) -> str | None:
        if c.status != rq.RUNNING or c.num_stale_output_tokens > 0:
            return None
        processed = c.num_computed_tokens - c.num_in_flight_tokens
        value = frontier(c)
        return None if value <= processed else f"{what} {value} > processed positions {processed}"
    return _per_request(cfg, s, bad)


@models("vllm.v1.core.sched.scheduler.Scheduler.update_from_output",
        "vllm.v1.core.kv_cache_manager.KVCacheManager.cache_blocks")
def output_caching_kv_written(cfg: SpecConfig, s: EngineState) -> str | None:
    """Output-time cache_blocks never covers a position whose KV write is in flight."""
    return _frontier_within_processed(cfg, s, "output-time frontier", lambda c: c.output_cached_tokens)


@models("vllm.v1.core.kv_cache_manager.KVCacheManager.cache_blocks")
def prefix_cache_frontier_kv_written(cfg: SpecConfig, s: EngineState) -> str | None:
    """Strict reading: no cached block holds KV still being written (a finding)."""
    return _frontier_within_processed(cfg, s, "cached frontier", lambda c: c.num_cached_tokens)


@models("vllm.v1.core.block_pool.BlockPool.free_blocks",
        "vllm.v1.core.kv_cache_manager.KVCacheManager.allocate_slots")
def blocks_conserved(cfg: SpecConfig, s: EngineState) -> str | None:
    """Every block is in exactly one place: free queue, one block table, or parked."""
    seen: dict[int, str] = {}
    places: list[tuple[str, tuple[int, ...]]] = [("free queue", s.free_blocks)]
    places += [(request_name(i), t) for i, t in enumerate(s.block_tables)]
    if cfg.sliding_window:  # only with a window group: the fast explorer memoizes on what is read
        places += [(f"{request_name(i)} (sliding window)", tuple(b for b in t if b != NULL_BLOCK))
                   for i, t in enumerate(s.swa_block_tables)]
    places += mamba.places(cfg, s)
    places += [(f"deferred fence {e.fence}", e.evict_first + e.evict_last) for e in s.deferred_frees]
    for where, blocks in places:
        for b in blocks:
            if b in seen:
                return f"block {b} is in {seen[b]} and in {where}"
            seen[b] = where
    missing = sorted(set(range(cfg.num_blocks)) - set(seen))
    return f"blocks {missing} are lost" if missing else None


@models("vllm.v1.core.sched.scheduler.Scheduler._free_request_blocks",
        "vllm.v1.core.sched.scheduler.Scheduler._drain_deferred_frees")
def inflight_writes_safe(cfg: SpecConfig, s: EngineState) -> str | None:
    """With deferral on, no block an in-flight step writes is free or another's."""
    free = set(s.free_blocks)
    for step in in_flight_steps(s):
        for e in step.entries:
            for b in e.written_blocks:
                if b in free:
                    return f"block {b} is written by an in-flight step of {request_name(e.req)} but is free"
                for j, table in enumerate(s.block_tables):
                    if j != e.req and b in table:
                        return (f"block {b} is written by an in-flight step of {request_name(e.req)} "
                                f"but owned by {request_name(j)}")
    return None


@models("vllm.v1.core.sched.scheduler.Scheduler._update_request_with_output")
def delivered_in_order(cfg: SpecConfig, s: EngineState) -> str | None:
    """Each request receives output positions 1..n exactly once, in order."""
    return _per_request(cfg, s, lambda p, c: (
        "a token was appended at the wrong output position" if c.output_out_of_order else None))


@models("vllm.v1.engine.core.EngineCore.step", "vllm.v1.engine.core.EngineCore.step_with_batch_queue")
def matches_sync_output(cfg: SpecConfig, s: EngineState) -> str | None:
    """Final output equals the synchronous engine's (a prefix of it when aborted)."""
    def bad(p: rq.RequestParams, c: rq.RequestCounters) -> str | None:
        length, status = expected_output(p)
        if c.num_output_tokens > length:
            return f"{c.num_output_tokens} tokens but the synchronous engine stops at {length}"
        if rq.is_stopped_by_engine(A, c) and (c.num_output_tokens, c.status) != (length, status):
            return (f"finished {rq.STATUS_NAMES[c.status]} with {c.num_output_tokens} tokens; "
                    f"synchronous: {rq.STATUS_NAMES[status]} with {length}")
        return None
    return _per_request(cfg, s, bad)


@models("vllm.v1.engine.core.EngineCore.step_with_batch_queue")
def wasted_steps_bounded(cfg: SpecConfig, s: EngineState) -> str | None:
    """Wasted forward passes <= D - 1 per request."""
    limit = cfg.batch_queue_depth - 1
    return _per_request(cfg, s, lambda p, c: (
        f"{c.num_wasted_steps} wasted steps > D - 1 = {limit}" if c.num_wasted_steps > limit else None))


@models("vllm.v1.core.sched.scheduler.Scheduler.schedule", pr=27922)
def no_wasted_step_on_max_tokens(cfg: SpecConfig, s: EngineState) -> str | None:
    """A request that ends on max_tokens wastes no forward pass (the max_tokens guard)."""
    return _per_request(cfg, s, lambda p, c: (
        f"{c.num_wasted_steps} wasted step(s) for a request that ended on max_tokens"
        if c.status == rq.FINISHED_LENGTH_CAPPED and c.num_wasted_steps > 0 else None))


@models("vllm.v1.core.sched.scheduler.Scheduler.get_grammar_bitmask")
def grammar_in_order(cfg: SpecConfig, s: EngineState) -> str | None:
    """Structured output: a bitmask for position q is built only once tokens 1..q-1 are known."""
    return _per_request(cfg, s, lambda p, c: (
        "a grammar bitmask was built before every earlier token was known" if c.grammar_gap else None))


@models("vllm.v1.core.sched.scheduler.Scheduler._update_after_schedule")
def last_sched_seq_bounded(cfg: SpecConfig, s: EngineState) -> str | None:
    """last_sched_seq <= sched_step_seq, and processed_step_seq <= sched_step_seq."""
    if s.processed_step_seq > s.sched_step_seq:
        return f"processed_step_seq {s.processed_step_seq} > sched_step_seq {s.sched_step_seq}"
    return _per_request(cfg, s, lambda p, c: (
        f"last_sched_seq {c.last_sched_seq} > sched_step_seq {s.sched_step_seq}"
        if c.last_sched_seq > s.sched_step_seq else None))


@models("vllm.v1.core.sched.scheduler.Scheduler.schedule",
        "vllm.v1.core.sched.interface.PauseState")
def pause_respected(cfg: SpecConfig, s: EngineState) -> str | None:
    """No ``schedule()`` ran a request while ``PAUSED_ALL``, or admitted one from ``waiting``
    while ``PAUSED_NEW`` (the ghost ``pause_breached``, set from the call's input state)."""
    return "a step scheduled what the pause state holds" if s.pause_breached else None


def _pauses_only(cfg: SpecConfig) -> bool:
    return cfg.pauses > 0


@models("vllm.v1.core.sched.scheduler.Scheduler._update_requests_with_invalid_blocks",
        "vllm.v1.core.sched.scheduler.Scheduler._update_waiting_for_remote_kv")
def kv_rollback_to_valid_prefix(cfg: SpecConfig, s: EngineState) -> str | None:
    """A failed load awaiting promotion (recompute) counts as computed only a prefix of
    whole blocks, strictly below the tokens it loaded: no invalid block's position is
    taken as computed, and at least one position is recomputed before anything samples."""
    for req, t in enumerate(s.kv_transfer):
        if t not in (KV_FAILED, KV_FAILED_RECVD):
            continue
        c = s.counters[req]
        loaded = s.params[req].num_prompt_tokens - (0 if cfg.kv_load_whole_prompt else 1)  # connector.external_tokens
        if c.num_computed_tokens % cfg.block_size or c.num_computed_tokens >= loaded:
            return (f"{request_name(req)}: a failed load left num_computed_tokens "
                    f"{c.num_computed_tokens}, not a whole-block prefix below the {loaded} loaded tokens")
    return None


def _connector_only(cfg: SpecConfig) -> bool:
    return cfg.kv_connector


@models("vllm.v1.core.sched.scheduler.Scheduler.schedule",
        "vllm.v1.core.sched.scheduler.Scheduler._handle_stopped_request")
def paused_sessions_hold_slots(cfg: SpecConfig, s: EngineState) -> str | None:
    """Running requests plus paused streaming sessions never exceed max_num_seqs."""
    paused = sum(1 for c in s.counters if c.status == rq.WAITING_FOR_STREAMING_REQ)
    if len(s.running) + paused > cfg.max_num_seqs:
        return f"{len(s.running)} running + {paused} paused session(s) > max_num_seqs {cfg.max_num_seqs}"
    return None


@models("vllm.v1.core.sched.scheduler.Scheduler._handle_stopped_request")
def stopped_turn_output_dropped(cfg: SpecConfig, s: EngineState) -> str | None:
    """A session between turns (WAITING or paused) with steps in flight: all their output is
    stale and dropped, so no token of the old turn reaches the new one."""
    def bad(p: rq.RequestParams, c: rq.RequestCounters) -> str | None:
        if c.status not in (rq.WAITING, rq.WAITING_FOR_STREAMING_REQ) or c.num_in_flight_tokens == 0:
            return None
        if c.num_stale_output_tokens == c.num_in_flight_tokens and c.drop_stale_output:
            return None
        return (f"{c.num_in_flight_tokens} in-flight token(s) between turns but only "
                f"{c.num_stale_output_tokens} stale{'' if c.drop_stale_output else ', delivered'}")
    return _per_request(cfg, s, bad)


def _sessions_only(cfg: SpecConfig) -> bool:
    return bool(cfg.resumable)


def _async_only(cfg: SpecConfig) -> bool:
    return cfg.async_scheduling


def _deferral_only(cfg: SpecConfig) -> bool:
    return cfg.defer_block_free


def _structured_only(cfg: SpecConfig) -> bool:
    return bool(cfg.structured_output)


def _without_drafts(cfg: SpecConfig) -> bool:
    return cfg.num_speculative_tokens == 0


ALWAYS: tuple[Always, ...] = (
    Always("placeholders_nonnegative", placeholders_nonnegative, _every_config,
           "vLLM asserts it; an underflow crashes the engine (e.g. vllm#57562)"),
    Always("stale_nonnegative", stale_nonnegative, _every_config,
           "vLLM asserts it; the stale drain must stay in lockstep with in-flight steps"),
    Always("computed_minus_placeholders", computed_minus_placeholders, _async_only,
           "the gap formula schedules exactly one new token per decode step only if this holds"),
    Always("placeholders_count_sampling_steps", placeholders_count_sampling_steps, _every_config,
           "each placeholder is a promise of one in-flight sampled token; no more, no fewer"),
    Always("placeholders_le_in_flight", placeholders_le_in_flight, _every_config,
           "a placeholder without an in-flight token is a token that never arrives"),
    Always("stale_le_in_flight", stale_le_in_flight, _every_config,
           "stale output is part of in-flight output; more would drain into fresh steps"),
    Always("output_within_max_tokens", output_within_max_tokens, _every_config,
           "the client asked for at most max_tokens tokens"),
    Always("prefix_cache_frontier_known", prefix_cache_frontier_known, _every_config,
           "a block hashed over a placeholder position poisons the prefix cache"),
    Always("output_caching_kv_written", output_caching_kv_written, _every_config,
           "a returned token does not prove its next-step KV is written (vLLM 0.33.0)"),
    Always("blocks_conserved", blocks_conserved, _every_config,
           "a block owned twice is written by two requests; a lost block leaks the pool"),
    Always("inflight_writes_safe", inflight_writes_safe, _deferral_only,
           "a KV connector may refill a reused block while an in-flight step still writes it"),
    Always("delivered_in_order", delivered_in_order, _every_config,
           "duplicated or dropped tokens after preemption"),
    Always("matches_sync_output", matches_sync_output, _every_config,
           "async scheduling must not change what the client receives"),
    Always("wasted_steps_bounded", wasted_steps_bounded, _every_config,
           "the price of async scheduling is at most D - 1 steps per request"),
    Always("no_wasted_step_on_max_tokens", no_wasted_step_on_max_tokens, _without_drafts,
           "the max_tokens guard (#27922) promises no step past max_tokens; with drafts see findings"),
    Always("grammar_in_order", grammar_in_order, _structured_only,
           "a grammar fed out of order or with a gap constrains the wrong position"),
    Always("last_sched_seq_bounded", last_sched_seq_bounded, _every_config,
           "a fence ahead of sched_step_seq would never be passed"),
    Always("pause_respected", pause_respected, _pauses_only,
           "a weight update during a pause races steps the pause promised not to run (vllm#32103)"),
    Always("kv_rollback_to_valid_prefix", kv_rollback_to_valid_prefix, _connector_only,
           "a token sampled over an invalid block's KV is garbage the client receives"),
    Always("paused_sessions_hold_slots", paused_sessions_hold_slots, _sessions_only,
           "a paused session keeps its model-runner slot; admitting past it overflows the input batch"),
    Always("stopped_turn_output_dropped", stopped_turn_output_dropped, _sessions_only,
           "an old turn's in-flight token delivered into the new turn corrupts the session"),
    Always("store_reads_fenced", offload.store_reads_fenced, offload.offloading_only,
           "a CPU store that reads a block after a later step rewrote it saves another request's KV"),
    Always("offload_accounting", offload.offload_accounting, offload.offloading_only,
           "a stored or loaded block count off by one serves KV of positions never computed"),
    Always("encoder_output_available", encoder.encoder_output_available, encoder.images_only,
           "a step that reads an evicted or never-computed image crashes the worker (Encoder cache miss, vllm#38551)"),
    Always("encoder_cache_bounded", encoder.encoder_cache_bounded, encoder.images_only,
           "the encoder cache is sized in embeddings; past it the worker's memory is not the budget's"),
    Always("mamba_states_held", mamba.mamba_states_held, mamba.mamba_only,
           "a step that reads or writes a freed Mamba state block corrupts another request's state"),
    Always("mamba_chunks_aligned", mamba.mamba_chunks_aligned, mamba.mamba_only,
           "a prefill chunk ending inside a Mamba block caches a state that no block boundary holds"),
    Always("window_kv_held", swa.window_kv_held, swa.caches,
           "a step whose window reads a freed block attends to another request's KV (a hybrid hit too short a run)"),
)
"""Checked on every reachable state of every config they apply to."""

STRICT: tuple[Always, ...] = (
    Always("prefix_cache_frontier_kv_written", prefix_cache_frontier_kv_written, _every_config,
           "strict reading; allocation-time caching violates it by design (docs/findings.md)"),
)
"""Opt-in properties (a config names them in ``properties``); findings, not defaults."""

EVENTUALLY: tuple[Eventually, ...] = (
    Eventually("no_deadlock", "a state without successors has every request finished and every block free",
               ("vllm.v1.engine.core.EngineCore.step_with_batch_queue",)),
    Eventually("no_livelock", "no reachable cycle: the engine cannot spin without finishing requests",
               ("vllm.v1.engine.core.EngineCore.step_with_batch_queue",)),
    Eventually("deferred_frees_drained", "every parked free is eventually returned to the pool",
               ("vllm.v1.core.sched.scheduler.Scheduler._drain_deferred_frees",)),
)

ALL_ALWAYS: dict[str, Always] = {p.name: p for p in ALWAYS + STRICT}


def always_for(cfg: SpecConfig) -> tuple[Always, ...]:
    """The always-properties checked for ``cfg``."""
    if cfg.properties is not None:
        return tuple(ALL_ALWAYS[n] for n in cfg.properties if n in ALL_ALWAYS)
    return tuple(p for p in ALWAYS if p.applies(cfg))


def eventually_for(cfg: SpecConfig) -> tuple[Eventually, ...]:
    """The graph properties checked for ``cfg``."""
    if cfg.properties is not None:
        return tuple(p for p in EVENTUALLY if p.name in cfg.properties)
    return EVENTUALLY
