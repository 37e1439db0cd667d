"""The tiny transformer's configuration and its deterministic weights (from a seed, on the CPU).

Weights come from ``TinyConfig.seed`` through a CPU ``torch.Generator``, so they
are identical on every device and nothing is downloaded.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch


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
