"""A tiny, deterministic decoder-only transformer for the torch engine.

The model is small enough to run on CPU in tests and large enough to exercise a real
paged-KV engine step: learned absolute positions, pre-RMSNorm blocks, multi-head causal
attention, a ReLU MLP and an untied LM head.  Weights come from ``TinyConfig.seed`` through
a CPU ``torch.Generator`` (identical on every device; nothing is downloaded).

Two entry points:

* :meth:`TinyTransformer.forward_dense` recomputes one whole sequence (the oracle);
* :meth:`TinyTransformer.forward_paged` runs one engine step over a flattened batch of
  rows (prefill chunks and decode tokens), writing K/V into a :class:`PagedKVCache`
  and reading every attended position back from it.

Batch invariance.  On CPU the logits of a position are bit-identical whatever batch,
chunk schedule or entry point computed them.  The kernels are chosen for that:

* every matrix product is an explicit broadcast-multiply followed by a reduction over
  the innermost, contiguous axis, so each output element is reduced in an order that
  depends only on the reduced length (never on how many rows share the call);
* a query at position ``p`` always attends over a window of
  :func:`attention_window` ``(p)`` keys (a power of two; keys past ``p`` are zero and
  masked to ``-inf``), so its softmax and value sums have a length fixed by ``p`` alone;
* ``exp`` is evaluated in float64 and rounded to float32, which hides the last-ulp
  differences between the vectorised and scalar-tail code paths of the CPU kernels;
* the remaining ops (add, mul, div, sqrt, max, relu, gathers) are exactly rounded.

On CUDA the reduction kernels may pick shape-dependent strategies, so bit identity is not
promised there; greedy tokens still agree with the dense oracle in practice (see tests).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import torch

from asyncspec.engine.paged_kv import KVBoundsError, PagedKVCache

__all__ = [
    "MIN_WINDOW",
    "LayerWeights",
    "ModelWeights",
    "PagedBatch",
    "PagedRow",
    "TinyConfig",
    "TinyTransformer",
    "attention_window",
    "build_input_ids",
    "deterministic_mode",
    "find_eos_prompts",
    "greedy",
    "init_weights",
    "invariant_linear",
    "rms_norm",
]

#: Tokens processed per slice in linear layers and attention.  Slicing the outer (token)
#: axis bounds memory and never changes any output bit.
TOKEN_SLICE = 128


# --------------------------------------------------------------------------- config


@dataclass(frozen=True)
class TinyConfig:
    """Shape and seed of the tiny model."""

    vocab_size: int = 64
    hidden: int = 32
    layers: int = 2
    heads: int = 2
    max_position: int = 512
    eos_token_id: int = 1
    seed: int = 0
    mlp_hidden: int = 128
    norm_eps: float = 1e-5
    #: Added to the EOS logit.  With the default seed about half of short random prompts
    #: end within 30 greedy tokens, so engine fuzzing sees EOS stops and length stops.
    eos_logit_bias: float = -1.0

    def __post_init__(self) -> None:
        if self.hidden % self.heads != 0:
            raise ValueError(f"hidden {self.hidden} not divisible by heads {self.heads}")
        if not 0 <= self.eos_token_id < self.vocab_size:
            raise ValueError(f"eos_token_id {self.eos_token_id} outside the vocabulary")
        if min(self.vocab_size, self.hidden, self.layers, self.max_position, self.mlp_hidden) < 1:
            raise ValueError("all sizes must be >= 1")

    @property
    def head_dim(self) -> int:
        """Width of one attention head."""
        return self.hidden // self.heads


# -------------------------------------------------------------------------- weights


@dataclass(frozen=True)
class LayerWeights:
    """Parameters of one pre-norm transformer block (linear weights are ``[out, in]``)."""

    attn_norm: torch.Tensor  # [hidden]
    wqkv: torch.Tensor  # [3 * hidden, hidden]
    wo: torch.Tensor  # [hidden, hidden]
    mlp_norm: torch.Tensor  # [hidden]
    w_up: torch.Tensor  # [mlp_hidden, hidden]
    w_down: torch.Tensor  # [hidden, mlp_hidden]

    def to(self, device: torch.device, dtype: torch.dtype) -> LayerWeights:
        """Copy onto ``device`` as ``dtype``."""
        return LayerWeights(
            *(t.to(device=device, dtype=dtype).contiguous() for t in self._tensors())
        )

    def _tensors(self) -> tuple[torch.Tensor, ...]:
        return (self.attn_norm, self.wqkv, self.wo, self.mlp_norm, self.w_up, self.w_down)


@dataclass(frozen=True)
class ModelWeights:
    """All parameters of :class:`TinyTransformer`."""

    embed: torch.Tensor  # [vocab, hidden]
    pos: torch.Tensor  # [max_position, hidden]
    layers: tuple[LayerWeights, ...]
    final_norm: torch.Tensor  # [hidden]
    lm_head: torch.Tensor  # [vocab, hidden]

    def to(self, device: torch.device, dtype: torch.dtype) -> ModelWeights:
        """Copy onto ``device`` as ``dtype``."""

        def move(t: torch.Tensor) -> torch.Tensor:
            return t.to(device=device, dtype=dtype).contiguous()

        return ModelWeights(
            embed=move(self.embed),
            pos=move(self.pos),
            layers=tuple(layer.to(device, dtype) for layer in self.layers),
            final_norm=move(self.final_norm),
            lm_head=move(self.lm_head),
        )


def _normal(gen: torch.Generator, shape: tuple[int, ...], std: float) -> torch.Tensor:
    """Float32 CPU normal sample with standard deviation ``std``."""
    return torch.randn(shape, generator=gen, dtype=torch.float32) * std


def _norm_weight(gen: torch.Generator, size: int) -> torch.Tensor:
    """Norm gains near one (slightly perturbed so they are not a no-op)."""
    return 1.0 + _normal(gen, (size,), 0.1)


def init_weights(config: TinyConfig) -> ModelWeights:
    """Deterministic float32 CPU weights drawn from ``config.seed``.

    Scales keep activations O(1) so the logits have clear margins (greedy decisions are
    far from ties, which keeps CPU and CUDA agreeing token for token).
    """
    gen = torch.Generator(device="cpu")
    gen.manual_seed(config.seed)
    h, m = config.hidden, config.mlp_hidden
    embed = _normal(gen, (config.vocab_size, h), 1.0)
    pos = _normal(gen, (config.max_position, h), 0.5)
    layers = tuple(
        LayerWeights(
            attn_norm=_norm_weight(gen, h),
            wqkv=_normal(gen, (3 * h, h), 1.0 / math.sqrt(h)),
            wo=_normal(gen, (h, h), 1.0 / math.sqrt(h)),
            mlp_norm=_norm_weight(gen, h),
            w_up=_normal(gen, (m, h), 1.0 / math.sqrt(h)),
            w_down=_normal(gen, (h, m), 1.0 / math.sqrt(m)),
        )
        for _ in range(config.layers)
    )
    final_norm = _norm_weight(gen, h)
    lm_head = _normal(gen, (config.vocab_size, h), 2.0 / math.sqrt(h))
    return ModelWeights(embed, pos, layers, final_norm, lm_head)


# ------------------------------------------------------------ invariant kernels


def invariant_linear(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """``x @ weight.T`` for ``x [M, K]``, ``weight [N, K]``.

    Each output is an innermost-axis sum over ``K``, reduced in an order that ignores ``M``.
    """
    m, n = x.shape[0], weight.shape[0]
    if m == 0:
        return x.new_zeros((0, n))
    parts = [
        (x[i : i + TOKEN_SLICE, None, :] * weight[None, :, :]).sum(dim=-1)
        for i in range(0, m, TOKEN_SLICE)
    ]
    return parts[0] if len(parts) == 1 else torch.cat(parts)


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """RMSNorm over the last axis using only exactly rounded ops (sum, div, sqrt)."""
    mean_square = (x * x).sum(dim=-1, keepdim=True) / x.shape[-1]
    return x / torch.sqrt(mean_square + eps) * weight


def _softmax_last(scores: torch.Tensor) -> torch.Tensor:
    """Softmax over the last axis; ``exp`` in float64 so every code path rounds alike."""
    shifted = scores - scores.amax(dim=-1, keepdim=True)
    weights = torch.exp(shifted.to(torch.float64)).to(scores.dtype)
    return weights / weights.sum(dim=-1, keepdim=True)


def greedy(logits: torch.Tensor) -> torch.Tensor:
    """Greedy sampling: index of the largest logit per row (first one on ties; NaN wins)."""
    return torch.argmax(logits, dim=-1)


#: Smallest attention window (see :func:`attention_window`).
MIN_WINDOW = 16


def attention_window(position: int, max_position: int) -> int:
    """Number of keys a query at ``position`` reduces over.

    The next power of two above ``position`` (at least :data:`MIN_WINDOW`, at most
    ``max_position``).  It depends on the position alone, so the softmax and value sums of
    a query have the same length in every batch, chunk schedule and entry point; keys past
    the query are zero and masked.  Buckets keep short contexts cheap.
    """
    window = MIN_WINDOW
    while window <= position:
        window *= 2
    return min(window, max_position)


#: Token groups sharing an attention window: ``(window, token indices or None for all)``.
WindowGroups = list[tuple[int, torch.Tensor | None]]


def _window_groups(
    positions: Sequence[int], max_position: int, device: torch.device
) -> WindowGroups:
    """Group query tokens (by flat index) by their attention window."""
    by_window: dict[int, list[int]] = {}
    for index, position in enumerate(positions):
        by_window.setdefault(attention_window(position, max_position), []).append(index)
    if len(by_window) == 1:
        return [(next(iter(by_window)), None)]
    return [
        (window, torch.tensor(tokens, dtype=torch.int64, device=device))
        for window, tokens in sorted(by_window.items())
    ]


def _attend_window(
    q: torch.Tensor,
    keys: torch.Tensor,
    values_t: torch.Tensor,
    row_of_token: torch.Tensor,
    positions: torch.Tensor,
) -> torch.Tensor:
    """Causal attention of queries ``[t, H, D]`` sharing one window ``W = keys.shape[2]``.

    ``keys`` is ``[R, H, W, D]`` and ``values_t`` ``[R, H, D, W]`` (zero past each row's
    context); ``row_of_token`` picks each query's row; a query sees keys ``<= position``.
    """
    key_pos = torch.arange(keys.shape[2], device=q.device)
    outs: list[torch.Tensor] = []
    for i in range(0, q.shape[0], TOKEN_SLICE):
        rows = row_of_token[i : i + TOKEN_SLICE]
        k = keys[rows].contiguous()  # [t, H, W, D]
        scores = (q[i : i + TOKEN_SLICE, :, None, :] * k).sum(dim=-1)  # [t, H, W]
        visible = key_pos[None, None, :] <= positions[i : i + TOKEN_SLICE, None, None]
        probs = _softmax_last(torch.where(visible, scores, float("-inf")))
        v = values_t[rows].contiguous()  # [t, H, D, W]
        outs.append((probs[:, :, None, :] * v).sum(dim=-1))  # [t, H, D]
    return outs[0] if len(outs) == 1 else torch.cat(outs)


def _attend(
    q: torch.Tensor,
    keys: torch.Tensor,
    values_t: torch.Tensor,
    row_of_token: torch.Tensor,
    positions: torch.Tensor,
    groups: WindowGroups,
) -> torch.Tensor:
    """Causal attention of every query over its own row's keys, window group by group.

    Args:
        q: ``[T, H, D]`` scaled queries.
        keys: ``[R, H, W_max, D]`` keys per row, zero beyond the row's context.
        values_t: ``[R, H, D, W_max]`` values per row, transposed so the sum is innermost.
        row_of_token: ``[T]`` row index of each query.
        positions: ``[T]`` absolute position of each query.
        groups: the queries' attention windows (from :func:`_window_groups`).

    Returns:
        ``[T, H * D]`` attention outputs.
    """
    t_total, heads, dim = q.shape
    out: torch.Tensor | None = None
    for window, tokens in groups:
        k_w, v_w = keys[:, :, :window], values_t[:, :, :, :window]
        if tokens is None:
            out = _attend_window(q, k_w, v_w, row_of_token, positions)
            break
        part = _attend_window(q[tokens], k_w, v_w, row_of_token[tokens], positions[tokens])
        if out is None:
            out = q.new_empty((t_total, heads, dim))
        out[tokens] = part
    assert out is not None
    return out.reshape(t_total, heads * dim)


def _key_window(
    k_ctx: torch.Tensor, v_ctx: torch.Tensor, window: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Pad per-row context K/V ``[R, C, H, D]`` to ``window`` keys.

    Returns keys ``[R, H, W, D]`` and transposed values ``[R, H, D, W]``, both contiguous.
    """
    pad = window - k_ctx.shape[1]
    keys = torch.nn.functional.pad(k_ctx.permute(0, 2, 1, 3), (0, 0, 0, pad)).contiguous()
    values_t = torch.nn.functional.pad(v_ctx.permute(0, 2, 3, 1), (0, pad)).contiguous()
    return keys, values_t


