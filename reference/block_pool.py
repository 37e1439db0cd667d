"""The KV block pool: real block ids, a doubly-linked free queue, a prefix cache.

Modelled on ``vllm/v1/core/block_pool.py`` and ``kv_cache_utils.py`` (vLLM
0.33.0).  Every operation costs O(blocks it touches):

* ``get_new_blocks(n)`` pops ``n`` blocks from the front of the free queue and
  evicts the hash of any that was prefix-cached (LRU eviction: cached blocks
  wait at the back);
* ``free_blocks(blocks)`` drops one reference per block; a block whose count
  reaches 0 returns to the queue: unhashed blocks to the *front* (reused
  first), hashed ones to the *back*, each group in the order given (callers
  pass a request's blocks tail first);
* ``touch(blocks)`` takes a reference on prefix-cache hits, removing a free
  block from the middle of the queue in O(1);
* ``cache_full_blocks`` records ``hash -> block`` for full blocks of known
  tokens.  Several blocks may carry the same hash (a request that recomputed a
  prefix it had cached); ``get_cached_block`` returns the free one nearest the
  front of the queue.

The null block of vLLM is not modelled: ids run from 0 to ``num_blocks - 1``.

Example:
    >>> pool = BlockPool(num_blocks=4, enable_caching=True)
    >>> [b.block_id for b in pool.get_new_blocks(2)], pool.free_block_ids()
    ([0, 1], [2, 3])
    >>> pool.cache_full_blocks([pool.blocks[0]], [1234])
    >>> pool.free_blocks([pool.blocks[1], pool.blocks[0]])
    >>> pool.free_block_ids(), pool.get_cached_block(1234).block_id
    ([1, 2, 3, 0], 0)
"""
from __future__ import annotations

from collections.abc import Iterable, Iterator


class KVCacheBlock:
    """One KV block: its id, reference count, prefix-cache hash and free-queue links."""

    __slots__ = ("block_id", "ref_cnt", "block_hash", "prev_free_block", "next_free_block",
                 "free_stamp")

    def __init__(self, block_id: int) -> None:
        self.block_id = block_id
        self.ref_cnt = 0
        self.free_stamp = 0  # increases front to back along the free queue
        self.block_hash: int | None = None
        self.prev_free_block: KVCacheBlock | None = None
        self.next_free_block: KVCacheBlock | None = None

    def __repr__(self) -> str:
        return f"KVCacheBlock({self.block_id}, ref={self.ref_cnt}, hashed={self.block_hash is not None})"


class FreeKVCacheBlockQueue:
    """``FreeKVCacheBlockQueue``: a doubly-linked list with sentinel ends.

    >>> q = FreeKVCacheBlockQueue([KVCacheBlock(i) for i in range(3)])
    >>> [b.block_id for b in q.popleft_n(1)], list(q.block_ids())
    ([0], [1, 2])
    """

    def __init__(self, blocks: list[KVCacheBlock]) -> None:
        self.num_free_blocks = 0
        self._front_stamp = 0  # stamps make "nearer the front" an O(1) comparison
        self._back_stamp = 0
        self._head = KVCacheBlock(-1)
        self._tail = KVCacheBlock(-2)
        self._head.next_free_block = self._tail
        self._tail.prev_free_block = self._head
        self.append_n(blocks)

    def _link_after(self, anchor: KVCacheBlock, block: KVCacheBlock) -> None:
        nxt = anchor.next_free_block
        assert nxt is not None
        block.prev_free_block, block.next_free_block = anchor, nxt
        anchor.next_free_block = block
        nxt.prev_free_block = block
        self.num_free_blocks += 1

    def remove(self, block: KVCacheBlock) -> None:
        """Unlink ``block`` (it must be in the queue); O(1)."""
        prev, nxt = block.prev_free_block, block.next_free_block
        if prev is None or nxt is None:
            raise AssertionError(f"block {block.block_id} is not in the free queue")
        prev.next_free_block = nxt
        nxt.prev_free_block = prev
        block.prev_free_block = block.next_free_block = None
        self.num_free_blocks -= 1

    def popleft_n(self, n: int) -> list[KVCacheBlock]:
        """Remove and return the first ``n`` blocks (the caller checked there are enough)."""
        out: list[KVCacheBlock] = []
        for _ in range(n):
            block = self._head.next_free_block
            assert block is not None and block is not self._tail, "free queue exhausted"
            self.remove(block)
            out.append(block)
        return out

    def append_n(self, blocks: Iterable[KVCacheBlock]) -> None:
        """Append ``blocks`` at the back, in order."""
        for block in blocks:
            prev = self._tail.prev_free_block
            assert prev is not None
            self._link_after(prev, block)
            self._back_stamp += 1
            block.free_stamp = self._back_stamp

    def appendleft_n(self, blocks: Iterable[KVCacheBlock]) -> None:
        """Put ``blocks`` at the front, keeping their order (the first becomes the head)."""
        blocks = list(blocks)
        anchor = self._head
        for block in blocks:
            self._link_after(anchor, block)
            anchor = block
        for block in reversed(blocks):
            self._front_stamp -= 1
            block.free_stamp = self._front_stamp

    def __iter__(self) -> Iterator[KVCacheBlock]:
        block = self._head.next_free_block
        while block is not None and block is not self._tail:
            yield block
            block = block.next_free_block

    def block_ids(self) -> Iterator[int]:
        """Ids front to back (O(free blocks): for observation, not for scheduling)."""
        return (b.block_id for b in self)


