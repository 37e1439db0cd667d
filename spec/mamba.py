"""Mamba-style state groups beside full attention in vLLM 0.33.0's hybrid KV cache manager.

A hybrid model has a second KV cache group of ``MambaSpec`` (vllm/v1/kv_cache_interface.py):
its blocks hold a recurrent state, not per-token KV, and they come from the one shared
block pool, after the full-attention group's (``KVCacheCoordinator.allocate_new_blocks``
walks the groups in order).  ``SpecConfig.mamba_cache_mode`` picks ``CacheConfig.mamba_cache_mode``:

* ``"none"``: the Mamba block is wider than any sequence (256 tokens in vLLM), so a request
  holds exactly one state block from its first allocation to its free
  (``MambaManager.get_num_blocks_to_allocate`` / ``allocate_new_blocks`` through the base
  class; ``remove_skipped_blocks`` never reaches block 0).  No prefix caching
  (``KVCacheCoordinatorNoPrefixCache``).
* ``"align"``: Mamba blocks are attention's size; the table is indexed by position, block
  ``i`` holding the state after ``(i + 1) * block_size`` tokens, and only the newest one or
  two are real (``allocate_new_blocks`` pads the skipped positions with the null block,
  ``NULL_BLOCK`` here, and allocates at most one block per call).  ``allocate_slots``
  first frees, on the processed-token basis ``C - F``, every state block below
  ``(C - F - 1) // block_size`` (``remove_skipped_blocks``, ``get_num_skipped_tokens`` =
  ``C - 1``); prefill chunks are cut to block multiples (``Scheduler._mamba_block_aligned_split``)
  so that each chunk's final state lands where a later hit can resume; with prefix caching
  (``HybridKVCacheCoordinator``) a hit needs both the attention blocks and a cached state
  block at the hit's end (``MambaManager.find_longest_cache_hit``), and a longer attention
  hit sets the request's shared-prefix junction, where the split stops.

Modelled without speculative decoding, KV connectors, sliding windows, streaming sessions
and partial (sub-block) hash hits (``spec/config.py`` refuses the rest).
"""
from __future__ import annotations

from asyncspec.spec import events as ev
from asyncspec.spec import request as rq
from asyncspec.spec.cites import models
from asyncspec.spec.config import SpecConfig
from asyncspec.spec.draft import Draft
from asyncspec.spec.state import NULL_BLOCK, BlockHash, EngineState, in_flight_steps, request_name

MANAGER = "vllm.v1.core.single_type_kv_cache_manager.MambaManager"
MAMBA_GROUP = 1
"""The Mamba group's index (``kv_cache_group_id``): its cached states' hashes carry it."""


def mamba_only(cfg: SpecConfig) -> bool:
    """The Mamba properties apply to configs with a Mamba group."""
    return bool(cfg.mamba_cache_mode)


def align(cfg: SpecConfig) -> bool:
    return cfg.mamba_cache_mode == "align"


# ---- the aligned split --------------------------------------------------------------


