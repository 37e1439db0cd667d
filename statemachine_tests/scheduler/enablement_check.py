"""``spec/enablement.decide`` against vLLM 0.33.0's own decision, for a grid of settings.

vLLM resolves ``--async-scheduling`` in ``VllmConfig.__post_init__``
(vllm/config/vllm.py); the platform hook (``current_platform.check_and_update_config``,
on this host ``CpuPlatform``, which forces it off) runs afterwards.  For each
setting of the grid this module builds a real ``VllmConfig`` offline (the tiny
local Llama config of ``engine/vllm/vllm_config.py``, no hub, no weights) twice:

* ``platform="cuda"``: the hook neutralised, so the decision itself is compared
  with ``decide(AsyncSetting(..., platform="cuda"))``;
* ``platform="cpu"``: the hook active, compared with ``decide(..., platform="cpu")``.

Compared per setting: whether vLLM refuses it (a ``ValueError`` about async
scheduling from ``__post_init__``) vs ``Decision.error``; otherwise
``scheduler_config.async_scheduling`` vs ``Decision.enabled``,
``max_concurrent_batches`` vs ``Decision.batch_queue_depth`` and
``get_scheduler_cls().__name__`` vs ``Decision.scheduler_class``.  A setting
vLLM cannot build offline for another reason is a *skipped* row with that
reason, never dropped.  The executor is vLLM's own choice
(``parallel_config.distributed_executor_backend``), passed to ``decide``.

``python -m asyncspec.statemachine_tests.scheduler.enablement_check`` prints the table.
"""
from __future__ import annotations

import contextlib
import itertools
import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, cast

from asyncspec.engine.vllm.vllm_config import model_dir
from asyncspec.engine.vllm.vllm_environment import load_vllm
from asyncspec.spec.enablement import AsyncSetting, Decision, decide

FLAGS: tuple[bool | None, ...] = (None, True, False)
RUNNERS: tuple[str, ...] = ("generate", "pooling")
SPEC_METHODS: tuple[str | None, ...] = (None, "ngram", "ngram_gpu", "eagle3")
PIPELINE_SIZES: tuple[int, ...] = (1, 2)
MODEL_RUNNERS: tuple[bool, ...] = (False, True)  # VLLM_USE_V2_MODEL_RUNNER=0 / 1
PLATFORMS: tuple[str, ...] = ("cuda", "cpu")  # cpu hook neutralised / active


@dataclass(frozen=True)
class GridRow:
    """One setting: vLLM's outcome, ours, and whether they agree."""

    setting: AsyncSetting
    vllm: str  # "on", "off", "error", or "skipped"
    vllm_depth: int | None
    vllm_scheduler: str | None
    ours: Decision
    reason: str  # vLLM's error / skip reason, or ""

    @property
    def skipped(self) -> bool:
        return self.vllm == "skipped"

    @property
    def ours_outcome(self) -> str:
        if self.ours.error is not None:
            return "error"
        return "on" if self.ours.enabled else "off"

    @property
    def agrees(self) -> bool:
        if self.skipped:
            return True
        if self.vllm != self.ours_outcome:
            return False
        if self.vllm == "error":
            return True
        return (self.vllm_depth, self.vllm_scheduler) == (self.ours.batch_queue_depth,
                                                           self.ours.scheduler_class)

    def describe(self) -> str:
        s = self.setting
        unpadded = " unpadded-drafter" if s.disable_padded_drafter_batch else ""
        return (f"async={s.async_scheduling} runner={s.runner} spec={s.speculative_method}{unpadded} "
                f"pp={s.pipeline_parallel_size} runner={'V2' if s.v2_model_runner else 'V1'} "
                f"platform={s.platform} executor={s.executor}")


