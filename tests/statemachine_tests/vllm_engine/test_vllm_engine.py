"""The ``vllm-engine`` target: vLLM 0.33.0's EngineCore and V1 model runner against the spec.

Default tier: a short fixed-work campaign at depths 1, 2 and 3 (clean, every
coverage category reached), a runner mutant that makes ``asyncspec fuzz
--target vllm-engine`` exit 1 and whose replay file replays, the depth-3
stagger cross-check against the worker spec, the known-bug switch, and the
one-line errors.  The long campaign is in the ``campaign`` tier.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.vllm_guard import require_pinned_vllm

from asyncspec.engine.vllm import vllm_environment
from asyncspec.engine.vllm import runner_stubs
from asyncspec.engine.vllm.engine_config import EngineDriverConfig

from asyncspec.statemachine_tests.vllm_engine import engine_case as ec
from asyncspec.statemachine_tests.vllm_engine.engine_campaign import EngineTargets, run_fixed
from asyncspec.statemachine_tests.vllm_engine.engine_explained import explain
from asyncspec.statemachine_tests.vllm_engine.engine_fuzz import (
    check_engine_available, engine_replay, load_engine_replay,
)
from asyncspec.statemachine_tests.vllm_engine.engine_profile import EngineProfile
from asyncspec.statemachine_tests.vllm_engine.engine_run import EngineRun
from asyncspec.statemachine_tests.vllm_engine.worker_coverage import WORKER_COVERAGE

require_pinned_vllm()

MUTANT_RUNNER = """
import sys
from asyncspec.engine.vllm.vllm_mutants import MUTANTS_BY_ID
from asyncspec.engine.vllm.overlay import install
install(MUTANTS_BY_ID[sys.argv[1]])
from asyncspec.cli.main import main
sys.argv = ["asyncspec", *sys.argv[2:]]
main()
"""


def asyncspec_under(mutant: str, *args: str) -> subprocess.CompletedProcess[str]:
    """``asyncspec ARGS`` in a fresh process whose vLLM carries ``mutant`` (a private overlay)."""
    return subprocess.run([sys.executable, "-c", MUTANT_RUNNER, mutant, *args], capture_output=True, text=True,
                          timeout=600)


def test_fixed_campaign_is_clean_at_every_depth_with_every_category_covered() -> None:
    summary = run_fixed(120, seed=5)
    assert summary["divergences"] == 0, summary["first_divergence"]
    assert summary["depths"] == [1, 2, 3]
    assert set(WORKER_COVERAGE) <= set(summary["coverage"])
    assert len(summary["coverage"]) >= 12
    assert [k for k, v in summary["coverage"].items() if v == 0] == []


@pytest.mark.slow  # the default tier runs the engine CLI in the runner-mutant test below, its JSON in test_engine_parts
def test_fuzz_json_contract(tmp_path: Path) -> None:
    p = subprocess.run([sys.executable, "-m", "asyncspec", "fuzz", "--target", "vllm-engine", "--depth", "2",
                        "--examples", "6", "--json", "--out-dir", str(tmp_path)],
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-2000:]
    s = json.loads(p.stdout)
    assert (s["target"], s["vllm_version"], s["runner_class"], s["depths"]) == \
        ("vllm-engine", "0.33.0", "CPUModelRunner", [2])
    assert isinstance(s["examples"], int) and s["examples"] >= 6 and s["divergences"] == 0
    assert isinstance(s["coverage"], dict) and isinstance(s["zero_coverage"], list)
    assert "cases_per_second" in s["timing"] and "seconds" not in s


def test_a_runner_mutant_makes_fuzz_exit_1_and_its_replay_file_replays(tmp_path: Path) -> None:
    args = ("fuzz", "--target", "vllm-engine", "--depth", "2", "--examples", "40", "--out-dir", str(tmp_path))
    p = asyncspec_under("runner_feed_current_row", *args)
    assert p.returncode == 1, p.stdout[-3000:] + p.stderr[-3000:]
    assert "DIVERGENCE" in p.stdout + p.stderr and "worker fed" in p.stdout + p.stderr
    replay = tmp_path / "fuzz-vllm-engine-seed0.json"
    case, events = load_engine_replay(replay)
    assert case.engine.depth == 2 and events
    again = asyncspec_under("runner_feed_current_row", "replay", str(replay), "--target", "vllm-engine")
    assert again.returncode == 1, again.stdout[-2000:]
    # on vLLM as installed (this process's, so no third vLLM start-up): what `asyncspec replay` runs
    assert engine_replay(replay) == 0


def _run(case: ec.EngineCase, events: list[ec.EngineEvent]) -> EngineRun:
    run = EngineRun(case, EngineTargets().get(case.engine), {})
    for event in events:
        if not run.apply(event):
            break
    return run


def test_depth_3_with_the_pp2_stagger_is_what_the_worker_spec_predicts_for_v1() -> None:
    """MRV2 + PP 2's stagger on the V1 runner: a request decoded every other step is fed a stale token."""
    config = EngineDriverConfig(depth=3, num_blocks=16, max_num_batched_tokens=16, max_model_len=32)
    case = ec.EngineCase(config, (ec.EngineRequest((5, 9, 4), 6),), decode_stagger=2)
    events = [ec.EngineEvent(ec.ADD_REQUEST, 0)] + [ec.EngineEvent(ec.STEP)] * 20
    run = _run(case, events)
    assert run.diverged
    assert explain(run.result) == "v1_depth3_reentry"
    stagger_one = _run(ec.EngineCase(config, case.requests), events)
    assert not stagger_one.diverged