class BlockPool:
    """``BlockPool``: the blocks, the free queue and the prefix-cache index."""

    def __init__(self, num_blocks: int, enable_caching: bool) -> None:
        if num_blocks < 1:
            raise ValueError("num_blocks must be >= 1")
        self.enable_caching = enable_caching
        self.blocks = [KVCacheBlock(i) for i in range(num_blocks)]
        self.free_block_queue = FreeKVCacheBlockQueue(self.blocks)
        self.cached_block_hash_to_block: dict[int, dict[int, KVCacheBlock]] = {}
        self.num_evictions = 0  # stats: cached blocks whose hash was evicted on reuse

    def get_num_free_blocks(self) -> int:
        """Blocks in the free queue (cached ones included: they are evictable)."""
        return self.free_block_queue.num_free_blocks

    def free_block_ids(self) -> list[int]:
        """The free queue, front first (observation only)."""
        return list(self.free_block_queue.block_ids())

    def get_new_blocks(self, num_blocks: int) -> list[KVCacheBlock]:
        """Pop ``num_blocks`` from the front, evicting their hashes; each gets ref_cnt 1."""
        blocks = self.free_block_queue.popleft_n(num_blocks)
        for block in blocks:
            self._maybe_evict_cached_block(block)
            block.ref_cnt = 1
        return blocks

    def _maybe_evict_cached_block(self, block: KVCacheBlock) -> None:
        if block.block_hash is None:
            return
        same = self.cached_block_hash_to_block[block.block_hash]
        del same[block.block_id]
        if not same:
            del self.cached_block_hash_to_block[block.block_hash]
        block.block_hash = None
        self.num_evictions += 1

    def get_cached_block(self, block_hash: int) -> KVCacheBlock | None:
        """A *free* cached block with this hash (the one nearest the front), or None.

        Blocks with this hash that are still referenced (parked behind a step
        fence) are not hits, as in the spec (``spec/blocks.py``,
        ``longest_cache_hit``); vLLM would also return those.
        """
        same = self.cached_block_hash_to_block.get(block_hash)
        if not same:
            return None
        free = [b for b in same.values() if b.ref_cnt == 0]
        return min(free, key=lambda b: b.free_stamp) if free else None

    def touch(self, blocks: Iterable[KVCacheBlock]) -> None:
        """Take a reference on each block; a free one leaves the free queue."""
        for block in blocks:
            if block.ref_cnt == 0:
                self.free_block_queue.remove(block)
            block.ref_cnt += 1

    def cache_full_blocks(self, blocks: list[KVCacheBlock], block_hashes: list[int]) -> None:
        """Record each block under its hash (``blocks[i]`` gets ``block_hashes[i]``)."""
        if not self.enable_caching:
            return
        for block, block_hash in zip(blocks, block_hashes):
            assert block.block_hash is None, f"block {block.block_id} is cached already"
            block.block_hash = block_hash
            self.cached_block_hash_to_block.setdefault(block_hash, {})[block.block_id] = block

    def free_blocks(self, ordered_blocks: Iterable[KVCacheBlock]) -> None:
        """Drop a reference per block; freed unhashed blocks to the front, hashed to the back."""
        front: list[KVCacheBlock] = []
        back: list[KVCacheBlock] = []
        for block in ordered_blocks:
            block.ref_cnt -= 1
            assert block.ref_cnt >= 0, f"block {block.block_id} freed twice"
            if block.ref_cnt == 0:
                (back if block.block_hash is not None else front).append(block)
        self.free_block_queue.appendleft_n(front)
        self.free_block_queue.append_n(back)

    def reset_prefix_cache(self) -> bool:
        """Forget every hash, if no block is in use (vLLM refuses otherwise)."""
        if self.get_num_free_blocks() != len(self.blocks):
            return False
        for block in self.blocks:
            block.block_hash = None
        self.cached_block_hash_to_block.clear()
        return True
