"""The KV block pool: allocation, frees (immediate or fenced), and the drain.

Models ``KVCacheManager.allocate_slots`` / ``free`` and ``BlockPool.free_blocks``
(vllm/v1/core/kv_cache_manager.py, block_pool.py) and the scheduler's fenced
frees ``Scheduler._free_request_blocks`` / ``_drain_deferred_frees``
(vllm/v1/core/sched/scheduler.py).  Block ids are real: the free queue is an
ordered list, a request holds a block table.
"""
from __future__ import annotations

from asyncspec.spec import events as ev
from asyncspec.spec import mamba
from asyncspec.spec import swa
from asyncspec.spec import request as rq
from asyncspec.spec.config import SpecConfig
from asyncspec.spec.draft import Draft
from asyncspec.spec.state import NULL_BLOCK, BlockHash, DeferredFree
from asyncspec.spec.cites import models


@models("vllm.v1.core.kv_cache_manager.KVCacheManager.allocate_slots")
def blocks_needed(cfg: SpecConfig, d: Draft, req: int, num_tokens: int) -> int:
    """New blocks ``req`` needs so that ``num_tokens`` positions have a slot."""
    return max(cfg.blocks_for(num_tokens) - len(d.block_tables[req]), 0)


@models("vllm.v1.core.single_type_kv_cache_manager.SingleTypeKVCacheManager.get_num_blocks_to_allocate")
def swa_blocks_needed(cfg: SpecConfig, d: Draft, req: int, num_tokens: int) -> int:
    """New blocks the sliding-window group needs for ``num_tokens`` slots (0 without one).

    Its table keeps one entry per block position (nulls included), so a running
    request needs as many new blocks there as in the full-attention group.
    """
    if not cfg.sliding_window:
        return 0
    return max(cfg.blocks_for(num_tokens) - len(d.swa_block_tables[req]), 0)


def _take(cfg: SpecConfig, d: Draft, req: int, need: int, swa_need: int, head: tuple[int, ...],
          num_tokens: int = 0) -> None:
    """``KVCacheCoordinator.allocate_new_blocks``: group by group (full attention first, then the
    sliding-window or Mamba group, whose state blocks ``num_tokens`` sizes), each from the front
    of the shared free queue."""
    taken, swa = d.free_blocks[:need], d.free_blocks[need:need + swa_need]
    d.free_blocks = d.free_blocks[need + swa_need:]
    for b in taken + swa:
        d.block_hashes[b] = None  # BlockPool.get_new_blocks evicts a cached block's hash
    d.block_tables[req] = head + tuple(taken)
    if cfg.sliding_window:
        d.swa_block_tables[req] = d.swa_block_tables[req] + tuple(swa)
    mamba.take(cfg, d, req, num_tokens)


@models("vllm.v1.core.kv_cache_manager.KVCacheManager.allocate_slots",
        "vllm.v1.core.single_type_kv_cache_manager.SingleTypeKVCacheManager.remove_skipped_blocks",
        "vllm.v1.core.single_type_kv_cache_manager.SlidingWindowManager.get_num_skipped_tokens",
        "vllm.v1.core.block_pool.BlockPool.free_blocks")
def remove_skipped_blocks(cfg: SpecConfig, d: Draft, req: int) -> None:
    """The sliding-window group frees the blocks wholly behind the window of the next token,
    on the processed-token basis (C - F: in-flight steps still read below it).

    Freed blocks become the null block in the table (``NULL_BLOCK``) and go to the front
    of the free queue, the highest position first (a prefix-cached one to the back,
    ``BlockPool.free_blocks``); the walk stops at the first null.
    """
    if not cfg.sliding_window:
        return
    c = d.counters[req]
    processed = max(0, c.num_computed_tokens - c.num_in_flight_tokens)
    skipped = max(0, processed - cfg.sliding_window + 1) // cfg.block_size
    table = list(d.swa_block_tables[req])
    freed: list[int] = []
    for i in range(min(skipped, len(table)) - 1, -1, -1):
        if table[i] == NULL_BLOCK:
            break
        freed.append(table[i])
        table[i] = NULL_BLOCK
    if freed:
        d.swa_block_tables[req] = tuple(table)
        hashed = [b for b in freed if d.block_hashes[b] is not None]  # BlockPool.free_blocks: cached ones last
        d.free_blocks = [b for b in freed if b not in hashed] + d.free_blocks + hashed
        d.emit(ev.SLIDING_WINDOW_FREE)


