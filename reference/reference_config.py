"""Settings of the reference engine (vLLM's scheduler, cache and engine knobs).

Example:
    >>> cfg = ReferenceConfig(num_gpu_blocks=64, batch_queue_size=3)
    >>> cfg.async_scheduling, cfg.decode_stagger, cfg.block_size
    (True, 1, 16)
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ReferenceConfig:
    """The knobs the reference scheduler and engine loop read (fixed per engine)."""

    num_gpu_blocks: int  # usable KV blocks (vLLM's null block excluded)
    block_size: int = 16
    max_num_batched_tokens: int = 8192  # the per-step token budget
    max_num_seqs: int = 256
    enable_chunked_prefill: bool = True
    enable_prefix_caching: bool = True
    scheduler_reserve_full_isl: bool = True  # admission needs the whole known sequence to fit
    batch_queue_size: int = 2  # max_concurrent_batches D (1 = synchronous EngineCore.step)
    defer_block_free: bool = False  # KV-consumer connector: frees wait for a step fence
    requires_kv_delivery: bool = False  # KV-pressure preemption drops stale output
    decode_stagger: int = 1  # V2 runner + PP: schedule() calls between two decodes
    abort_mode: str = "immediate"  # "deferred": SGLang's abort of a running request (Req.to_finish)
    sync_scheduler: bool = False  # Scheduler under the batch queue (pipeline parallelism without async scheduling)

    def __post_init__(self) -> None:
        for name in ("num_gpu_blocks", "block_size", "max_num_batched_tokens", "max_num_seqs",
                     "batch_queue_size", "decode_stagger"):
            if getattr(self, name) < 1:
                raise ValueError(f"ReferenceConfig: '{name}' must be >= 1")
        if self.abort_mode not in ("immediate", "deferred"):
            raise ValueError("ReferenceConfig: 'abort_mode' must be 'immediate' or 'deferred'")

    @property
    def async_scheduling(self) -> bool:
        """AsyncScheduler (placeholders) iff more than one step may be in flight, unless ``sync_scheduler``."""
        return self.batch_queue_size > 1 and not self.sync_scheduler
