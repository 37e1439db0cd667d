"""The engine configuration of a case (pure Python: both venvs import it)."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class EngineConfig:
    """The ``ServerArgs`` a case needs; one Scheduler is built per distinct value."""

    overlap: bool = True  # event_loop_overlap; False: event_loop_normal (the depth-1 control)
    max_total_tokens: int = 128  # KV pool size in tokens (page_size 1)
    chunked_prefill_size: int = 16  # tokens per prefill chunk
    schedule_conservativeness: float = 1.0  # < 1 admits more: real retraction under pressure
    max_running_requests: int = 8