@models("vllm.v1.core.kv_cache_manager.KVCacheManager.allocate_slots",
        "vllm.v1.core.block_pool.BlockPool.get_new_blocks",
        "vllm.config.vllm.VllmConfig.num_lookahead_tokens")
def allocate_slots(cfg: SpecConfig, d: Draft, req: int, num_new_tokens: int) -> bool:
    """``KVCacheManager.allocate_slots``: give ``req`` slots for its next tokens
    and for the drafter's ``num_lookahead_tokens`` beyond them, in every KV cache group.

    The sliding-window group first frees what its window has passed (even when
    the allocation then fails).  Takes blocks from the front of the free queue.
    Returns False (vLLM returns None) when the pool has too few free blocks;
    nothing else changes then.
    """
    remove_skipped_blocks(cfg, d, req)
    mamba.remove_skipped_blocks(cfg, d, req)
    main = d.counters[req].num_computed_tokens + num_new_tokens
    total = main + cfg.lookahead_tokens
    need = blocks_needed(cfg, d, req, total)
    swa_need = swa_blocks_needed(cfg, d, req, total)
    if need + swa_need + mamba.blocks_needed(cfg, d, req, main) > len(d.free_blocks):
        return False
    _take(cfg, d, req, need, swa_need, d.block_tables[req], main)
    return True


@models("vllm.v1.core.kv_cache_manager.KVCacheManager.get_computed_blocks",
        "vllm.v1.core.kv_cache_manager.KVCacheManager.prefix_cache_lookup_enabled",
        "vllm.v1.request.Request.get_skip_reading_prefix_cache")
def longest_cache_hit(cfg: SpecConfig, d: Draft, req: int) -> tuple[int, ...]:
    """``KVCacheManager.get_computed_blocks``: ``req``'s own cached blocks, in order.

    The longest prefix of block indices 0, 1, ... whose hash is held by a block
    in the free queue, capped so that at least the last known token is
    recomputed (hit <= N - 1).  Blocks parked in ``deferred_frees`` are not
    hit (see docs/spec.md, what is left out).  None for a request that skips reading the
    prefix cache (``KVCacheManager.prefix_cache_lookup_enabled``: prompt logprobs).
    """
    if not cfg.enable_prefix_caching or req in cfg.skip_reading_prefix_cache:
        return ()
    limit = (rq.num_tokens(d.params[req], d.counters[req]) - 1) // cfg.block_size
    by_hash = {d.block_hashes[b]: b for b in reversed(d.free_blocks) if d.block_hashes[b] is not None}
    hit: list[int] = []
    while len(hit) < limit and BlockHash(req, len(hit)) in by_hash:
        hit.append(by_hash[BlockHash(req, len(hit))])
    return tuple(hit)


@models("vllm.v1.core.kv_cache_manager.KVCacheManager.allocate_slots",
        "vllm.v1.core.single_type_kv_cache_manager.SingleTypeKVCacheManager.get_num_blocks_to_allocate",
        "vllm.v1.core.single_type_kv_cache_manager.SingleTypeKVCacheManager.allocate_new_blocks")
