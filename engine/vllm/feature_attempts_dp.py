"""Issue 28 item 7, attempted on a CPU: data parallelism's waves and dummy batches (vllm/v1/engine/core.py).

``DPEngineCoreProc`` cannot be built in one process here (``attempt_dp_engine_core_proc``:
a dense model trips its MoE assertion, a tiny MoE blocks in the start-up handshake
with a front-end that does not exist).  What does run:

* ``run_wave_sync``: its lockstep ``_has_global_unfinished_reqs`` (the all-reduce of
  ``ParallelConfig.sync_dp_state`` over a real gloo group of two ranks, one thread
  each, in this process) and its ``START_DP_WAVE`` handling
  (``_handle_client_request``), on engines that carry only the fields those two read;
* ``run_dummy_batch``: the runner half of ``execute_dummy_batch`` on vLLM's
  ``CPUModelRunner`` with the oracle model (the project's ``OracleWorker`` lacks the
  worker method itself: ``EngineCore.execute_dummy_batch`` raises there).
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
from dataclasses import dataclass
from typing import Any

from asyncspec.engine.vllm.feature_attempts import error_line, tiny_model_dir
from asyncspec.engine.vllm.vllm_config import DriverConfig, configs_for, model_dir
from asyncspec.engine.vllm.vllm_environment import load_vllm

TINY_MIXTRAL_CONFIG: dict[str, Any] = {
    "architectures": ["MixtralForCausalLM"], "model_type": "mixtral", "hidden_size": 64,
    "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
    "num_key_value_heads": 4, "vocab_size": 1000, "num_local_experts": 4, "num_experts_per_tok": 2,
    "max_position_embeddings": 4096, "torch_dtype": "float32", "bos_token_id": 1, "eos_token_id": 2,
}
"""A config-only MoE: ``DPEngineCoreProc`` asserts ``ModelConfig.is_moe``."""

_ATTEMPT = """
import json, os, sys, threading, traceback
from asyncspec.engine.vllm.feature_attempts import error_line
from asyncspec.engine.vllm.feature_attempts_dp import dp_engine_core_proc_args
result = {}
def build(cls, kwargs):
    try:
        cls(**kwargs)
        result["outcome"] = "built"
    except BaseException as exc:
        result["outcome"] = error_line(exc)
        result["raised_in"] = traceback.extract_tb(exc.__traceback__)[-1].name
cls, kwargs = dp_engine_core_proc_args(sys.argv[1])
thread = threading.Thread(target=build, args=(cls, kwargs), daemon=True)
thread.start()
thread.join(float(sys.argv[2]))
if thread.is_alive():
    frames = traceback.extract_stack(sys._current_frames()[thread.ident])
    result = {"outcome": "blocked", "blocked_in": [f.name for f in frames if "/vllm/" in f.filename][-3:]}
sys.stderr.write("ASYNCSPEC-RESULT " + json.dumps(result) + "\\n")
sys.stderr.flush()
os._exit(0)
"""


def dp_engine_core_proc_args(model: str) -> tuple[Any, dict[str, Any]]:
    """``DPEngineCoreProc`` and its keywords as vLLM's engine launcher builds rank 0 of two:
    ``ParallelConfig(data_parallel_size=2)``, the executor vLLM picks, a local handshake address."""
    v = load_vllm()  # the CPU / offline environment before any vLLM import
    from vllm.config import ParallelConfig
    from vllm.v1.engine.core import DPEngineCoreProc
    from vllm.v1.executor.abstract import Executor

    model_config = v.ModelConfig(model=model, skip_tokenizer_init=True, dtype="float32", seed=0, max_model_len=256)
    scheduler_config = v.SchedulerConfig(max_num_seqs=8, max_num_batched_tokens=64, max_model_len=256,
                                         is_encoder_decoder=False, enable_chunked_prefill=True, async_scheduling=True)
    vllm_config = v.VllmConfig(model_config=model_config, scheduler_config=scheduler_config,
                               cache_config=v.CacheConfig(block_size=16),
                               parallel_config=ParallelConfig(data_parallel_size=2))
    return DPEngineCoreProc, {"vllm_config": vllm_config, "local_client": True,
                              "handshake_address": f"tcp://127.0.0.1:{_free_port()}",
                              "executor_class": Executor.get_class(vllm_config), "log_stats": False}


def attempt_dp_engine_core_proc(moe: bool, wait_s: float = 20.0) -> dict[str, Any]:
    """Build ``DPEngineCoreProc`` in a child process (so a blocked attempt leaks nothing here),
    waiting ``wait_s`` once its config is built; ``moe``: the tiny Mixtral, else the tiny Llama.  Returns ``{"outcome": error line}`` (with
    ``raised_in``), or ``{"outcome": "blocked", "blocked_in": [innermost vLLM frames]}``."""
    model = tiny_model_dir("tiny-mixtral", TINY_MIXTRAL_CONFIG) if moe else model_dir()
    return child_attempt(_ATTEMPT, [model, str(wait_s)], wait_s)


def child_attempt(script: str, args: list[str], wait_s: float) -> dict[str, Any]:
    """Run attempt ``script`` with ``args`` in a child Python; its ``ASYNCSPEC-RESULT`` line's JSON, or an
    outcome naming the child's exit and last line."""
    proc = subprocess.run([sys.executable, "-c", script, *args], capture_output=True, text=True,
                          timeout=wait_s + 240)
    for line in proc.stderr.splitlines():
        if line.startswith("ASYNCSPEC-RESULT "):
            result: dict[str, Any] = json.loads(line.split(" ", 1)[1])
            return result
    return {"outcome": f"no result (exit {proc.returncode}): {proc.stderr.strip().splitlines()[-1:]}"}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# ---- the wave logic ------------------------------------------------------------------


