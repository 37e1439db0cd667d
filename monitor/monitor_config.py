"""The monitor's settings (environment variables) and what of an engine the spec can follow.

``vllm serve --scheduler-cls ...`` names a class, not its arguments, so the
monitor is configured through the environment of the engine-core process:

* ``ASYNCSPEC_MONITOR_ON_DIVERGENCE`` — ``log`` (default: log one line, write
  the replay file, stop checking until the engine is idle, then re-synchronise)
  or ``fail`` (raise in the engine loop: the engine fails);
* ``ASYNCSPEC_MONITOR_DIR`` — where replay files go (default ``asyncspec-monitor``);
* ``ASYNCSPEC_MONITOR_WINDOW`` — spec actions kept in the window (default 64);
* ``ASYNCSPEC_MONITOR_CHECK_EVERY`` — compare on every Nth scheduler call
  (default 1: every call; the spec is stepped on every call regardless).
"""
from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from asyncspec.spec.config import SpecConfig

ON_DIVERGENCE = ("log", "fail")
UNLIMITED_RESETS = 1 << 62  # the environment may call reset_prefix_cache any number of times


class MonitorConfigError(ValueError):
    """A bad setting: one line naming the variable and what to change."""


@dataclass(frozen=True)
class MonitorSettings:
    on_divergence: str = "log"
    out_dir: Path = Path("asyncspec-monitor")
    window: int = 64
    check_every: int = 1


def _positive(env: Mapping[str, str], name: str, default: int) -> int:
    text = env.get(name)
    if text is None or text == "":
        return default
    if not text.isdigit() or int(text) < 1:
        raise MonitorConfigError(f"{name}={text!r}: expected a positive integer")
    return int(text)


def settings_from_env(env: Mapping[str, str] | None = None) -> MonitorSettings:
    """Read the ``ASYNCSPEC_MONITOR_*`` variables; ``MonitorConfigError`` on a bad one."""
    env = os.environ if env is None else env
    mode = env.get("ASYNCSPEC_MONITOR_ON_DIVERGENCE", "log") or "log"
    if mode not in ON_DIVERGENCE:
        raise MonitorConfigError(f"ASYNCSPEC_MONITOR_ON_DIVERGENCE={mode!r}: expected 'log' or 'fail'")
    return MonitorSettings(
        on_divergence=mode,
        out_dir=Path(env.get("ASYNCSPEC_MONITOR_DIR") or "asyncspec-monitor"),
        window=_positive(env, "ASYNCSPEC_MONITOR_WINDOW", 64),
        check_every=_positive(env, "ASYNCSPEC_MONITOR_CHECK_EVERY", 1),
    )


def unmodelled_engine_features(vllm_config: Any) -> list[str]:
    """Engine settings the spec does not cover: with any of them no step is checked."""
    found = []
    sched, parallel = vllm_config.scheduler_config, vllm_config.parallel_config
    if vllm_config.speculative_config is not None:
        found.append("speculative decoding (drafts and acceptance are not read from the engine)")
    if vllm_config.kv_transfer_config is not None:
        found.append("a KV connector")
    if getattr(vllm_config, "ec_transfer_config", None) is not None:
        found.append("an encoder-cache connector")
    if sched.policy != "fcfs":
        found.append(f"scheduling policy {sched.policy!r} (the spec schedules FCFS)")
    if vllm_config.lora_config is not None:
        found.append("LoRA")
    if int(parallel.pipeline_parallel_size) > 1:
        found.append("pipeline parallelism")
    if not bool(getattr(sched, "scheduler_reserve_full_isl", True)):
        found.append("scheduler_reserve_full_isl=False")
    return found


def spec_config(vllm_config: Any, num_blocks: int, depth: int) -> SpecConfig:
    """The spec's constants for this engine; its requests are added as they arrive
    (``SpecTwin``).  ``num_blocks``: usable KV blocks (vLLM's pool minus its null block)."""
    sched, cache = vllm_config.scheduler_config, vllm_config.cache_config
    return SpecConfig(
        name="monitor",
        requests=((1, 1),),  # replaced by the twin; validated with one request
        batch_queue_depth=depth,
        loop="exact",
        token_budget=int(sched.max_num_batched_tokens),
        max_num_seqs=int(sched.max_num_seqs),
        block_size=int(cache.block_size),
        num_blocks=num_blocks,
        enable_chunked_prefill=bool(sched.enable_chunked_prefill),
        enable_prefix_caching=bool(cache.enable_prefix_caching),
        aborts=True,
        late_arrivals=True,
        forced_preemptions=UNLIMITED_RESETS,
    )


def unmodelled_request_features(request: Any) -> list[str]:
    """What of a vLLM ``Request`` (vllm/v1/request.py) the spec does not cover."""
    found = []
    if getattr(request, "lora_request", None) is not None:
        found.append("a LoRA adapter")
    if getattr(request, "mm_features", None):
        found.append("multimodal inputs")
    if getattr(request, "pooling_params", None) is not None:
        found.append("pooling")
    if getattr(request, "structured_output_request", None) is not None:
        found.append("structured output")
    if getattr(request, "resumable", False):
        found.append("streaming input")
    if getattr(request, "kv_transfer_params", None):
        found.append("KV transfer parameters")
    if getattr(request, "sampling_params", None) is None:
        found.append("no sampling parameters")
    return found
