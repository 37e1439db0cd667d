"""Issue 27 item 1: real attempts, on a CPU in one process, at the features whose vLLM arcs the engine target never reaches.

Each returns the exact outcome, quoted by ``statemachine_tests/core/coverage_reasons_data.py``
as the reason for its arcs.

Every attempt goes through the engine target's build path (``engine_config.build_engine_config``
with more ``ParallelConfig`` / ``ModelConfig`` / ``VllmConfig`` fields) and, where the config
builds, through ``EngineCore.__init__`` (vllm/v1/engine/core.py) over the engine target's
executor.  What a CPU refuses is a reason; what it runs (``attempt_ubatch_veto``,
``attempt_cudagraph_metrics``, ``attempt_sleep``, ``attempt_pooling_config``) stays a target, recorded so the
docs can say why it is not a reason.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from asyncspec.engine.vllm.feature_attempts import error_line
from asyncspec.engine.vllm.feature_attempts_dp import child_attempt
from asyncspec.engine.vllm.vllm_environment import load_vllm


def exact_error(exc: BaseException) -> str:
    """``error_line``, except that a pydantic ``ValidationError`` gives its first error's message
    (its first line only counts the errors)."""
    errors = getattr(exc, "errors", None)
    if type(exc).__name__ == "ValidationError" and callable(errors):
        first: Mapping[str, Any] = errors()[0]
        return f"{type(exc).__name__}: {getattr(exc, 'title', '')}: {first['msg']}"
    return str(error_line(exc))


def engine_config(parallel: Mapping[str, Any] | None = None, model: Mapping[str, Any] | None = None,
                  extra: Mapping[str, Any] | None = None) -> Any:
    """The engine target's default ``VllmConfig`` with the given fields (``build_engine_config``)."""
    from asyncspec.engine.vllm.engine_config import EngineDriverConfig, build_engine_config
    from asyncspec.engine.vllm.oracle_worker import oracle_executor_class

    return build_engine_config(EngineDriverConfig(), oracle_executor_class(), parallel, model, extra)


def build_outcome(parallel: Mapping[str, Any] | None = None, model: Mapping[str, Any] | None = None,
                  extra: Mapping[str, Any] | None = None) -> tuple[Any, str]:
    """(the built ``VllmConfig`` or None, "built" or the exact error of building it)."""
    load_vllm()
    try:
        return engine_config(parallel, model, extra), "built"
    except Exception as exc:  # the outcome is the record, whatever vLLM raises
        return None, exact_error(exc)


# ---- refused on a CPU: reasons ----------------------------------------------------------


def attempt_eplb() -> str:
    """``ParallelConfig(enable_eplb=True, enable_expert_parallel=True)``: refused by
    ``ParallelConfig``'s validation (vllm/config/parallel.py), so ``GPUModelRunner.eplb_step``
    returns at once and ``execute_model`` has no ``eplb_state``."""
    return build_outcome({"enable_eplb": True, "enable_expert_parallel": True})[1]


def attempt_dbo() -> str:
    """``ParallelConfig(enable_dbo=True)``: ``CpuPlatform.check_and_update_config`` (vllm/platforms/cpu.py)
    turns dual-batch overlap off; returns the fields the runner reads afterwards."""
    config, outcome = build_outcome({"enable_dbo": True})
    if config is None:
        return outcome
    parallel = config.parallel_config
    return f"{outcome}: enable_dbo={parallel.enable_dbo} use_ubatching={parallel.use_ubatching}"


def attempt_full_cudagraphs() -> str:
    """``CompilationConfig(cudagraph_mode=FULL, cudagraph_capture_sizes=[1, 2, 4])`` without
    ``enforce_eager``: ``CpuPlatform.check_and_update_config`` empties the capture sizes, so
    ``GPUModelRunner.__init__`` has no ``cudagraph_batch_sizes``; returns what is left."""
    load_vllm()
    from vllm.config import CompilationConfig, CUDAGraphMode

    compilation = CompilationConfig(cudagraph_mode=CUDAGraphMode.FULL, cudagraph_capture_sizes=[1, 2, 4])
    config, outcome = build_outcome(model={"enforce_eager": False}, extra={"compilation_config": compilation})
    if config is None:
        return outcome
    cc = config.compilation_config
    return f"{outcome}: cudagraph_capture_sizes={cc.cudagraph_capture_sizes} cudagraph_mode={cc.cudagraph_mode.name}"


_DP_ATTEMPT = """
import json, os, sys, threading, traceback
from asyncspec.engine.vllm.cpu_limit_attempts import dp_engine_core_args
cls, args = dp_engine_core_args(int(sys.argv[1]))
result = {}
def build():
    try:
        cls(*args, log_stats=True)
        result["outcome"] = "built"
    except BaseException as exc:
        from asyncspec.engine.vllm.cpu_limit_attempts import exact_error
        result["outcome"] = exact_error(exc)
thread = threading.Thread(target=build, daemon=True)
thread.start()
thread.join(float(sys.argv[2]))
if thread.is_alive():
    frames = traceback.extract_stack(sys._current_frames()[thread.ident])
    result = {"outcome": "blocked", "blocked_in": [f.name for f in frames if "site-packages/vllm/" in f.filename][-3:],
              "innermost": frames[-1].name}
sys.stderr.write("ASYNCSPEC-RESULT " + json.dumps(result) + "\\n")
sys.stderr.flush()
os._exit(0)
"""