def wave_engine(rank: int, dp_group: Any, dp_sync_interval: int) -> Any:
    """A ``DPEngineCoreProc`` carrying only what ``_has_global_unfinished_reqs`` and
    ``_handle_client_request`` read (its ``__init__`` needs a front-end: see the module doc)."""
    load_vllm()
    from vllm.v1.engine.core import DPEngineCoreProc

    engine: Any = DPEngineCoreProc.__new__(DPEngineCoreProc)
    engine.vllm_config = configs_for(DriverConfig())[0]
    engine.dp_group, engine.dp_rank, engine.engine_index = dp_group, rank, rank
    engine.step_counter, engine.current_wave, engine.dp_sync_interval = 0, 0, dp_sync_interval
    engine.pending_pause, engine.ignore_start_dp_wave, engine.engines_running = False, False, False
    return engine


def _on_two_ranks(work: Any) -> dict[int, Any]:
    """``work(rank, dp_group)`` on ranks 0 and 1, one thread each, over one gloo group of two
    (``stateless_init_torch_distributed_process_group``, vllm/distributed/utils.py)."""
    load_vllm()
    from vllm.distributed.utils import (stateless_destroy_torch_distributed_process_group,
                                        stateless_init_torch_distributed_process_group)

    port = _free_port()
    results: dict[int, Any] = {}

    def rank_main(rank: int) -> None:
        group: Any = stateless_init_torch_distributed_process_group("127.0.0.1", port, rank, 2, "gloo")
        try:
            results[rank] = work(rank, group)
        finally:
            stateless_destroy_torch_distributed_process_group(group)

    threads = [threading.Thread(target=rank_main, args=(rank,), daemon=True) for rank in (0, 1)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    if len(results) != 2:
        raise RuntimeError(f"the two DP ranks did not finish (results from {sorted(results)})")
    return results


@dataclass(frozen=True)
class SyncPoint:
    """One call of ``DPEngineCoreProc._has_global_unfinished_reqs`` on one rank."""

    step_counter: int  # after the call (it counts the call)
    local_unfinished: bool
    engines_running: bool  # the returned value: the loop keeps stepping (dummy batches where idle)


def run_wave_sync(local_unfinished: dict[int, list[bool]], dp_sync_interval: int) -> dict[int, list[SyncPoint]]:
    """Both ranks call ``_has_global_unfinished_reqs`` once per step, in lockstep, with the
    given local answer (``Scheduler.has_unfinished_requests``) for each step."""
    def work(rank: int, group: Any) -> list[SyncPoint]:
        engine = wave_engine(rank, group, dp_sync_interval)
        points: list[SyncPoint] = []
        for local in local_unfinished[rank]:
            running = bool(engine._has_global_unfinished_reqs(local))
            points.append(SyncPoint(int(engine.step_counter), local, running))
        return points

    results: dict[int, list[SyncPoint]] = _on_two_ranks(work)
    return results


def run_start_wave(messages: list[tuple[int, int]], engine_index: int = 1) -> list[tuple[int, bool]]:
    """``START_DP_WAVE`` (new wave, excluded engine index) messages to an idle engine, in order;
    after each, its (``current_wave``, ``engines_running``)."""
    load_vllm()
    from vllm.v1.engine import EngineCoreRequestType

    engine = wave_engine(engine_index, None, 1)
    seen: list[tuple[int, bool]] = []
    for message in messages:
        engine._handle_client_request(EngineCoreRequestType.START_DP_WAVE, message)
        seen.append((int(engine.current_wave), bool(engine.engines_running)))
    return seen


# ---- the dummy batch ---------------------------------------------------------------


def run_dummy_batch() -> tuple[str, str]:
    """``EngineCore.execute_dummy_batch`` on the in-process engine (engine_core_driver.py), then
    what vLLM's ``Worker.execute_dummy_batch`` (gpu_worker.py) runs: the runner's
    ``_dummy_run(uniform_decode_query_len, uniform_decode=True)``.  Returns both outcomes."""
    from asyncspec.engine.vllm.engine_config import EngineDriverConfig
    from asyncspec.engine.vllm.engine_core_driver import EngineCoreDriver

    driver = EngineCoreDriver(EngineDriverConfig())
    try:
        driver.engine.execute_dummy_batch()
        engine_outcome = "ran"
    except Exception as exc:  # the outcome recorded, whatever vLLM raises
        engine_outcome = error_line(exc)
    runner = driver.worker.runner
    try:
        runner._dummy_run(getattr(runner, "uniform_decode_query_len", 1), uniform_decode=True,
                          randomize_inputs=False)
        runner_outcome = f"ran on {type(runner).__name__}"
    except Exception as exc:  # the outcome recorded, whatever vLLM raises
        runner_outcome = error_line(exc)
    return engine_outcome, runner_outcome
