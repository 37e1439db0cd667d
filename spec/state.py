"""The engine's state: requests, queues, block pool, batch queue, step fences.

Everything is an immutable ``NamedTuple`` so that states can be hashed and
stored by the checker, and so that an action is a pure function from a state
to its successor.  Request ``i`` is named ``r{i}``; block ids are small ints.

Example:
    >>> from asyncspec.spec.config import SpecConfig
    >>> cfg = SpecConfig(name="x", requests=((4, 2),), num_blocks=2)
    >>> s = initial_states(cfg)[0]
    >>> s.waiting, s.free_blocks, len(initial_states(cfg))
    ((0,), (0, 1), 3)
"""
from __future__ import annotations

import itertools
from typing import NamedTuple

from asyncspec.spec.algebra import CONCRETE as A
from asyncspec.spec.config import SpecConfig
from asyncspec.spec.request import NOT_ARRIVED, WAITING, RequestCounters, RequestParams, initial_counters


NULL_BLOCK = -1
"""A sliding-window table's entry for a block freed behind the window (vLLM's null block 0, as a spec id)."""


KV_NONE, KV_LOADING, KV_RECVD, KV_FAILED, KV_FAILED_RECVD, KV_PROMOTED, KV_DONE, KV_SENDING, KV_ORPHAN = range(9)
"""A request's KV connector transfer: none yet; its load started (no report); finished_recving
seen; failed_recving seen (recompute); both seen; promoted out of WAITING_FOR_REMOTE_KVS and
not yet scheduled; over (never loads again); finished, blocks held until finished_sending;
finished during its load, blocks held until finished_recving."""


UNPAUSED, PAUSED_NEW, PAUSED_ALL = range(3)
"""``Scheduler._pause_state`` (vllm/v1/core/sched/interface.py ``PauseState``): scheduling as usual;
no new request admitted (running and KV-holding requests go on); nothing scheduled at all."""


class StepEntry(NamedTuple):
    """One request's share of a scheduled step (vLLM ``num_scheduled_tokens[r]``)."""

    req: int  # request index
    num_tokens: int  # tokens scheduled for it in this step
    sampled_position: int  # output position this step samples; 0 = a prefill chunk
    written_blocks: tuple[int, ...]  # KV blocks the step writes for it
    num_drafts: int = 0  # draft positions among num_tokens (speculative decoding)
    start_position: int = 0  # num_computed_tokens before the step: its first KV position
    padded_drafts: bool = False  # the drafts are pad_spec_decode's -1 ids: all rejected
    state_blocks: tuple[int, ...] = ()  # Mamba state blocks it reads and writes (spec/mamba.py)


class Step(NamedTuple):
    """A ``SchedulerOutput`` in the batch queue: scheduled, not yet processed."""

    entries: tuple[StepEntry, ...]  # empty tuple = an empty step (still queued)
    seq: int  # sched_step_seq this step received (0 when not deferring or empty)
    encoder_inputs: tuple[tuple[int, tuple[int, ...]], ...] = ()  # scheduled_encoder_inputs: (req, input ids)
    freed_encoder: tuple[int, ...] = ()  # free_encoder_mm_hashes: items the worker drops first (spec/encoder.py)


class DeferredFree(NamedTuple):
    """An entry of ``Scheduler.deferred_frees``: blocks parked behind a fence."""

    fence: int  # returned once processed_step_seq >= fence
    evict_first: tuple[int, ...]  # unhashed blocks, in free order (go to the front)
    evict_last: tuple[int, ...]  # prefix-cached blocks, in free order (go to the back)


class BlockHash(NamedTuple):
    """What a prefix-cached full block holds: block ``block_index`` of request ``req``'s tokens.

    Token ids are a function of (request, position), so two requests never share a block.
    """

    req: int
    block_index: int
    group: int = 0  # kv_cache_group_id: 0 full attention, 1 a Mamba group's state after the block


class StoreJob(NamedTuple):
    """An offloading store job the worker has not reported complete (``OffloadingConnectorScheduler._jobs``)."""

    req: int  # the request whose blocks it stores
    blocks: tuple[int, ...]  # the GPU blocks it reads (``TransferJob.src_spec``)
    outputs_ahead: int  # outputs processed before one may report it complete
    flushed: bool  # in a step's ``jobs_to_flush``: the worker stored it before that step's forward pass
    registered: bool  # its blocks are watched for reuse (``_block_id_to_pending_jobs``): its request finished