@contextlib.contextmanager
def _environment(v2: bool, platform_hook: bool) -> Iterator[None]:
    """``VLLM_USE_V2_MODEL_RUNNER`` set, and the platform hook neutralised unless wanted.

    vLLM caches its environment once an ``EngineCore`` has started
    (``vllm.envs.enable_envs_cache``); the cache is dropped so the variable is read again.
    """
    import vllm.envs as vllm_envs
    from vllm.platforms import current_platform

    vllm_envs.disable_envs_cache()
    key = "VLLM_USE_V2_MODEL_RUNNER"
    old_env = os.environ.get(key)
    os.environ[key] = "1" if v2 else "0"
    cls = type(current_platform)
    old_hook = cls.__dict__.get("check_and_update_config")
    if not platform_hook:
        cls.check_and_update_config = classmethod(lambda c, vllm_config: None)  # type: ignore[method-assign, assignment]
    try:
        yield
    finally:
        if old_env is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = old_env
        if not platform_hook and old_hook is not None:
            cls.check_and_update_config = old_hook  # type: ignore[method-assign]


def _is_async_refusal(exc: BaseException) -> bool:
    text = str(exc)
    return "sync scheduling" in text and isinstance(exc, ValueError)


def _executor_name(backend: Any) -> str:
    name = backend if isinstance(backend, str) else None
    return name if name in ("mp", "uni", "ray", "external_launcher") else "custom"


def _sync_only_executor() -> type:
    """A custom executor class whose ``supports_async_scheduling()`` is false."""
    from vllm.v1.executor.uniproc_executor import UniProcExecutor

    class SyncOnlyExecutor(UniProcExecutor):
        @classmethod
        def supports_async_scheduling(cls) -> bool:
            return False

    executor: type = SyncOnlyExecutor
    return executor


def vllm_outcome(flag: bool | None, runner: str, method: str | None, pp: int, v2: bool,
                 platform: str, custom_executor: bool = False,
                 disable_padded_drafter_batch: bool = False) -> tuple[str, int | None, str | None, str, str]:
    """Build the ``VllmConfig``: (outcome, depth, scheduler class, reason, executor)."""
    v = load_vllm()
    from vllm.config import ParallelConfig, SpeculativeConfig

    with _environment(v2, platform_hook=platform == "cpu"):
        try:
            model = v.ModelConfig(model=model_dir(), skip_tokenizer_init=True, dtype="float32",
                                  seed=0, max_model_len=256, runner=runner)
            parallel = ParallelConfig(pipeline_parallel_size=pp)
            if custom_executor:
                parallel = ParallelConfig(pipeline_parallel_size=pp,
                                          distributed_executor_backend=_sync_only_executor())
            speculative = None
            if method in ("ngram", "ngram_gpu"):
                speculative = SpeculativeConfig(method=cast(Any, method), num_speculative_tokens=2,
                                                prompt_lookup_max=2, prompt_lookup_min=1)
            elif method is not None:  # the tiny target config doubles as the draft
                speculative = SpeculativeConfig(method=cast(Any, method), num_speculative_tokens=2,
                                                model=model_dir(), target_model_config=model,
                                                target_parallel_config=parallel,
                                                disable_padded_drafter_batch=disable_padded_drafter_batch)
            scheduler = v.SchedulerConfig(max_num_seqs=4, max_num_batched_tokens=256,
                                          max_model_len=256, is_encoder_decoder=False,
                                          async_scheduling=flag)
        except Exception as exc:  # noqa: BLE001 - a setting that cannot be built offline
            return "skipped", None, None, f"cannot build the sub-configs: {_first_line(exc)}", "mp"
        try:
            config = v.VllmConfig(model_config=model, scheduler_config=scheduler,
                                  parallel_config=parallel, speculative_config=speculative)
        except Exception as exc:  # noqa: BLE001
            executor = _executor_name(parallel.distributed_executor_backend)
            if _is_async_refusal(exc):
                return "error", None, None, _first_line(exc), executor
            return "skipped", None, None, f"VllmConfig refuses it: {_first_line(exc)}", executor
        executor = _executor_name(config.parallel_config.distributed_executor_backend)
        if bool(config.use_v2_model_runner) != v2:
            return "skipped", None, None, "VLLM_USE_V2_MODEL_RUNNER was not honoured", executor
        enabled = bool(config.scheduler_config.async_scheduling)
        return ("on" if enabled else "off", int(config.max_concurrent_batches),
                config.scheduler_config.get_scheduler_cls().__name__, "", executor)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    for line in text.splitlines():
        line = line.strip()
        if "rror," in line:  # pydantic: "Value error, <message> [type=...]"
            return line.split("rror,", 1)[1].split(" [type=")[0].strip()
    return f"{type(exc).__name__}: {text.splitlines()[0] if text else ''}"[:200]


