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

import torch

from asyncspec.engine.torch.batch import PagedBatch, StepIndex
from asyncspec.engine.torch.kernels import (
    attend, greedy, invariant_linear, key_window, rms_norm, window_groups,
)
from asyncspec.engine.torch.paged_kv import KVBoundsError, PagedKVCache
from asyncspec.engine.torch.weights import LayerWeights, TinyConfig, init_weights


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
        groups = window_groups(range(n), self.config.max_position, self.device)
        window = groups[-1][0]
        x = self._embed(ids, positions)
        for layer in self.weights.layers:
            q, k, v = self._qkv(x, layer)
            keys, values_t = key_window(k[None], v[None], window)
            attn = attend(q, keys, values_t, rows, positions, groups)
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

    def _step_index(self, batch: PagedBatch, kv: PagedKVCache) -> StepIndex:
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

        return StepIndex(
            positions=ints(positions),
            row_of_token=ints(rows),
            write_slots=ints(write_slots),
            read_slots=ints(padded).view(len(contexts), width),
            read_valid=torch.tensor(valid, dtype=torch.bool, device=dev).view(
                len(contexts), width, 1, 1
            ),
            last_token=ints(last),
            groups=window_groups(positions, limit, dev),
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
            keys, values_t = key_window(k_ctx, v_ctx, index.groups[-1][0])
            attn = attend(q, keys, values_t, index.row_of_token, index.positions, index.groups)
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