def _checkpoint_position(num_tokens: int, block_size: int) -> int:
    """``get_mamba_prefill_checkpoint_position`` without EAGLE or hash lookahead: the last block
    boundary strictly below ``num_tokens`` (one token is left for the logits)."""
    return max((num_tokens - 1) // block_size * block_size, 0)


@models("vllm.v1.core.sched.scheduler.Scheduler._mamba_block_aligned_split",
        "vllm.v1.kv_cache_interface.get_mamba_prefill_checkpoint_position")
def aligned_split(cfg: SpecConfig, d: Draft, req: int, start: int, n: int) -> int:
    """``Scheduler._mamba_block_aligned_split`` ("align" only): the tokens of a chunk from
    ``start`` (computed tokens plus this admission's hit) cut so that it ends on a block
    boundary, unless it reaches the prefill end ``max(P, N - 1)``; a block wider than the
    step's prefill cap advances sub-block, then stops at the next boundary; never past the
    last cacheable boundary below ``N``, nor past the shared-prefix junction."""
    if not align(cfg) or n <= 0:
        return n
    b = cfg.block_size
    p, c = d.params[req], d.counters[req]
    num_tokens = rq.num_tokens(p, c)
    prefill_end = max(p.num_prompt_tokens, num_tokens - 1)
    if start >= prefill_end:
        return n
    end = start + n
    if end < prefill_end:
        aligned_end = end // b * b
        if aligned_end > start or b <= _max_prefill(cfg):
            end = aligned_end
    junction = d.mamba_junction[req]
    stops = (
        (start // b + 1) * b if start % b else 0,
        _checkpoint_position(num_tokens, b),
        start + (junction - start) // b * b if start < junction < end else 0,  # block-floored junction
    )
    end = min((s for s in stops if start < s < end), default=end)
    cut = max(end - start, 0)
    if cut < n:
        d.emit(ev.MAMBA_ALIGNED_SPLIT)
    return cut


def _max_prefill(cfg: SpecConfig) -> int:
    """The split's prefill cap: ``max_num_scheduled_tokens`` (the step budget), or the configured
    long-prefill threshold below it (the config's, not this step's adaptive one)."""
    configured = cfg.long_prefill_token_threshold
    return min(cfg.token_budget, configured) if configured > 0 else cfg.token_budget


def check_aligned(cfg: SpecConfig, d: Draft, req: int, start: int, n: int) -> None:
    """Ghost (``mamba_chunks_aligned``), after the split: a chunk of ``n`` from ``start`` that stops
    short of the prefill end ends on a block boundary, or, when the block is wider than the
    prefill cap, inside the block it started in."""
    if not align(cfg) or n <= 0:
        return
    b, end = cfg.block_size, start + n
    p, c = d.params[req], d.counters[req]
    if end >= max(p.num_prompt_tokens, rq.num_tokens(p, c) - 1) or end % b == 0:
        return
    if b > _max_prefill(cfg) and start // b == end // b:
        d.emit(ev.MAMBA_SUB_BLOCK_CHUNK)
        return
    d.mamba_misaligned = True


# ---- allocation and frees -----------------------------------------------------------


@models(f"{MANAGER}.get_num_blocks_to_allocate")
def blocks_needed(cfg: SpecConfig, d: Draft, req: int, num_tokens: int, hit: int = 0) -> int:
    """New state blocks ``req`` needs for ``num_tokens`` (lookahead excluded): one at its first
    allocation ("none"); in "align", one whenever the table does not reach ``cdiv(num_tokens, B)``
    (``hit``: the state block a prefix hit brings)."""
    if not cfg.mamba_cache_mode:
        return 0
    table = d.mamba_tables[req]
    if not align(cfg):
        return 0 if table else 1
    return min(max(cfg.blocks_for(num_tokens) - hit - len(table), 0), 1)


@models(f"{MANAGER}.allocate_new_blocks")
def take(cfg: SpecConfig, d: Draft, req: int, num_tokens: int) -> None:
    """``allocate_new_blocks``, after the attention group's: the front of the free queue; in
    "align" the skipped positions are padded with the null block, the new state block last."""
    if not blocks_needed(cfg, d, req, num_tokens):
        return
    block = d.free_blocks.pop(0)
    d.block_hashes[block] = None  # BlockPool.get_new_blocks evicts a cached block's hash
    table = d.mamba_tables[req]
    if align(cfg):
        table = table + (NULL_BLOCK,) * (cfg.blocks_for(num_tokens) - 1 - len(table))
    d.mamba_tables[req] = table + (block,)


@models(f"{MANAGER}.remove_skipped_blocks", f"{MANAGER}._remove_blocks_in_range",
        f"{MANAGER}.get_num_skipped_tokens", "vllm.v1.core.kv_cache_manager.KVCacheManager.allocate_slots")
def remove_skipped_blocks(cfg: SpecConfig, d: Draft, req: int) -> None:
    """"align": free the state blocks below ``(C - F - 1) // B`` (the processed-token basis: an
    in-flight step still reads the state its chunk starts from), the highest position first;
    each becomes the null block.  Never in "none" (its one block is at position 0)."""
    if not align(cfg):
        return
    c = d.counters[req]
    processed = max(0, c.num_computed_tokens - c.num_in_flight_tokens)
    skipped = max(processed - 1, 0) // cfg.block_size
    table = list(d.mamba_tables[req])
    freed: list[int] = []
    for i in range(min(skipped, len(table)) - 1, -1, -1):
        if table[i] != NULL_BLOCK:
            freed.append(table[i])
            table[i] = NULL_BLOCK
    if not freed:
        return
    d.mamba_tables[req] = tuple(table)
    hashed = [b for b in freed if d.block_hashes[b] is not None and cfg.enable_prefix_caching]
    d.free_blocks = [b for b in freed if b not in hashed] + d.free_blocks + hashed
    d.emit(ev.MAMBA_STATE_FREED)
    if c.num_in_flight_tokens:
        d.emit(ev.MAMBA_STATE_FREED_IN_FLIGHT)


@models("vllm.v1.core.kv_cache_coordinator.KVCacheCoordinator.free",
        "vllm.v1.core.kv_cache_coordinator.KVCacheCoordinator.pop_blocks_for_free", f"{MANAGER}.pop_blocks_for_free")
def pop_for_free(cfg: SpecConfig, d: Draft, req: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The request's state blocks in free order (tail first, nulls skipped), split into
    unhashed / prefix-cached; its table is cleared and its junction forgotten."""
    if not cfg.mamba_cache_mode:
        return (), ()
    blocks = tuple(b for b in reversed(d.mamba_tables[req]) if b != NULL_BLOCK)
    d.mamba_tables[req] = ()
    hashed = cfg.enable_prefix_caching
    return (tuple(b for b in blocks if not hashed or d.block_hashes[b] is None),
            tuple(b for b in blocks if hashed and d.block_hashes[b] is not None))


@models(f"{MANAGER}.cache_blocks", "vllm.v1.core.block_pool.BlockPool.cache_full_blocks")
def record_hashes(cfg: SpecConfig, d: Draft, req: int, old_frontier: int) -> None:
    """``cache_blocks`` of the Mamba group: every real state block the frontier newly passes
    gets its hash (null positions are skipped)."""
    if not (align(cfg) and cfg.enable_prefix_caching):
        return
    table = d.mamba_tables[req]
    for index in range(old_frontier // cfg.block_size, d.counters[req].num_cached_tokens // cfg.block_size):
        if index < len(table) and table[index] != NULL_BLOCK:
            d.block_hashes[table[index]] = BlockHash(req, index, MAMBA_GROUP)


# ---- prefix-cache hits ("align" with prefix caching) -----------------------------------


@models("vllm.v1.core.kv_cache_coordinator.HybridKVCacheCoordinator.find_longest_cache_hit",
        f"{MANAGER}.find_longest_cache_hit", "vllm.v1.core.kv_cache_manager.KVCacheManager.get_computed_blocks")
def cut_hit(cfg: SpecConfig, d: Draft, req: int, attention_hit: tuple[int, ...]) -> tuple[tuple[int, ...], int]:
    """The hybrid hit: the longest prefix of the attention hit whose last block's state is cached
    in the free queue (searched right to left).  Returns (attention blocks kept, the state
    block or -1) and sets the request's shared-prefix junction (the attention hit's length
    when it is longer, else 0)."""
    if not cfg.mamba_cache_mode:
        return attention_hit, NULL_BLOCK
    by_hash = {d.block_hashes[b]: b for b in reversed(d.free_blocks) if d.block_hashes[b] is not None}
    kept, state = 0, NULL_BLOCK
    for k in range(len(attention_hit), 0, -1):
        if BlockHash(req, k - 1, MAMBA_GROUP) in by_hash:
            kept, state = k, by_hash[BlockHash(req, k - 1, MAMBA_GROUP)]
            break
    d.mamba_junction[req] = len(attention_hit) * cfg.block_size if kept < len(attention_hit) else 0
    if kept < len(attention_hit):
        d.emit(ev.MAMBA_HIT_CUT)
    return attention_hit[:kept], state


# ---- the properties -------------------------------------------------------------------


def state_blocks(cfg: SpecConfig, table: tuple[int, ...], start: int, end: int) -> tuple[int, ...]:
    """The state blocks a step over ``[start, end)`` reads and writes: block 0 ("none"); in
    "align" the one holding the state it starts from and the one its end falls in."""
    if not table:
        return ()
    if not align(cfg):
        return (table[0],)
    b = cfg.block_size
    indices = {(end - 1) // b} | ({(start - 1) // b} if start else set())
    return tuple(table[i] if i < len(table) else NULL_BLOCK for i in sorted(indices))


@models(f"{MANAGER}.remove_skipped_blocks", "vllm.v1.core.sched.scheduler.Scheduler._free_request_blocks")
def mamba_states_held(cfg: SpecConfig, s: EngineState) -> str | None:
    """With deferral on, every state block an in-flight step reads or writes is a real block,
    neither free nor held by another request."""
    if not cfg.defer_block_free:
        return None
    free = set(s.free_blocks)
    for step in in_flight_steps(s):
        for e in step.entries:
            for b in e.state_blocks:
                name = request_name(e.req)
                if b == NULL_BLOCK:
                    return f"an in-flight step of {name} reads or writes a Mamba state that is the null block"
                if b in free:
                    return f"Mamba state block {b} of an in-flight step of {name} is free"
                for j in range(len(s.block_tables)):
                    if j != e.req and (b in s.block_tables[j] or b in s.mamba_tables[j]):
                        return f"Mamba state block {b} of an in-flight step of {name} is held by {request_name(j)}"
    return None


@models("vllm.v1.core.sched.scheduler.Scheduler._mamba_block_aligned_split")
def mamba_chunks_aligned(cfg: SpecConfig, s: EngineState) -> str | None:
    """In "align" mode, a prefill chunk that stops short of the prefill end stops on a block
    boundary (or, with a block wider than the budget, inside the block it started in): its
    state is cached as the state after whole blocks."""
    return "a prefill chunk ended inside a Mamba block: its state is cached as a block's" if s.mamba_misaligned else None


def places(cfg: SpecConfig, s: EngineState) -> list[tuple[str, tuple[int, ...]]]:
    """Where ``blocks_conserved`` finds the state blocks: each request's Mamba table, nulls left out."""
    if not cfg.mamba_cache_mode:
        return []
    return [(f"{request_name(i)} (mamba)", tuple(b for b in t if b != NULL_BLOCK)) for i, t in enumerate(s.mamba_tables)]