NOT_CONSTRUCTIBLE: tuple[tuple[AsyncSetting, str], ...] = tuple(
    (AsyncSetting(async_scheduling=flag, rocm_deepep_ht_dbo=True, platform="rocm"),
     "ROCm + DBO + deepep_high_throughput: current_platform.is_rocm() is false on this host "
     "and the all2all backend needs DeepEP")
    for flag in FLAGS
)
"""Settings of the decision table this host cannot build, with the reason: listed as skipped."""


GridPoint = tuple[bool | None, str, str | None, int, bool, str, bool, bool]
"""(async flag, runner, speculative method, PP, V2 model runner, platform, custom executor,
``disable_padded_drafter_batch``): the arguments of ``vllm_outcome``."""


def grid() -> list[GridPoint]:
    """The grid: async flag x runner x speculative method x PP x model runner x
    platform hook, plus a custom executor without async support (flag x
    method None/ngram x model runner x platform, generate, PP 1), plus eagle3
    with ``disable_padded_drafter_batch`` (flag x model runner, generate, PP 1,
    hook neutralised)."""
    points: list[GridPoint] = [(*combo, False, False) for combo in itertools.product(
        FLAGS, RUNNERS, SPEC_METHODS, PIPELINE_SIZES, MODEL_RUNNERS, PLATFORMS)]
    points += [(flag, "generate", method, 1, v2, platform, True, False) for flag, method, v2, platform
               in itertools.product(FLAGS, (None, "ngram"), MODEL_RUNNERS, PLATFORMS)]
    points += [(flag, "generate", "eagle3", 1, v2, "cuda", False, True)
               for flag, v2 in itertools.product(FLAGS, MODEL_RUNNERS)]
    return points


def check_grid(points: list[GridPoint] | None = None) -> list[GridRow]:
    """Every setting of ``points`` (default: the whole ``grid()``), vLLM's outcome next to
    ``decide``'s, plus the ``NOT_CONSTRUCTIBLE`` rows as skipped."""
    rows = []
    for flag, runner, method, pp, v2, platform, custom, unpadded in (grid() if points is None else points):
        outcome, depth, sched, reason, executor = vllm_outcome(flag, runner, method, pp, v2, platform,
                                                               custom, unpadded)
        setting = AsyncSetting(async_scheduling=flag, runner=cast(Any, runner),
                               executor=cast(Any, executor),
                               speculative_method=method, pipeline_parallel_size=pp,
                               v2_model_runner=v2, platform=cast(Any, platform),
                               disable_padded_drafter_batch=unpadded)
        rows.append(GridRow(setting, outcome, depth, sched, decide(setting), reason))
    rows += [GridRow(setting, "skipped", None, None, decide(setting), why)
             for setting, why in NOT_CONSTRUCTIBLE]
    return rows


def print_grid(rows: list[GridRow], out: Any = sys.stdout) -> None:
    """One line per setting, then a summary."""
    for r in rows:
        ours = f"{r.ours_outcome}/D={r.ours.batch_queue_depth}/{r.ours.rule}"
        theirs = r.vllm if r.vllm in ("error", "skipped") else f"{r.vllm}/D={r.vllm_depth}"
        mark = "skip" if r.skipped else ("ok" if r.agrees else "DIVERGES")
        out.write(f"{mark:8} {r.describe():95} vllm={theirs:10} ours={ours:35} {r.reason}\n")
    compared = [r for r in rows if not r.skipped]
    bad = [r for r in compared if not r.agrees]
    out.write(f"{len(rows)} settings: {len(compared)} compared, {len(compared) - len(bad)} agree, "
              f"{len(bad)} diverge, {len(rows) - len(compared)} skipped\n")


def main() -> int:
    load_vllm()
    rows = check_grid()
    print_grid(rows)
    return 1 if any(not r.agrees for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