def dp_engine_core_args(rank: int) -> tuple[type, tuple[Any, type]]:
    """``EngineCore`` and its (config, executor class), the engine target's, as rank ``rank`` of
    ``data_parallel_size=2``: imported and built before the attempt's clock starts."""
    load_vllm()
    from vllm.v1.engine.core import EngineCore

    from asyncspec.engine.vllm.oracle_worker import oracle_executor_class

    config = engine_config({"data_parallel_size": 2, "data_parallel_rank": rank, "data_parallel_rank_local": rank})
    return EngineCore, (config, oracle_executor_class())


def attempt_dp_engine_core(rank: int = 0, wait_s: float = 20.0) -> dict[str, Any]:
    """Build ``EngineCore`` (``dp_engine_core_args(rank)``) in a child process (a blocked attempt leaks nothing here),
    waiting ``wait_s``.  Returns ``{"outcome": error}`` or ``{"outcome": "blocked", "blocked_in":
    [innermost vLLM frames], "innermost": the innermost frame}`` (the second rank never comes:
    one process)."""
    result: dict[str, Any] = child_attempt(_DP_ATTEMPT, [str(rank), str(wait_s)], wait_s)
    return result


def attempt_dp_rank_local_alone() -> int:
    """``ParallelConfig(data_parallel_rank_local=1)`` with one DP rank: what ``EngineCore.__init__``'s
    ``not data_parallel_rank_local`` test reads after ``VllmConfig`` (a nonzero local rank needs DP > 1)."""
    config, outcome = build_outcome({"data_parallel_rank_local": 1})
    if config is None:
        raise RuntimeError(outcome)
    return int(config.parallel_config.data_parallel_rank_local)


# ---- runs on a CPU: targets, not reasons -------------------------------------------------


def attempt_ubatch_veto(steps: int = 6) -> list[tuple[bool, int, bool]]:
    """``ParallelConfig(ubatch_size=2, all2all_backend="deepep_low_latency")`` (the default backend is
    refused on every platform) builds here, and ``GPUModelRunner._allow_microbatching`` runs its
    veto past ``use_ubatching``: two requests stepped; per call (use_ubatching, num_reqs, allowed)."""
    return _steps_with({"ubatch_size": 2, "all2all_backend": "deepep_low_latency"}, None, steps,
                       "_allow_microbatching", lambda runner, out, args: (
                           bool(runner.parallel_config.use_ubatching), int(args[0]), bool(out)))


def attempt_cudagraph_metrics(steps: int = 4) -> list[tuple[bool, int, bool]]:
    """``ObservabilityConfig(cudagraph_metrics=True)`` builds and runs here:
    ``_determine_batch_execution_and_padding`` returns a ``CUDAGraphStat``; per call
    (cudagraph_metrics, unpadded tokens, a stat returned)."""
    load_vllm()
    from vllm.config import ObservabilityConfig

    return _steps_with(None, {"observability_config": ObservabilityConfig(cudagraph_metrics=True)}, steps,
                       "_determine_batch_execution_and_padding", lambda runner, out, args: (
                           bool(runner.vllm_config.observability_config.cudagraph_metrics),
                           int(args[0]) if args else -1, out[-1] is not None))


def _steps_with(parallel: Mapping[str, Any] | None, extra: Mapping[str, Any] | None, steps: int,
                method: str, record: Any) -> list[Any]:
    """Two requests through an ``EngineCoreDriver`` built with these fields, recording each call of
    the runner's ``method`` with ``record(runner, returned, positional args)``."""
    load_vllm()
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner

    from asyncspec.engine.vllm import engine_core_driver
    from asyncspec.engine.vllm.engine_config import EngineDriverConfig, build_engine_config

    seen: list[Any] = []
    original = getattr(GPUModelRunner, method)

    def watched(self: Any, *args: Any, **kwargs: Any) -> Any:
        out = original(self, *args, **kwargs)
        seen.append(record(self, out, args or tuple(kwargs.values())))
        return out

    setattr(GPUModelRunner, method, watched)
    setattr(engine_core_driver, "build_engine_config",
            lambda cfg, ex: build_engine_config(cfg, ex, parallel, None, extra))
    try:
        driver = engine_core_driver.EngineCoreDriver(EngineDriverConfig())
        driver.add_request("a", [5, 6, 7, 8, 9, 10], 3)
        driver.add_request("b", [5, 6, 7, 8, 9, 10, 11], 3)
        for _ in range(steps):
            driver.step()
    finally:
        setattr(GPUModelRunner, method, original)
        setattr(engine_core_driver, "build_engine_config", build_engine_config)
    return seen


def attempt_sleep() -> tuple[str, str]:
    """``EngineCore.sleep(level=1)`` on the engine target (its worker lacks ``sleep``; vLLM's
    ``CPUWorker.sleep``, vllm/v1/worker/cpu_worker.py, only warns), and ``enable_sleep_mode``,
    which ``ModelConfig`` refuses on a CPU but ``EngineCore.sleep`` does not read."""
    from asyncspec.engine.vllm.engine_config import EngineDriverConfig
    from asyncspec.engine.vllm.engine_core_driver import EngineCoreDriver

    driver = EngineCoreDriver(EngineDriverConfig())
    try:
        driver.engine.sleep(level=1)
        sleep_outcome = "slept"
    except Exception as exc:  # the outcome is the record
        sleep_outcome = exact_error(exc)
    return sleep_outcome, build_outcome(model={"enable_sleep_mode": True})[1]


def attempt_pooling_config() -> str:
    """``ModelConfig(runner="pooling")`` on the engine target's model: the config ``EngineCore._log_pooler_config``
    (vllm/v1/engine/core.py) reads builds on a CPU, so its arcs are targets (a pooling part), not reasons."""
    config, outcome = build_outcome(model={"runner": "pooling"})
    if config is None:
        return outcome
    model = config.model_config
    return f"{outcome}: runner_type={model.runner_type} pooler_config={type(model.pooler_config).__name__}"