# ---------------------------------------------------------------------- batches


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
class _StepIndex:
    """Device index tensors for one paged step (built on the host, shipped once)."""

    positions: torch.Tensor  # [T] absolute position of each query token
    row_of_token: torch.Tensor  # [T]
    write_slots: torch.Tensor  # [T]
    read_slots: torch.Tensor  # [R, C] slots of each row's context, padded with slot 0
    read_valid: torch.Tensor  # [R, C, 1, 1] bool, False on padding
    last_token: torch.Tensor  # [R] flat index of each row's last query token
    groups: WindowGroups  # attention windows of the query tokens


# ------------------------------------------------------------------------ model


class TinyTransformer:
    """The tiny decoder-only transformer (inference only).

    Args:
        config: shapes and seed.
        device: where weights live and compute runs.
        dtype: parameter / activation dtype (float32 by default).
    """

    def __init__(
        self,
        config: TinyConfig | None = None,
        device: torch.device | str = "cpu",
        dtype: torch.dtype = torch.float32,
    ) -> None:
        self.config = config if config is not None else TinyConfig()
        self.device = torch.device(device)
        self.dtype = dtype
        self.weights = init_weights(self.config).to(self.device, dtype)
        self._scale = 1.0 / math.sqrt(self.config.head_dim)
        self._logit_bias = torch.zeros(self.config.vocab_size, device=self.device, dtype=dtype)
        self._logit_bias[self.config.eos_token_id] = self.config.eos_logit_bias

    def new_kv_cache(self, num_blocks: int, block_size: int) -> PagedKVCache:
        """A zeroed paged cache shaped for this model, on its device."""
        c = self.config
        return PagedKVCache(
            num_blocks, block_size, c.layers, c.heads, c.head_dim, self.device, self.dtype
        )

    # ------------------------------------------------------------- blocks

    def _qkv(
        self, x: torch.Tensor, layer: LayerWeights
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Scaled queries, keys and values, each ``[T, H, D]``."""
        c = self.config
        h = rms_norm(x, layer.attn_norm, c.norm_eps)
        qkv = invariant_linear(h, layer.wqkv).view(-1, 3, c.heads, c.head_dim)
        return qkv[:, 0] * self._scale, qkv[:, 1].contiguous(), qkv[:, 2].contiguous()

    def _finish_block(
        self, x: torch.Tensor, attn: torch.Tensor, layer: LayerWeights
    ) -> torch.Tensor:
        """Attention output projection and the MLP, both residual."""
        x = x + invariant_linear(attn, layer.wo)
        h = rms_norm(x, layer.mlp_norm, self.config.norm_eps)
        return x + invariant_linear(torch.relu(invariant_linear(h, layer.w_up)), layer.w_down)

    def _logits(self, x: torch.Tensor) -> torch.Tensor:
        """Final norm, LM head and EOS bias: ``[n, hidden] -> [n, vocab]``."""
        w = self.weights
        h = rms_norm(x, w.final_norm, self.config.norm_eps)
        return invariant_linear(h, w.lm_head) + self._logit_bias

    def _embed(self, ids: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """Token plus learned position embeddings."""
        return self.weights.embed[ids] + self.weights.pos[positions]

    # -------------------------------------------------------------- dense

    def forward_dense(self, token_ids: Sequence[int]) -> torch.Tensor:
        """Logits ``[len(token_ids), vocab]`` of every position, recomputed from scratch.

        This is the oracle: no cache, no chunking, one sequence.
        """
        with torch.inference_mode():
            return self._forward_dense(token_ids)

    def _forward_dense(self, token_ids: Sequence[int]) -> torch.Tensor:
        """Body of :meth:`forward_dense` (runs under inference mode)."""
        n = len(token_ids)
        if not 0 < n <= self.config.max_position:
            raise ValueError(f"sequence length {n} outside [1, {self.config.max_position}]")
        ids = torch.tensor(list(token_ids), dtype=torch.int64, device=self.device)
        positions = torch.arange(n, device=self.device)
        rows = torch.zeros(n, dtype=torch.int64, device=self.device)
        groups = _window_groups(range(n), self.config.max_position, self.device)
        window = groups[-1][0]
        x = self._embed(ids, positions)
        for layer in self.weights.layers:
            q, k, v = self._qkv(x, layer)
            keys, values_t = _key_window(k[None], v[None], window)
            attn = _attend(q, keys, values_t, rows, positions, groups)
            x = self._finish_block(x, attn, layer)
        return self._logits(x)

    def generate_dense(
        self, prompt: Sequence[int], max_new_tokens: int, stop_at_eos: bool = True
    ) -> list[int]:
        """Greedy continuation of ``prompt`` via :meth:`forward_dense` (includes EOS if emitted)."""
        seq = list(prompt)
        out: list[int] = []
        while len(out) < max_new_tokens and len(seq) < self.config.max_position:
            token = int(greedy(self.forward_dense(seq)[-1]).item())
            out.append(token)
            seq.append(token)
            if stop_at_eos and token == self.config.eos_token_id:
                break
        return out

    # -------------------------------------------------------------- paged

    def _step_index(self, batch: PagedBatch, kv: PagedKVCache) -> _StepIndex:
        """Validate ``batch`` against ``kv`` and build the step's index tensors."""
        positions: list[int] = []
        rows: list[int] = []
        write_slots: list[int] = []
        contexts: list[list[int]] = []
        last: list[int] = []
        limit = self.config.max_position
        for row, (length, start, table) in enumerate(
            zip(batch.query_lens, batch.start_positions, batch.block_tables)
        ):
            label = batch.row_label(row)
            if start + length > limit:
                raise KVBoundsError(
                    f"request row {label}: positions up to {start + length - 1} exceed "
                    f"max_position {limit}"
                )
            context = kv.slots_for(table, 0, start + length, label)
            positions.extend(range(start, start + length))
            rows.extend([row] * length)
            write_slots.extend(context[start:])
            contexts.append(context)
            last.append(len(positions) - 1)
        self._check_distinct(write_slots, rows, batch)
        width = max((len(c) for c in contexts), default=0)
        padded = [c + [0] * (width - len(c)) for c in contexts]
        valid = [[True] * len(c) + [False] * (width - len(c)) for c in contexts]
        dev = self.device

        def ints(values: list[int] | list[list[int]]) -> torch.Tensor:
            return torch.tensor(values, dtype=torch.int64, device=dev)

        return _StepIndex(
            positions=ints(positions),
            row_of_token=ints(rows),
            write_slots=ints(write_slots),
            read_slots=ints(padded).view(len(contexts), width),
            read_valid=torch.tensor(valid, dtype=torch.bool, device=dev).view(
                len(contexts), width, 1, 1
            ),
            last_token=ints(last),
            groups=_window_groups(positions, limit, dev),
        )

    @staticmethod
    def _check_distinct(slots: list[int], rows: list[int], batch: PagedBatch) -> None:
        """Two rows (or positions) writing one slot in a step is an engine bug: reject it."""
        owner: dict[int, int] = {}
        for slot, row in zip(slots, rows):
            if slot in owner:
                raise KVBoundsError(
                    f"request row {batch.row_label(row)} writes KV slot {slot}, already written "
                    f"this step by request row {batch.row_label(owner[slot])}"
                )
            owner[slot] = row

    def forward_paged_logits(self, batch: PagedBatch, kv: PagedKVCache) -> torch.Tensor:
        """One engine step; logits ``[num_rows, vocab]`` of each row's last query position.

        Writes every query token's K/V into ``kv`` (at the row's block-table slots) before
        attending, then reads the whole causal context of each row back from ``kv``.
        No host synchronisation happens on the device tensors.
        """
        with torch.inference_mode():
            return self._forward_paged_logits(batch, kv)

    def _forward_paged_logits(self, batch: PagedBatch, kv: PagedKVCache) -> torch.Tensor:
        """Body of :meth:`forward_paged_logits` (runs under inference mode)."""
        if batch.num_rows == 0:
            return torch.zeros((0, self.config.vocab_size), device=self.device, dtype=self.dtype)
        index = self._step_index(batch, kv)
        ids = batch.input_ids.to(self.device)
        x = self._embed(ids, index.positions)
        zero = torch.zeros((), device=self.device, dtype=self.dtype)
        for layer_no, layer in enumerate(self.weights.layers):
            q, k, v = self._qkv(x, layer)
            kv.write_slots(layer_no, index.write_slots, k, v)
            k_ctx, v_ctx = kv.gather_slots(layer_no, index.read_slots)
            k_ctx = torch.where(index.read_valid, k_ctx.to(self.dtype), zero)
            v_ctx = torch.where(index.read_valid, v_ctx.to(self.dtype), zero)
            keys, values_t = _key_window(k_ctx, v_ctx, index.groups[-1][0])
            attn = _attend(q, keys, values_t, index.row_of_token, index.positions, index.groups)
            x = self._finish_block(x, attn, layer)
        return self._logits(x[index.last_token])

    def forward_paged(self, batch: PagedBatch, kv: PagedKVCache) -> torch.Tensor:
        """One engine step; greedy next token (``[num_rows]`` int64, on device) of each row.

        For a non-final prefill chunk the token is meaningless and callers ignore it.
        """
        return greedy(self.forward_paged_logits(batch, kv))


# ------------------------------------------------------------------- utilities


@contextlib.contextmanager
def deterministic_mode() -> Iterator[None]:
    """Enable ``torch.use_deterministic_algorithms`` for a block, then restore the old setting."""
    previous = torch.are_deterministic_algorithms_enabled()
    previous_warn = torch.is_deterministic_algorithms_warn_only_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(previous, warn_only=previous_warn)


def find_eos_prompts(
    model: TinyTransformer,
    candidates: Sequence[Sequence[int]],
    max_new_tokens: int = 30,
    want: int = 1,
) -> list[tuple[list[int], int]]:
    """First ``want`` candidate prompts whose dense greedy continuation emits EOS.

    Returns ``(prompt, steps)`` pairs where ``steps`` is the number of generated tokens up
    to and including EOS.  Deterministic: candidates are tried in order.
    """
    found: list[tuple[list[int], int]] = []
    eos = model.config.eos_token_id
    for prompt in candidates:
        out = model.generate_dense(prompt, max_new_tokens)
        if out and out[-1] == eos:
            found.append((list(prompt), len(out)))
            if len(found) >= want:
                break
    return found