class EngineState(NamedTuple):
    """One state of the engine (scheduler + batch queue + block pool)."""

    params: tuple[RequestParams, ...]  # per request, constant (EOS position included)
    counters: tuple[RequestCounters, ...]  # per request, see spec/request.py
    block_tables: tuple[tuple[int, ...], ...]  # per request, block ids it holds, in order
    waiting: tuple[int, ...]  # Scheduler.waiting, front first (FCFS)
    running: tuple[int, ...]  # Scheduler.running, in admission order
    batch_queue: tuple[Step, ...]  # EngineCore.batch_queue, oldest first
    deferred_step: Step | None  # executed, sampling deferred (structured output), not yet queued
    free_blocks: tuple[int, ...]  # BlockPool free queue, next allocated first
    block_hashes: tuple[BlockHash | None, ...]  # per block id: the content it caches, or None
    deferred_frees: tuple[DeferredFree, ...]  # Scheduler.deferred_frees, oldest first
    sched_step_seq: int  # Q: advanced by each non-empty step when deferring
    processed_step_seq: int  # R: advanced by each processed non-empty step
    finished_pending: bool  # Scheduler.finished_req_ids not yet sent in a SchedulerOutput
    forced_preemptions_left: int  # reset_prefix_cache calls the environment may still make
    call_in_progress: bool = False  # the step_with_batch_queue call goes on to process a step
    swa_block_tables: tuple[tuple[int, ...], ...] = ()  # per request, sliding-window group (W > 0 only);
    # NULL_BLOCK where the window has passed, as vLLM's null block
    kv_holding: tuple[int, ...] = ()  # Scheduler.kv_holding_waiting, front first (KV connector)
    kv_transfer: tuple[int, ...] = ()  # per request, its connector transfer (KV_*; kv_connector only)
    pause_state: int = UNPAUSED  # Scheduler._pause_state (UNPAUSED, PAUSED_NEW, PAUSED_ALL)
    pauses_left: int = 0  # pause_scheduler calls the environment may still make
    pause_breached: bool = False  # ghost: a schedule() ran a request the pause state forbids
    stream_sent: tuple[int, ...] = ()  # per request, inputs its client sent after the first (resumable only;
    # len(stream_updates) + 1 once the end of its input stream is sent)
    stream_applied: tuple[int, ...] = ()  # per request, those the scheduler took (Request.streaming_queue
    # holds the others, oldest first)
    store_jobs: tuple[StoreJob, ...] = ()  # kv_offloading: store jobs not reported complete, in issue order
    offload_stored: tuple[int, ...] = ()  # kv_offloading, per request: blocks a store job was issued for
    offload_tables: tuple[tuple[int, ...], ...] = ()  # kv_offloading, per request: the connector's copy of a
    # finished request's block ids, until its last store is issued
    offload_finished: tuple[int, ...] = ()  # kv_offloading: requests finished since the last schedule()
    store_breached: bool = False  # ghost: a step wrote a block an unflushed, unfinished store job reads
    enc_inputs: tuple[tuple[int, ...], ...] = ()  # per request, EncoderCacheManager.request_cached_ids (images only)
    enc_entries: tuple[int, ...] = ()  # items in EncoderCacheManager.cached, sorted (freeable ones too)
    enc_freeable: tuple[int, ...] = ()  # EncoderCacheManager.freeable: unreferenced entries, oldest first
    worker_encoder: tuple[int, ...] = ()  # ghost: items the worker's encoder cache holds, sorted
    encoder_miss: bool = False  # ghost: a step read an image position whose item the worker did not hold
    mamba_tables: tuple[tuple[int, ...], ...] = ()  # per request, the Mamba group's blocks (mamba_cache_mode;
    # NULL_BLOCK at positions whose state is skipped or freed, as vLLM's null block)
    mamba_junction: tuple[int, ...] = ()  # per request, Request.shared_prefix_boundary ("align", prefix caching)
    mamba_misaligned: bool = False  # ghost: a prefill chunk stopped inside a Mamba block (spec/mamba.py)


def in_flight_steps(s: EngineState) -> tuple[Step, ...]:
    """Every step the worker has been given and whose output is unprocessed, oldest first."""
    return s.batch_queue + ((s.deferred_step,) if s.deferred_step is not None else ())


def eos_choices(cfg: SpecConfig, index: int) -> tuple[int, ...]:
    """Every EOS position the environment may pick for request ``index``."""
    if cfg.eos_positions is not None:
        return cfg.eos_positions[index]
    _, max_tokens = cfg.requests[index]
    return (0, *range(1, max_tokens + 1))


def initial_states(cfg: SpecConfig) -> list[EngineState]:
    """One initial state per choice of EOS positions, in a fixed order."""
    per_request = [eos_choices(cfg, i) for i in range(len(cfg.requests))]
    return [initial_state(cfg, eos) for eos in itertools.product(*per_request)]


def initial_state(cfg: SpecConfig, eos: tuple[int, ...]) -> EngineState:
    """The state before the first step, for given EOS positions."""
    params = tuple(
        RequestParams(num_prompt_tokens=p, max_tokens=m, eos_position=e,
                      use_structured_output=i in cfg.structured_output)
        for i, ((p, m), e) in enumerate(zip(cfg.requests, eos))
    )
    n = len(cfg.requests)
    arrived = 1 if cfg.late_arrivals else n
    counters = tuple(
        initial_counters(A, WAITING if i < arrived else NOT_ARRIVED) for i in range(n)
    )
    return EngineState(
        params=params,
        counters=counters,
        block_tables=tuple(() for _ in range(n)),
        waiting=tuple(range(arrived)),
        running=(),
        batch_queue=(),
        deferred_step=None,
        free_blocks=tuple(range(cfg.num_blocks)),
        block_hashes=(None,) * cfg.num_blocks,
        deferred_frees=(),
        sched_step_seq=0,
        processed_step_seq=0,
        finished_pending=False,
        forced_preemptions_left=cfg.forced_preemptions,
        swa_block_tables=tuple(() for _ in range(n)) if cfg.sliding_window else (),
        kv_transfer=(KV_NONE,) * n if cfg.kv_connector else (),
        pauses_left=cfg.pauses,
        stream_sent=(0,) * n if cfg.resumable else (),
        stream_applied=(0,) * n if cfg.resumable else (),
        offload_stored=(0,) * n if cfg.kv_offloading else (),
        offload_tables=tuple(() for _ in range(n)) if cfg.kv_offloading else (),
        enc_inputs=tuple(() for _ in range(n)) if cfg.images else (),
        mamba_tables=tuple(() for _ in range(n)) if cfg.mamba_cache_mode else (),
        mamba_junction=(0,) * n if cfg.mamba_cache_mode else (),
    )


def request_name(index: int) -> str:
    """The display name of request ``index``."""
    return f"r{index}"
