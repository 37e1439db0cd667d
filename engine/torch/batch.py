"""One engine step's batch for the paged forward pass: rows, input ids, device index tensors."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from asyncspec.engine.torch.kernels import WindowGroups


@dataclass(frozen=True)
class PagedRow:
    """One request's share of an engine step.

    ``query_token_ids`` is a contiguous chunk (prefill chunk or one decode token), given as
    a python sequence or a 1-D integer tensor (e.g. last step's sampled token, on device).
    """

    query_token_ids: Sequence[int] | torch.Tensor
    start_position: int
    block_table: Sequence[int]


def build_input_ids(
    parts: Sequence[Sequence[int] | torch.Tensor], device: torch.device | str
) -> torch.Tensor:
    """Concatenate python chunks and device tensors into one int64 tensor, without a host sync."""
    dev = torch.device(device)
    tensors: list[torch.Tensor] = []
    pending: list[int] = []
    for part in parts:
        if isinstance(part, torch.Tensor):
            if pending:
                tensors.append(torch.tensor(pending, dtype=torch.int64, device=dev))
                pending = []
            tensors.append(part.reshape(-1).to(device=dev, dtype=torch.int64))
        else:
            pending.extend(int(token) for token in part)
    if pending or not tensors:
        tensors.append(torch.tensor(pending, dtype=torch.int64, device=dev))
    return tensors[0] if len(tensors) == 1 else torch.cat(tensors)


@dataclass(frozen=True)
class PagedBatch:
    """A flattened engine step: all rows' query tokens back to back.

    Attributes:
        input_ids: ``[num_tokens]`` int64 tensor on the model's device.
        query_lens: tokens of each row (``>= 1``); they sum to ``num_tokens``.
        start_positions: ``num_computed_tokens`` of each row before the step.
        block_tables: each row's block ids (covering at least ``start + query_len`` positions).
        request_ids: optional names used in error messages.
    """

    input_ids: torch.Tensor
    query_lens: tuple[int, ...]
    start_positions: tuple[int, ...]
    block_tables: tuple[tuple[int, ...], ...]
    request_ids: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        n = len(self.query_lens)
        if len(self.start_positions) != n or len(self.block_tables) != n:
            raise ValueError("query_lens, start_positions and block_tables differ in length")
        if self.request_ids is not None and len(self.request_ids) != n:
            raise ValueError("request_ids length differs from the number of rows")
        if self.input_ids.dim() != 1 or self.input_ids.dtype != torch.int64:
            raise ValueError("input_ids must be a 1-D int64 tensor")
        if sum(self.query_lens) != self.input_ids.shape[0]:
            raise ValueError(
                f"query_lens sum to {sum(self.query_lens)} but there are "
                f"{self.input_ids.shape[0]} input ids"
            )
        for row, (length, start) in enumerate(zip(self.query_lens, self.start_positions)):
            if length < 1 or start < 0:
                raise ValueError(
                    f"request row {self.row_label(row)}: query_len {length} must be >= 1 and "
                    f"start_position {start} >= 0"
                )

    @classmethod
    def from_rows(
        cls,
        rows: Sequence[PagedRow],
        device: torch.device | str,
        request_ids: Sequence[str] | None = None,
    ) -> PagedBatch:
        """Build a batch from rows whose tokens are python lists and/or device tensors."""
        lens = tuple(
            int(r.query_token_ids.numel())
            if isinstance(r.query_token_ids, torch.Tensor)
            else len(r.query_token_ids)
            for r in rows
        )
        return cls(
            input_ids=build_input_ids([r.query_token_ids for r in rows], device),
            query_lens=lens,
            start_positions=tuple(r.start_position for r in rows),
            block_tables=tuple(tuple(r.block_table) for r in rows),
            request_ids=None if request_ids is None else tuple(request_ids),
        )

    @classmethod
    def from_lists(
        cls,
        token_ids: Sequence[Sequence[int]],
        start_positions: Sequence[int],
        block_tables: Sequence[Sequence[int]],
        device: torch.device | str,
        request_ids: Sequence[str] | None = None,
    ) -> PagedBatch:
        """Build a batch from plain python lists (one entry per row)."""
        rows = [PagedRow(t, s, b) for t, s, b in zip(token_ids, start_positions, block_tables)]
        if not len(rows) == len(token_ids) == len(start_positions) == len(block_tables):
            raise ValueError("token_ids, start_positions and block_tables differ in length")
        return cls.from_rows(rows, device, request_ids)

    @property
    def num_rows(self) -> int:
        """Number of requests in the step."""
        return len(self.query_lens)

    @property
    def num_tokens(self) -> int:
        """Total query tokens in the step."""
        return int(self.input_ids.shape[0])

    def row_label(self, row: int) -> str:
        """Name of a row for error messages (index, plus request id when known)."""
        if self.request_ids is None:
            return str(row)
        return f"{row} ({self.request_ids[row]})"


@dataclass(frozen=True)
class StepIndex:
    """Device index tensors for one paged step (built on the host, shipped once)."""

    positions: torch.Tensor  # [T] absolute position of each query token
    row_of_token: torch.Tensor  # [T]
    write_slots: torch.Tensor  # [T]
    read_slots: torch.Tensor  # [R, C] slots of each row's context, padded with slot 0
    read_valid: torch.Tensor  # [R, C, 1, 1] bool, False on padding
    last_token: torch.Tensor  # [R] flat index of each row's last query token
    groups: WindowGroups  # attention windows of the query tokens