def admit_with_hit(cfg: SpecConfig, d: Draft, req: int, hit: tuple[int, ...], num_new_tokens: int,
                   state: int = -1, swa_hit: tuple[int, ...] = ()) -> bool:
    """``allocate_slots`` for an admission: touch the hit blocks (and the Mamba state block
    ``state`` the hit ends on), then allocate the rest (the new tokens and the lookahead slots)
    after the blocks ``req`` already holds.

    A request admitted from C = 0 holds blocks only after a connector's load of its one
    prompt token (promotion rolls C back to 0, ``_update_waiting_for_remote_kv``); vLLM
    counts and keeps them (``get_num_blocks_to_allocate``: ``num_req_blocks``;
    ``allocate_new_blocks`` extends ``req_to_blocks``), and its hit is empty (capped at
    N - 1 = 0 tokens).  Nothing changes when the pool cannot hold both (vLLM returns None).
    ``swa_hit``: the sliding-window group's share of the hit (``swa.cut_hit``), its skipped
    positions already null (``add_local_computed_blocks`` pads them), one entry per hit block.
    """
    held = d.block_tables[req]
    main = len(hit) * cfg.block_size + num_new_tokens
    total = main + cfg.lookahead_tokens
    need = max(cfg.blocks_for(total) - len(held) - len(hit), 0)
    swa_need = max(swa_blocks_needed(cfg, d, req, total) - len(swa_hit), 0)
    state_need = mamba.blocks_needed(cfg, d, req, main, hit=len(hit) if state != NULL_BLOCK else 0)
    rest = [b for b in d.free_blocks if b not in hit and b != state and b not in swa_hit]
    if need + swa_need + state_need > len(rest):
        return False
    d.free_blocks = rest
    if swa_hit:
        d.swa_block_tables[req] = swa_hit
    if state != NULL_BLOCK:
        d.mamba_tables[req] = (NULL_BLOCK,) * (len(hit) - 1) + (state,)
    _take(cfg, d, req, need, swa_need, held + hit, main)
    return True


