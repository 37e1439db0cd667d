"""Prefix caching with a sliding-window group beside full attention (vLLM 0.33.0's hybrid coordinator).

With prefix caching on and a ``SlidingWindowSpec`` group after the full-attention group, vLLM
builds a ``HybridKVCacheCoordinator`` (vllm/v1/core/kv_cache_coordinator.py).  Its blocks are
modelled here:

* **caching**: the window group caches its full blocks at the same frontier as full attention
  (``KVCacheCoordinator.cache_blocks`` walks every group; the null positions its window has
  passed are skipped, ``BlockPool.cache_full_blocks``).  The driver's ``KVCacheConfig`` leaves
  ``prefix_cache_retention_interval`` unset (dense), and both groups have one block size, so
  ``SlidingWindowManager.reachable_block_mask`` keeps every block once a hit needs one
  (``W >= 2``); with ``W = 1`` a hit needs no block and the mask keeps none.
* **the hit**: full attention's left-to-right hit bounds the window group's right-to-left scan
  for ``cdiv(W - 1, B)`` contiguous cached blocks (``SlidingWindowManager.find_longest_cache_hit``);
  the hit ends where that run ends, or, with no such run, is the run of cached blocks from block
  0.  One full and one window group is the coordinator's "simple hybrid": one round, then full
  attention's blocks are cut to the window group's length.
* **frees**: the window group's blocks go back after full attention's, tail first, a cached one
  to the back of the free queue (``BlockPool.free_blocks``).

Hashes are ``BlockHash(req, index, SWA_GROUP)``: vLLM keys its map by (hash, group id).
Modelled without speculative decoding, KV connectors and Mamba groups (``spec/config.py``).
"""
from __future__ import annotations

from asyncspec.spec.cites import models
from asyncspec.spec.config import SpecConfig
from asyncspec.spec.draft import Draft
from asyncspec.spec.state import NULL_BLOCK, BlockHash, EngineState, request_name

MANAGER = "vllm.v1.core.single_type_kv_cache_manager.SlidingWindowManager"
COORDINATOR = "vllm.v1.core.kv_cache_coordinator.HybridKVCacheCoordinator"
SWA_GROUP = 1
"""The sliding-window group's index (``kv_cache_group_id``): its cached blocks' hashes carry it."""


def caches(cfg: SpecConfig) -> bool:
    """Whether the window group takes part in prefix caching here."""
    return bool(cfg.sliding_window) and cfg.enable_prefix_caching


@models(f"{MANAGER}._contiguous_blocks_for_hit")
def contiguous_blocks_for_hit(cfg: SpecConfig) -> int:
    """Cached blocks in a row a hit needs: enough to hold the window of the first token after it
    (``cdiv(W - 1, B)``; no EAGLE block here)."""
    return cfg.blocks_for(cfg.sliding_window - 1)


@models(f"{MANAGER}.reachable_block_mask", "vllm.v1.core.single_type_kv_cache_manager.SingleTypeKVCacheManager.cache_blocks",
        "vllm.v1.core.block_pool.BlockPool.cache_full_blocks")
def record_hashes(cfg: SpecConfig, d: Draft, req: int, old_frontier: int) -> None:
    """``cache_blocks`` of the window group: each real block the frontier newly passes gets its
    hash (null positions skipped); none when a hit needs no block (the mask keeps none)."""
    if not caches(cfg) or contiguous_blocks_for_hit(cfg) == 0:
        return
    table = d.swa_block_tables[req]
    for index in range(old_frontier // cfg.block_size, d.counters[req].num_cached_tokens // cfg.block_size):
        if index < len(table) and table[index] != NULL_BLOCK:
            d.block_hashes[table[index]] = BlockHash(req, index, SWA_GROUP)


@models(f"{MANAGER}.find_longest_cache_hit")
def window_hit(cfg: SpecConfig, d: Draft, req: int, max_blocks: int) -> tuple[int, ...]:
    """``SlidingWindowManager.find_longest_cache_hit`` over the first ``max_blocks`` blocks: from
    the right, the first run of ``contiguous_blocks_for_hit`` cached blocks; the hit is the
    positions up to the run's end, those before the run null.  Without such a run, the cached
    blocks from block 0 (a shorter run is still a hit when nothing precedes it)."""
    by_hash = {d.block_hashes[b]: b for b in reversed(d.free_blocks) if d.block_hashes[b] is not None}
    need = contiguous_blocks_for_hit(cfg)
    found: dict[int, int] = {}
    run = 0
    for i in range(max_blocks - 1, -1, -1):
        block = by_hash.get(BlockHash(req, i, SWA_GROUP))
        if block is None:
            run = 0
            continue
        found[i] = block
        run += 1
        if run >= need:
            return (NULL_BLOCK,) * i + tuple(found[j] for j in range(i, i + run))
    return tuple(found[j] for j in range(run))


@models(f"{COORDINATOR}.find_longest_cache_hit", f"{COORDINATOR}.verify_and_split_kv_cache_groups",
        "vllm.v1.core.kv_cache_manager.KVCacheManager.get_computed_blocks")
def cut_hit(cfg: SpecConfig, d: Draft, req: int, attention_hit: tuple[int, ...]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The hybrid hit: full attention first (its hit, ``attention_hit``, bounds the window group's),
    then the window group's; one round (the "simple hybrid"), full attention's blocks cut to the
    window group's length.  Returns (full attention's blocks, the window group's table prefix)."""
    if not caches(cfg) or not attention_hit:
        return attention_hit, ()
    window = window_hit(cfg, d, req, len(attention_hit))
    return attention_hit[:len(window)], window


@models("vllm.v1.core.kv_cache_coordinator.KVCacheCoordinator.free",
        "vllm.v1.core.single_type_kv_cache_manager.SingleTypeKVCacheManager.pop_blocks_for_free",
        "vllm.v1.core.block_pool.BlockPool.free_blocks")
def pop_for_free(cfg: SpecConfig, d: Draft, req: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The window group's blocks in free order (tail first, the null head skipped), split into
    unhashed / prefix-cached; its table is cleared."""
    if not cfg.sliding_window:
        return (), ()
    blocks = tuple(b for b in reversed(d.swa_block_tables[req]) if b != NULL_BLOCK)
    d.swa_block_tables[req] = ()
    return (tuple(b for b in blocks if d.block_hashes[b] is None),
            tuple(b for b in blocks if d.block_hashes[b] is not None))


@models(f"{MANAGER}.find_longest_cache_hit", f"{MANAGER}.get_num_skipped_tokens",
        "vllm.v1.core.single_type_kv_cache_manager.SingleTypeKVCacheManager.add_local_computed_blocks")
def window_kv_held(cfg: SpecConfig, s: EngineState) -> str | None:
    """The newest step's first token of each request attends to the window before it (tokens
    ``start - W + 1`` to ``start - 1``): every block of it is a real block of the request's window
    table (a hit brings the whole window, a free stays behind it)."""
    if not s.batch_queue:
        return None
    for e in s.batch_queue[-1].entries:
        table = s.swa_block_tables[e.req]
        first = max(0, e.start_position - cfg.sliding_window + 1) // cfg.block_size
        last = min(cfg.blocks_for(e.start_position), len(table))
        if any(table[j] == NULL_BLOCK for j in range(first, last)):
            return (f"{request_name(e.req)}'s step from position {e.start_position} attends to a block its "
                    f"window table no longer holds ({table})")
    return None
