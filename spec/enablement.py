"""Whether async scheduling is on, and which rule decided it.

Models the decision in ``VllmConfig.__post_init__`` (vllm/config/vllm.py,
vLLM 0.33.0: the block that resolves ``scheduler_config.async_scheduling``),
the platform hook that runs after it (``CpuPlatform.check_and_update_config``
forces it off), ``VllmConfig.max_concurrent_batches`` (the batch-queue depth D)
and ``SchedulerConfig.get_scheduler_cls``.  The rules are tried in order; the
first that applies decides.  ``docs/spec.md`` has the table.

Example:
    >>> decide(AsyncSetting()).enabled, decide(AsyncSetting()).batch_queue_depth
    (True, 2)
    >>> d = decide(AsyncSetting(speculative_method="ngram"))
    >>> d.enabled, d.rule
    (False, 'v1-runner-incompatible')
    >>> decide(AsyncSetting(async_scheduling=True, speculative_method="ngram")).error is not None
    True
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Runner = Literal["generate", "pooling"]
Executor = Literal["mp", "uni", "ray", "external_launcher", "custom"]
Platform = Literal["cuda", "rocm", "cpu", "other"]

MTP_METHODS = frozenset({
    "deepseek_mtp", "dots3_note_mtp", "mimo_mtp", "mimo_v2_mtp", "glm4_moe_mtp", "glm4_moe_lite_mtp",
    "glm_ocr_mtp", "ernie_mtp", "nemotron_h_mtp", "exaone_moe_mtp", "exaone4_5_mtp", "qwen3_next_mtp",
    "qwen4_exp_mtp", "qwen3_5_mtp", "longcat_flash_mtp", "bailing_hybrid_v3_mtp", "minimax_m3_mtp",
    "bailing_hybrid_mtp", "mtp", "kimi_k3_mtp", "pangu_ultra_moe_mtp", "step3p5_mtp", "step5_mtp",
    "hy_v3_mtp", "hy_v4_mtp", "gemma4_mtp", "inkling_mtp", "glm5_next_mtp",
})
"""MTP speculator names of vLLM 0.33.0 (vllm/config/speculative.py, ``MTPModelTypes``)."""

V1_ASYNC_SPEC_METHODS = frozenset({"eagle", "eagle3", "extract_hidden_states", "dflash", "ngram_gpu",
                                   "draft_model", "dspark"}) | MTP_METHODS
"""Speculative methods the V1 model runner runs with async scheduling (EAGLE types,
GPU n-gram, draft model, DSpark, DFlash); any other method turns it off."""

ASYNC_EXECUTORS = frozenset({"mp", "uni", "ray", "external_launcher"})
"""Executors whose ``supports_async_scheduling()`` is true (vllm/v1/executor/)."""


@dataclass(frozen=True)
class AsyncSetting:
    """The settings the decision reads (CLI flag names in the comments)."""

    async_scheduling: bool | None = None  # --async-scheduling / --no-async-scheduling / unset
    runner: Runner = "generate"  # --runner (pooling models: embedding, reward, ...)
    executor: Executor = "mp"  # --distributed-executor-backend
    speculative_method: str | None = None  # --speculative-config method
    disable_padded_drafter_batch: bool = False  # speculative config field
    pipeline_parallel_size: int = 1  # --pipeline-parallel-size
    v2_model_runner: bool = False  # Model Runner V2 (VLLM_USE_V2_MODEL_RUNNER or auto)
    rocm_deepep_ht_dbo: bool = False  # ROCm + --enable-dbo + deepep_high_throughput all2all
    platform: Platform = "cuda"
    custom_scheduler_cls: str | None = None  # --scheduler-cls


@dataclass(frozen=True)
class Decision:
    """What vLLM ends up running, and why."""

    enabled: bool  # async scheduling on
    rule: str  # the rule that decided (see RULES)
    error: str | None  # vLLM refuses the setting (explicit --async-scheduling)
    batch_queue_depth: int  # max_concurrent_batches
    scheduler_class: str


RULES: dict[str, str] = {
    "explicit-off": "--no-async-scheduling was given",
    "explicit-on": "--async-scheduling was given and nothing forbids it",
    "pooling-model": "pooling models are slower with it: off by default (debug log only)",
    "executor-unsupported": "the executor's supports_async_scheduling() is false",
    "rocm-deepep-dbo": "ROCm DeepEP high-throughput DBO can corrupt DP+EP accuracy",
    "v1-runner-incompatible": "the V1 model runner does not support it with this setting",
    "auto-on": "no incompatible option: on by default",
    "platform-cpu": "the CPU platform forces it off after the decision (platforms/cpu.py)",
}
"""Every rule name, with the reason vLLM gives."""


def v1_runner_incompatibility(s: AsyncSetting) -> str | None:
    """Why the V1 model runner cannot run async scheduling here, if it cannot."""
    if s.v2_model_runner:
        return None
    if s.speculative_method is not None and s.speculative_method not in V1_ASYNC_SPEC_METHODS:
        return f"{s.speculative_method}-based speculative decoding"
    if s.speculative_method is not None and s.disable_padded_drafter_batch:
        return "disable_padded_drafter_batch=True"
    if s.pipeline_parallel_size > 1:
        return "pipeline parallelism"
    return None


def _explicit_on(s: AsyncSetting) -> tuple[bool, str, str | None]:
    if s.rocm_deepep_ht_dbo:
        return False, "rocm-deepep-dbo", "async scheduling is not compatible with ROCm DeepEP high-throughput DBO"
    incompatible = v1_runner_incompatibility(s)
    if incompatible is not None:
        return False, "v1-runner-incompatible", f"not supported by the V1 model runner with {incompatible}"
    if s.executor not in ASYNC_EXECUTORS:
        return False, "executor-unsupported", f"the {s.executor} executor does not support async scheduling"
    return True, "explicit-on", None


def _auto(s: AsyncSetting) -> tuple[bool, str]:
    if s.runner == "pooling":
        return False, "pooling-model"
    if s.executor not in ASYNC_EXECUTORS:
        return False, "executor-unsupported"
    if s.rocm_deepep_ht_dbo:
        return False, "rocm-deepep-dbo"
    if v1_runner_incompatibility(s) is not None:
        return False, "v1-runner-incompatible"
    return True, "auto-on"


def batch_queue_depth(s: AsyncSetting, enabled: bool) -> int:
    """``VllmConfig.max_concurrent_batches``: pp + 1 on V2, 2 on V1 without PP, else pp."""
    pp = s.pipeline_parallel_size
    if enabled and s.v2_model_runner:
        return pp + 1
    if enabled and pp <= 1:
        return 2
    return pp


def decide(s: AsyncSetting) -> Decision:
    """The decision for ``s``; an ``error`` means vLLM refuses to start."""
    error = None
    if s.async_scheduling is True:
        enabled, rule, error = _explicit_on(s)
    elif s.async_scheduling is None:
        enabled, rule = _auto(s)
    else:
        enabled, rule = False, "explicit-off"
    if error is None and enabled and s.platform == "cpu":
        enabled, rule = False, "platform-cpu"
    scheduler = s.custom_scheduler_cls or ("AsyncScheduler" if enabled else "Scheduler")
    return Decision(enabled, rule, error, batch_queue_depth(s, enabled), scheduler)