@models("vllm.v1.core.kv_cache_manager.KVCacheManager.cache_blocks")
def record_hashes(cfg: SpecConfig, d: Draft, req: int, old_frontier: int) -> None:
    """``cache_blocks``: the blocks the frontier newly covers get their hash."""
    new_frontier = d.counters[req].num_cached_tokens
    table = d.block_tables[req]
    for index in range(old_frontier // cfg.block_size, new_frontier // cfg.block_size):
        d.block_hashes[table[index]] = BlockHash(req, index)
    swa.record_hashes(cfg, d, req, old_frontier)
    mamba.record_hashes(cfg, d, req, old_frontier)


@models("vllm.v1.core.kv_cache_manager.KVCacheManager.allocate_slots",
        "vllm.v1.kv_cache_interface.SlidingWindowSpec.max_admission_blocks_per_request",
        "vllm.v1.core.single_type_kv_cache_manager.SingleTypeKVCacheManager.get_num_blocks_to_allocate")
def admission_fits(cfg: SpecConfig, d: Draft, req: int, hit: tuple[int, ...] = (), state: int = NULL_BLOCK,
                   swa_hit: tuple[int, ...] = ()) -> bool:
    """``allocate_slots(full_sequence_must_fit=True)``: the whole known sequence fits;
    the sliding-window group counts at most ``swa_admission_cap`` blocks of it less its hit
    (``swa_hit``), plus the hit's real blocks while they are free (``_get_num_evictable_blocks``),
    a Mamba group at most one new state block, plus the hit's state block (``hit``, ``state``)
    while it is free."""
    if not cfg.reserve_full_isl:
        return True
    full = rq.num_tokens(d.params[req], d.counters[req])
    swa = 0
    if cfg.sliding_window:
        capped = min(swa_blocks_needed(cfg, d, req, full), cfg.swa_admission_cap)
        swa = max(capped - len(swa_hit), 0) + sum(b != NULL_BLOCK for b in swa_hit)
    states = mamba.blocks_needed(cfg, d, req, full, hit=len(hit) if state != NULL_BLOCK else 0) + (state != NULL_BLOCK)
    return blocks_needed(cfg, d, req, full) + swa + states <= len(d.free_blocks)


@models("vllm.v1.core.sched.scheduler.Scheduler._request_blocks_can_be_freed")
def blocks_can_be_freed(cfg: SpecConfig, d: Draft, req: int) -> bool:
    """``Scheduler._request_blocks_can_be_freed``: no unprocessed step of ``req``."""
    return not cfg.defer_block_free or d.counters[req].last_sched_seq <= d.processed_step_seq


@models("vllm.v1.core.sched.scheduler.Scheduler.schedule", pr=49675)
def preemption_frees_blocks(cfg: SpecConfig, d: Draft, victim: int) -> bool:
    """The pass-1 victim check (PR #49675): preempt only if the free is immediate.

    A deferred free would not help the allocation that asked for it, so the
    retry stops instead of cascading zero-progress preemptions.
    """
    return blocks_can_be_freed(cfg, d, victim)


def _split_by_hash(cfg: SpecConfig, d: Draft, req: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """``req``'s blocks in free order (tail first), split into unhashed / prefix-cached."""
    table = d.block_tables[req]
    num_hashed = d.counters[req].num_cached_tokens // cfg.block_size
    first = tuple(b for i, b in reversed(list(enumerate(table))) if i >= num_hashed)
    last = tuple(b for i, b in reversed(list(enumerate(table))) if i < num_hashed)
    return first, last


@models("vllm.v1.core.block_pool.BlockPool.free_blocks")
def return_to_pool(d: Draft, evict_first: tuple[int, ...], evict_last: tuple[int, ...]) -> None:
    """``BlockPool.free_blocks``: unhashed blocks to the front, cached ones to the back."""
    d.free_blocks = list(evict_first) + d.free_blocks + list(evict_last)


@models("vllm.v1.core.sched.scheduler.Scheduler._free_request_blocks")
def free_request_blocks(cfg: SpecConfig, d: Draft, req: int) -> None:
    """``Scheduler._free_request_blocks``: free now, or park behind fence Q.

    The request's block table is cleared at once either way
    (``pop_blocks_for_free``); parked blocks belong to nobody until drained.
    """
    first, last = _split_by_hash(cfg, d, req)
    d.block_tables[req] = ()
    now = blocks_can_be_freed(cfg, d, req)
    # KVCacheCoordinator.free: the groups in order (a sliding-window or a Mamba group after attention)
    swa_first, swa_last = swa.pop_for_free(cfg, d, req)
    state_first, state_last = mamba.pop_for_free(cfg, d, req)
    state_first, state_last = swa_first + state_first, swa_last + state_last
    # group by group when freed now (the second group's cached blocks behind attention's);
    # one reversed list when parked (its cached blocks ahead of attention's)
    first, last = state_first + first, (last + state_last if now else state_last + last)
    if not first and not last:
        return
    if now:
        return_to_pool(d, first, last)
    else:
        d.deferred_frees.append(DeferredFree(d.sched_step_seq, first, last))
        d.emit(ev.DEFERRED_FREE)


@models("vllm.v1.core.sched.scheduler.Scheduler.update_from_output")
def step_processed(d: Draft) -> None:
    """A non-empty step's output is being processed: R += 1, then drain.

    The top of ``Scheduler.update_from_output`` when ``defer_block_free``.
    """
    d.processed_step_seq += 1
    drain_deferred_frees(d)


@models("vllm.v1.core.sched.scheduler.Scheduler._drain_deferred_frees")
def drain_deferred_frees(d: Draft) -> None:
    """``Scheduler._drain_deferred_frees``: return parked blocks whose fence passed.

    Pops from the front while the front fence is <= processed_step_seq; stops
    at the first pending fence.
    """
    while d.deferred_frees and d.deferred_frees[0].fence <= d.processed_step_seq:
        entry = d.deferred_frees.pop(0)
        return_to_pool(d, entry.evict_first, entry.evict_last)
        d.emit(ev.DEFERRED_FREE_DRAINED)
