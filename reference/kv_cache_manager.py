"""Per-request block tables over the pool: ``KVCacheManager`` of vLLM 0.33.0.

``allocate_slots`` gives a request slots for its next tokens (taking
prefix-cache hits on admission) and caches the full blocks of known tokens
at allocation time; ``cache_blocks`` is the output-time caching of
``update_from_output``; ``free`` / ``pop_blocks_for_free`` release a
request's blocks tail first (immediately, or for the scheduler to park behind
a step fence).  A request's cached-prefix frontier is kept on the request
(``num_cached_tokens_frontier``) so that it survives the request's end, as
the spec's counter does.

Example:
    >>> from asyncspec.reference.reference_request import Request
    >>> m = KVCacheManager(block_size=2, num_blocks=4, enable_caching=True)
    >>> r = Request("r0", [5, 6, 7], max_tokens=2, block_size=2)
    >>> [b.block_id for b in m.allocate_slots(r, 3)], r.num_cached_tokens_frontier
    ([0, 1], 2)
    >>> m.free(r); m.block_pool.free_block_ids()
    [1, 2, 3, 0]
"""
from __future__ import annotations

from asyncspec.reference.block_pool import BlockPool, KVCacheBlock
from asyncspec.reference.reference_request import Request


def cdiv(a: int, b: int) -> int:
    """Ceiling division."""
    return -(-a // b)


class KVCacheManager:
    """Block tables of the live requests, over one ``BlockPool``."""

    def __init__(self, block_size: int, num_blocks: int, enable_caching: bool) -> None:
        self.block_size = block_size
        self.enable_caching = enable_caching
        self.block_pool = BlockPool(num_blocks, enable_caching)
        self.req_to_blocks: dict[str, list[KVCacheBlock]] = {}
        self.num_prefix_hit_tokens = 0  # stats: tokens admitted from the prefix cache

    def get_blocks(self, request: Request) -> list[KVCacheBlock]:
        """The request's block table (empty if it holds none)."""
        return self.req_to_blocks.get(request.request_id, [])

    def get_computed_blocks(self, request: Request) -> tuple[list[KVCacheBlock], int]:
        """``get_computed_blocks``: the longest cached prefix of ``request``'s own blocks.

        Capped at ``num_tokens - 1`` (whole blocks only), so that at least one
        token is computed and sampled.  Returns the blocks and the hit tokens.
        """
        if not self.enable_caching:
            return [], 0
        max_blocks = (request.num_tokens - 1) // self.block_size
        hits: list[KVCacheBlock] = []
        for block_hash in request.block_hashes[:max_blocks]:
            block = self.block_pool.get_cached_block(block_hash)
            if block is None:
                break
            hits.append(block)
        return hits, len(hits) * self.block_size

    def allocate_slots(
        self,
        request: Request,
        num_new_tokens: int,
        new_computed_blocks: list[KVCacheBlock] | None = None,
        full_sequence_must_fit: bool = False,
    ) -> list[KVCacheBlock] | None:
        """Slots for ``num_new_tokens`` after the computed prefix; None if the pool is short.

        ``new_computed_blocks`` are prefix-cache hits being admitted (the
        request's ``num_computed_tokens`` is still 0 then).  With
        ``full_sequence_must_fit`` the whole known sequence must fit
        (``scheduler_reserve_full_isl``).  Nothing changes on failure.
        """
        hits = new_computed_blocks or []
        table = self.req_to_blocks.setdefault(request.request_id, [])
        held = len(table) + len(hits)
        computed = request.num_computed_tokens + len(hits) * self.block_size
        evictable_hits = sum(1 for b in hits if b.ref_cnt == 0)
        free = self.block_pool.get_num_free_blocks()
        need = max(cdiv(computed + num_new_tokens, self.block_size) - held, 0)
        if full_sequence_must_fit:
            need_full = max(cdiv(request.num_tokens, self.block_size) - held, 0)
            if need_full + evictable_hits > free:
                return None
        if need + evictable_hits > free:
            return None
        if hits:
            self.block_pool.touch(hits)
            table.extend(hits)
            request.num_cached_tokens_frontier = len(hits) * self.block_size
            self.num_prefix_hit_tokens += len(hits) * self.block_size
        new_blocks = self.block_pool.get_new_blocks(need)
        table.extend(new_blocks)
        self.cache_blocks(request, computed + num_new_tokens)
        return new_blocks

    def cache_blocks(self, request: Request, num_tokens: int) -> None:
        """``cache_blocks``: hash the full blocks of known tokens below ``num_tokens``.

        The frontier never moves backwards.
        """
        if not self.enable_caching:
            return
        full = min(num_tokens, request.num_tokens) // self.block_size
        cached = request.num_cached_tokens_frontier // self.block_size
        if full <= cached:
            return
        table = self.req_to_blocks[request.request_id]
        self.block_pool.cache_full_blocks(table[cached:full], request.block_hashes[cached:full])
        request.num_cached_tokens_frontier = full * self.block_size

    def pop_blocks_for_free(self, request: Request) -> list[KVCacheBlock]:
        """Clear the request's table; return its blocks tail first, for a later free."""
        table = self.req_to_blocks.pop(request.request_id, [])
        table.reverse()
        return table

    def free(self, request: Request) -> None:
        """``KVCacheManager.free``: return the request's blocks to the pool now."""
        self.block_pool.free_blocks(self.pop_blocks_for_free(request))
