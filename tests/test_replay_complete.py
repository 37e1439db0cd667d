"""Every kind of violation replays as itself (issue 15, item 4).

Eventually-properties (deadlock, livelock, undrained frees) are re-decided at
the end of the replayed trace; a trace whose violation no longer shows on this
spec says so plainly (exit 0); every fuzz target's divergence file replays,
with ``--json``.
"""
from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import pytest
from click.testing import CliRunner

from asyncspec.checker.configs import named_configs
from asyncspec.checker.fast_explorer import explore_fast
from asyncspec.checker.spec_mutants import MUTANTS_BY_NAME, _without_expectation, applied
from asyncspec.checker.replay_check import find_loop, recheck
from asyncspec.checker.trace import Trace, save_trace
from asyncspec.cli.main import main

EVENTUALLY_MUTANTS = {
    "finish_leaks_blocks": "no_deadlock",
    "processed_step_seq_frozen": "no_livelock",
    "never_drain_deferred_frees": "deferred_frees_drained",
}


def _trace_of(mutant: str) -> Trace:
    m = MUTANTS_BY_NAME[mutant]
    with applied(m.patches):
        result = explore_fast(_without_expectation(named_configs()[m.config]), stop_on_first=False,
                              max_states=100_000)
    return next(v.trace for v in result.violations if v.property == m.property)


@pytest.mark.parametrize("mutant", sorted(EVENTUALLY_MUTANTS))
def test_an_eventually_violation_replays_as_itself_and_says_when_it_no_longer_does(
        mutant: str, tmp_path: Path) -> None:
    prop = EVENTUALLY_MUTANTS[mutant]
    trace = _trace_of(mutant)
    path = tmp_path / f"{mutant}.trace.json"
    save_trace(trace, path)
    with applied(MUTANTS_BY_NAME[mutant].patches):  # the spec the trace was found on
        r = CliRunner().invoke(main, ["replay", str(path), "--json"])
    assert r.exit_code == 1, r.output
    data = json.loads(r.stdout)
    assert data["reproduced"] and data["violated"] == prop
    hit = next(v for v in data["violations"] if v["property"] == prop)
    assert hit["step"] == len(trace.actions)  # decided at the trace's last state
    if prop != "no_deadlock":
        assert hit["loop"], hit  # the way back that makes it a lasso
    r = CliRunner().invoke(main, ["replay", str(path)])  # the spec as it is: the bug is gone
    if mutant == "finish_leaks_blocks":  # the leak made an action possible that the spec refuses
        assert r.exit_code == 2 and "is not enabled in the spec" in r.stderr, r.output
    else:
        assert r.exit_code == 0, r.output
        assert f"no longer shows {prop}" in r.output and "no always-property" not in r.output


def test_a_lasso_closed_in_the_trace_itself_is_a_livelock() -> None:
    m = MUTANTS_BY_NAME["processed_step_seq_frozen"]
    trace = _trace_of("processed_step_seq_frozen")
    with applied(m.patches):
        loop = find_loop(trace.config, trace.states()[-1][1])
        assert loop is not None
        closed = Trace(trace.config, trace.eos_positions, trace.actions + loop, "no_livelock")
        found = recheck(closed, closed.states())
    hit = next(f for f in found.failures if f.property == "no_livelock")
    assert found.reproduced and hit.loop_start == len(trace.actions)


def test_a_clean_trace_names_no_eventually_violation() -> None:
    cfg = named_configs()["sync-d1"]
    trace = Trace(cfg, (0, 0), [], violated="no_deadlock")
    found = recheck(trace, trace.states())
    assert found.stale and not found.failures  # the initial state has work to do: no deadlock


def test_fuzz_replay_json_for_the_reference_target(tmp_path: Path) -> None:
    from tests.explorer import fixtures
    from asyncspec.statemachine_tests.core.replay_file import save_replay

    path = tmp_path / "fuzz-reference-seed0.json"
    save_replay(fixtures.fuzz_run(), "reference", path)
    r = CliRunner().invoke(main, ["replay", str(path), "--json"])  # the file names its target
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    assert data["target"] == "reference" and data["result"] == "ok" and not data["reproduces"]
    assert data["events"] == len(json.loads(path.read_text())["events"]) and data["divergence"] is None


ROW_SHIFT = dict(prompts=((24,), (33, 13, 23)), max_tokens=(2, 5), token_budget=5, max_num_seqs=3,
                 block_size=4, num_blocks=2, stale_mode="drop")


def test_a_torch_divergence_replays_with_json(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    from asyncspec.engine.torch.torch_engine import Workload, default_model
    from asyncspec.engine.torch.torch_oracle import FUZZ_MODEL, check_workload

    report = check_workload(Workload(**ROW_SHIFT), strategy="v2", depths=(1, 2), bug="feed_by_row",
                            check_spec=False, model=default_model("cpu", FUZZ_MODEL))
    assert report.problems
    data = {"asyncspec_torch_replay": 1, "target": "torch", "workload": asdict(report.workload),
            "strategy": "v2", "depths": [1, 2], "bug": "feed_by_row", "problems": report.problems}
    path = tmp_path / "fuzz-torch-seed0.json"
    path.write_text(json.dumps(data))
    r = CliRunner().invoke(main, ["replay", str(path), "--target", "torch", "--json"])
    assert r.exit_code == 1, r.output
    out = json.loads(r.stdout)
    assert out["result"] == "divergence" and out["reproduces"] and out["problems"]
    del data["bug"]  # the engine without the seeded bug: it no longer diverges
    path.write_text(json.dumps(data))
    r = CliRunner().invoke(main, ["replay", str(path), "--json"])  # the file names its target
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["reproduces"] is False
    path.write_text(json.dumps({"asyncspec_torch_replay": 1, "workload": {"prompts": []}, "strategy": "v2"}))
    r = CliRunner().invoke(main, ["replay", str(path), "--target", "torch"])
    assert r.exit_code == 2 and "'max_tokens' is required in 'workload'" in r.stderr  # its closed schema
