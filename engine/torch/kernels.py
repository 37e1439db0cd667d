"""Batch-invariant kernels of the tiny transformer: linear, RMSNorm, softmax, windowed attention.

On CPU the logits of a position are bit-identical whatever batch, chunk
schedule or entry point computed them (see ``engine/torch/model.py``): every
product reduces over the innermost axis in an order fixed by the reduced
length, a query at position ``p`` attends over a window of
:func:`attention_window` ``(p)`` keys, and ``exp`` runs in float64.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

#: Tokens processed per slice in linear layers and attention.  Slicing the outer (token)
#: axis bounds memory and never changes any output bit.
TOKEN_SLICE = 128


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


def window_groups(
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


def attend(
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
        groups: the queries' attention windows (from :func:`window_groups`).

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


def key_window(
    k_ctx: torch.Tensor, v_ctx: torch.Tensor, window: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Pad per-row context K/V ``[R, C, H, D]`` to ``window`` keys.

    Returns keys ``[R, H, W, D]`` and transposed values ``[R, H, D, W]``, both contiguous.
    """
    pad = window - k_ctx.shape[1]
    keys = torch.nn.functional.pad(k_ctx.permute(0, 2, 1, 3), (0, 0, 0, pad)).contiguous()
    values_t = torch.nn.functional.pad(v_ctx.permute(0, 2, 3, 1), (0, pad)).contiguous()
    return keys, values_t
