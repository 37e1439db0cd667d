"""Paged key/value cache for the tiny torch engine.

K and V live in two tensors of shape ``[layers, num_blocks, block_size, heads, head_dim]``.
A request owns an ordered *block table* (a list of block ids); token position ``p`` of the
request lives in block ``block_table[p // block_size]`` at offset ``p % block_size``.  The
flat index ``block_id * block_size + offset`` is called a *slot*.

The per-request API (:meth:`PagedKVCache.write`, :meth:`PagedKVCache.gather`) is the
readable one; the model uses the batched slot API (:meth:`PagedKVCache.slots_for`,
:meth:`PagedKVCache.write_slots`, :meth:`PagedKVCache.gather_slots`) so one engine step
issues a handful of tensor ops instead of one per row.  All host-side validation raises
:class:`KVBoundsError`, a ``ValueError`` that is also an ``IndexError``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import torch

__all__ = ["KVBoundsError", "PagedKVCache"]


class KVBoundsError(ValueError, IndexError):
    """A block table cannot hold the positions a row reads or writes (or names a bad block)."""


def _label(row: int | str | None) -> str:
    """Render the row name used in error messages."""
    return "request row ?" if row is None else f"request row {row}"


class PagedKVCache:
    """Block-paged K/V storage for every layer of a model.

    Args:
        num_blocks: number of physical blocks.
        block_size: token positions per block.
        layers: transformer layers.
        heads: attention heads.
        head_dim: per-head width.
        device: where the tensors live (CPU or CUDA, passed in by the caller).
        dtype: element type, float32 by default.
    """

    def __init__(
        self,
        num_blocks: int,
        block_size: int,
        layers: int,
        heads: int,
        head_dim: int,
        device: torch.device | str = "cpu",
        dtype: torch.dtype = torch.float32,
    ) -> None:
        for name, value in (
            ("num_blocks", num_blocks),
            ("block_size", block_size),
            ("layers", layers),
            ("heads", heads),
            ("head_dim", head_dim),
        ):
            if value < 1:
                raise ValueError(f"{name} must be >= 1, got {value}")
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.layers = layers
        self.heads = heads
        self.head_dim = head_dim
        self.device = torch.device(device)
        self.dtype = dtype
        shape = (layers, num_blocks, block_size, heads, head_dim)
        self.k = torch.zeros(shape, device=self.device, dtype=dtype)
        self.v = torch.zeros(shape, device=self.device, dtype=dtype)

    # ------------------------------------------------------------------ slots

    @property
    def num_slots(self) -> int:
        """Total token positions the cache can hold."""
        return self.num_blocks * self.block_size

    def _flat(self, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Views of one layer's K and V as ``[num_slots, heads, head_dim]``."""
        if not 0 <= layer < self.layers:
            raise KVBoundsError(f"layer {layer} out of range [0, {self.layers})")
        shape = (self.num_slots, self.heads, self.head_dim)
        return self.k[layer].view(shape), self.v[layer].view(shape)

    def check_block_table(
        self, block_table: Sequence[int], end_position: int, row: int | str | None = None
    ) -> None:
        """Raise :class:`KVBoundsError` unless ``block_table`` covers ``[0, end_position)``.

        Only the blocks actually needed for those positions are range-checked.
        """
        needed = -(-end_position // self.block_size)
        if needed > len(block_table):
            raise KVBoundsError(
                f"{_label(row)}: block table has {len(block_table)} block(s) "
                f"(capacity {len(block_table) * self.block_size} positions at block_size "
                f"{self.block_size}) but positions up to {end_position - 1} are used"
            )
        for index in range(needed):
            block = block_table[index]
            if not 0 <= block < self.num_blocks:
                raise KVBoundsError(
                    f"{_label(row)}: block table entry {index} is block {block}, "
                    f"outside [0, {self.num_blocks})"
                )

    def slots_for(
        self,
        block_table: Sequence[int],
        start_position: int,
        length: int,
        row: int | str | None = None,
    ) -> list[int]:
        """Slots of positions ``[start_position, start_position + length)`` of one request."""
        if start_position < 0 or length < 0:
            raise KVBoundsError(
                f"{_label(row)}: negative start_position {start_position} or length {length}"
            )
        self.check_block_table(block_table, start_position + length, row)
        bs = self.block_size
        return [
            block_table[p // bs] * bs + p % bs
            for p in range(start_position, start_position + length)
        ]

    # ------------------------------------------------------- batched slot API

    def write_slots(
        self, layer: int, slots: torch.Tensor, k: torch.Tensor, v: torch.Tensor
    ) -> None:
        """Store ``k``/``v`` (``[n, heads, head_dim]``) at the ``n`` slots (int64 tensor on device).

        Slots must be distinct (duplicate writes have no defined winner on CUDA).
        """
        flat_k, flat_v = self._flat(layer)
        flat_k.index_put_((slots,), k.to(self.dtype))
        flat_v.index_put_((slots,), v.to(self.dtype))

    def gather_slots(self, layer: int, slots: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Read K and V at ``slots`` (any shape ``S``), giving ``S + [heads, head_dim]`` copies."""
        flat_k, flat_v = self._flat(layer)
        return flat_k[slots], flat_v[slots]

    # ---------------------------------------------------- per-request API

    def write(
        self,
        layer: int,
        block_table: Sequence[int],
        start_position: int,
        k: torch.Tensor,
        v: torch.Tensor,
        row: int | str | None = None,
    ) -> None:
        """Write a contiguous chunk's K/V (``[n, heads, head_dim]``) from ``start_position``."""
        if k.shape != v.shape or k.dim() != 3:
            raise ValueError(
                f"k and v must both be [n, heads, head_dim], got {k.shape} / {v.shape}"
            )
        slots = self.slots_for(block_table, start_position, k.shape[0], row)
        index = torch.tensor(slots, dtype=torch.int64, device=self.device)
        self.write_slots(layer, index, k, v)

    def gather(
        self,
        layer: int,
        block_table: Sequence[int],
        length: int,
        row: int | str | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """K and V (``[length, heads, head_dim]`` each) of positions ``[0, length)``."""
        slots = self.slots_for(block_table, 0, length, row)
        index = torch.tensor(slots, dtype=torch.int64, device=self.device)
        return self.gather_slots(layer, index)

    # ----------------------------------------------------------- test hooks

    def poison(self, block_ids: Iterable[int]) -> None:
        """Fill the given blocks with NaN in every layer (K and V).

        A request that later reads a poisoned position gets NaN logits, which makes a
        freed-and-reused (or otherwise mis-mapped) block visible in the output.
        """
        ids = list(block_ids)
        for block in ids:
            if not 0 <= block < self.num_blocks:
                raise KVBoundsError(f"poison: block {block} outside [0, {self.num_blocks})")
        if not ids:
            return
        index = torch.tensor(ids, dtype=torch.int64, device=self.device)
        self.k[:, index] = float("nan")
        self.v[:, index] = float("nan")

    def reset(self) -> None:
        """Zero the whole cache."""
        self.k.zero_()
        self.v.zero_()
