"""Issue 27 item 1: every reason of ``coverage_reasons.WHY_UNREACHABLE`` stands on a real attempt.

The slow tier re-runs each attempt of engine/vllm/cpu_limit_attempts.py (and the
``DPEngineCoreProc`` one of feature_attempts_dp.py) and holds it to the outcome that
statemachine_tests/core/coverage_reasons_data.py quotes, and checks that a short engine
campaign leaves every reasoned arc unreached, with its reason in the report; the
attempts that run (micro-batching's veto, cudagraph metrics, sleep) are held to running,
so they stay targets.  The default tier checks that every key names a possible arc of
the installed vLLM 0.33.0 file, owned by the function the key names.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from asyncspec.statemachine_tests.core import coverage_reasons_data as data
from asyncspec.statemachine_tests.core.coverage_reasons import MEASURED, WHY_UNREACHABLE
from asyncspec.statemachine_tests.core.coverage_report import _owner_of_lines, arc_owner, function_lines, in_scope
from tests.vllm_guard import require_pinned_vllm

require_pinned_vllm()


def _vllm_root() -> Path:
    spec = importlib.util.find_spec("vllm")  # the package's folder, without importing vLLM
    assert spec is not None and spec.origin is not None
    return Path(spec.origin).parent.parent


def _possible_arcs(path: Path) -> set[tuple[int, int]]:
    coverage_python = pytest.importorskip("coverage.python")
    parser = coverage_python.PythonParser(filename=str(path))
    parser.parse_source()
    return set(parser.arcs())


def test_every_reason_names_a_possible_arc_of_its_function_in_the_installed_file() -> None:
    assert len(WHY_UNREACHABLE) == sum(len(arcs) for _, arcs, _ in data.GROUPS) == 45
    for file in sorted({file for file, _, _ in WHY_UNREACHABLE}):
        path = _vllm_root() / file
        possible = _possible_arcs(path)
        owners = _owner_of_lines(function_lines(path.read_text()))
        for key_file, function, arc in WHY_UNREACHABLE:
            if key_file != file:
                continue
            a, b = (int(n) for n in arc.split("->"))
            assert (a, b) in possible, f"{file} {function} {arc}: not an arc of the installed file"
            assert arc_owner((a, b), owners) == function and in_scope(function, MEASURED[file])


def test_each_group_quotes_its_attempt() -> None:
    assert data.EPLB_ERROR in data.EPLB_REASON and data.FULL_CUDAGRAPHS_OUTCOME in data.CUDAGRAPH_REASON
    assert data.DP_ENGINE_CORE_PROC_DENSE in data.DP_REASON and data.DP_REASON in data.UBATCH_REASON
    assert data.DBO_OUTCOME in data.UBATCH_REASON and data.DP_REASON in data.EP_FAULT_REASON


# ---- the attempts, re-run ------------------------------------------------------------------


@pytest.mark.slow
def test_the_refused_attempts_give_the_quoted_outcomes() -> None:
    from asyncspec.engine.vllm import cpu_limit_attempts as attempts

    assert attempts.attempt_eplb() == data.EPLB_ERROR
    assert attempts.attempt_dbo() == data.DBO_OUTCOME
    assert attempts.attempt_full_cudagraphs() == data.FULL_CUDAGRAPHS_OUTCOME
    assert attempts.attempt_dp_rank_local_alone() == data.DP_RANK_LOCAL_ALONE


@pytest.mark.slow
@pytest.mark.parametrize("rank", [0, 1])
def test_an_engine_core_of_two_dp_ranks_blocks_in_one_process(rank: int) -> None:
    from asyncspec.engine.vllm import cpu_limit_attempts as attempts

    assert attempts.attempt_dp_engine_core(rank, wait_s=20) == {
        "outcome": "blocked", "blocked_in": data.DP_ENGINE_CORE_BLOCKED_IN,
        "innermost": data.DP_ENGINE_CORE_INNERMOST}


@pytest.mark.slow
def test_dp_engine_core_proc_outcomes_are_the_quoted_ones() -> None:
    from asyncspec.engine.vllm import feature_attempts_dp as fa_dp

    assert fa_dp.attempt_dp_engine_core_proc(moe=False, wait_s=20)["outcome"] == data.DP_ENGINE_CORE_PROC_DENSE
    assert fa_dp.attempt_dp_engine_core_proc(moe=True, wait_s=20)["blocked_in"] == \
        data.DP_ENGINE_CORE_PROC_MOE_BLOCKED_IN


@pytest.mark.slow
def test_what_runs_on_a_cpu_stays_a_target() -> None:
    from asyncspec.engine.vllm import cpu_limit_attempts as attempts

    veto = attempts.attempt_ubatch_veto()
    assert veto and all(use_ubatching and num_reqs == 2 and allowed for use_ubatching, num_reqs, allowed in veto)
    metrics = attempts.attempt_cudagraph_metrics()
    assert metrics and all(on and stat for on, _, stat in metrics)
    sleep, sleep_mode = attempts.attempt_sleep()
    assert sleep == "NotImplementedError: Method 'sleep' is not implemented."  # the oracle worker's, not a CPU's
    assert sleep_mode == "ValidationError: ModelConfig: Value error, Sleep mode is not supported on current platform."
    assert attempts.attempt_pooling_config() == "built: runner_type=pooling pooler_config=PoolerConfig"
    reasoned = {function for _, function, _ in WHY_UNREACHABLE}
    assert not reasoned & {"GPUModelRunner._allow_microbatching", "EngineCore.sleep", "EngineCore.wake_up",
                            "EngineCore._log_pooler_config"}


@pytest.mark.slow
def test_a_short_engine_campaign_leaves_every_reasoned_arc_unreached_with_its_reason(tmp_path: Path) -> None:
    pytest.importorskip("coverage")
    done = subprocess.run([sys.executable, "-m", "asyncspec", "fuzz", "--json", "--target", "vllm-engine",
                           "--examples", "10", "--seed", "0", "--out-dir", str(tmp_path / "t"),
                           "--vllm-coverage", "cov.json"], capture_output=True, text=True, cwd=tmp_path,
                          timeout=1800, env=dict(os.environ))
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads((tmp_path / "cov.json").read_text())
    for (file, function, arc), reason in WHY_UNREACHABLE.items():
        entry = report["files"][file]["functions"][function]
        assert [int(n) for n in arc.split("->")] in entry["unreached_arcs"], (function, arc)
        assert entry["why_unreachable"][arc] == reason