def test_known_bug_switch_reproduces_reset_under_deferred_frees() -> None:
    """20 cases (one batch): seed 1 meets the bug at its fifth; the same 20 without the switch are clean."""
    profile = EngineProfile(depths=(2,), defer_block_free=(True,), resets=2, reset_with_deferral=True)
    summary = run_fixed(20, seed=1, depths=(2,), profile=profile)
    assert summary["divergences"] == 1
    assert "Failed to reset KV cache" in summary["first_divergence"]
    assert run_fixed(20, seed=1, depths=(2,), profile=EngineProfile(depths=(2,), defer_block_free=(True,)))[
        "divergences"] == 0


def test_missing_or_moved_vllm_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(vllm_environment, "_installed_vllm_version", lambda: "0.29.0")
    problem = check_engine_available(allow_version=False)
    assert problem is not None and "0.33.0" in problem and "\n" not in problem
    monkeypatch.undo()
    monkeypatch.setattr(runner_stubs, "TOUCHED", ("vllm.v1.engine.core.EngineCore.step_with_batch_queue_v2",))
    problem = check_engine_available(allow_version=False)
    assert problem is not None and "EngineCore.step_with_batch_queue_v2" in problem and "\n" not in problem


def test_every_touched_vllm_name_resolves() -> None:
    assert check_engine_available(allow_version=False) is None


def test_a_replay_file_of_another_target_is_refused_in_one_line(tmp_path: Path) -> None:
    path = tmp_path / "other.json"
    path.write_text(json.dumps({"asyncspec_fuzz_replay": 1, "target": "vllm", "workload": {}, "events": []}))
    p = subprocess.run([sys.executable, "-m", "asyncspec", "replay", str(path), "--target", "vllm-engine"],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1 and "vllm-engine" in p.stderr


@pytest.mark.campaign
def test_long_campaign_is_clean() -> None:
    summary = run_fixed(4000, seed=11)
    assert summary["divergences"] == 0, summary["first_divergence"]


@pytest.mark.slow  # a script for the GPU machine; the default tier runs the engine campaign it wraps
def test_the_gpu_scripts_cpu_part_runs_clean() -> None:
    script = Path(__file__).resolve().parents[3] / "bench" / "gpu_engine_fuzz.py"
    p = subprocess.run([sys.executable, str(script), "--device", "cpu", "--examples", "6"], capture_output=True,
                       text=True, timeout=600)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    assert "gpu_engine_fuzz on cpu" in p.stdout and "-> OK" in p.stdout


@pytest.mark.parametrize("args", [("--target", "vllm", "--depth", "2"), ("--target", "vllm-engine", "--depth", "4"),
                                  ("--target", "reference", "--known-bug", "reset-with-deferral")])
def test_engine_only_options_are_refused_in_one_line(args: tuple[str, ...]) -> None:
    p = subprocess.run([sys.executable, "-m", "asyncspec", "fuzz", *args, "--seconds", "1"], capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 2 and "Traceback" not in p.stderr
    assert "--depth" in p.stderr.splitlines()[-1] or "--known-bug" in p.stderr.splitlines()[-1]
