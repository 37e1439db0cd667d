"""``asyncspec replay`` on DP traces (checker/dp_replay.py): the files ``check -c dp`` writes, found on the
DP mutants (checker/dp_mutants.py), replay to their violation; bad files are one-line errors (exit 2)."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from asyncspec.checker.dp_model import DPTrace, dp_configs, explore_dp
from asyncspec.checker.dp_replay import dp_trace_from_json, load_dp_trace, replay_dp
from asyncspec.checker.result import CheckResult
from asyncspec.checker.spec_mutants import MUTANTS_BY_NAME, applied
from asyncspec.cli.check_dp import dp_row_lines, save_dp_traces
from asyncspec.spec import dp

from tests.cli_contract import assert_matches_schema, assert_usage_error, invoke


def _mutant_run(name: str) -> CheckResult:
    m = MUTANTS_BY_NAME[name]
    with applied(m.patches):
        return explore_dp(dp_configs()[m.config], stop_on_first=False, required_witnesses=(), mutant=name)


def _saved(tmp_path: Path, name: str, prop: str) -> Path:
    """The trace file ``check -c dp``'s writer saves for mutant ``name``'s violation of ``prop``."""
    paths = save_dp_traces(_mutant_run(name), tmp_path)
    path = tmp_path / f"dp-2ranks.{prop}.trace.json"
    assert str(path) in paths, paths
    return path


def _write(tmp_path: Path, data: Any, name: str = "t.json") -> Path:
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return path


def test_a_mutant_trace_replays_to_its_violation_with_the_mutant_applied(tmp_path: Path) -> None:
    path = _saved(tmp_path, "dp_sync_and_not_or", "dp_stopped_ranks_idle")
    assert json.loads(path.read_text())["mutant"] == "dp_sync_and_not_or"
    o = invoke("replay", str(path))
    assert o.code == 1, o.stdout + o.stderr
    assert "with seeded bug dp_sync_and_not_or applied (checker/dp_mutants.py)" in o.stdout
    assert "violated at step 6: dp_stopped_ranks_idle: rank0 stopped stepping with 2 step(s)" in o.stdout
    trace = load_dp_trace(path)
    rows, found = replay_dp(trace)
    assert found.reproduced and not found.stale
    assert all("    " + line in o.stdout for line in dp_row_lines(rows))  # check -c dp's table of ranks
    assert dp.global_unfinished(tuple([True, False]))  # the mutant's patch is gone again


def test_an_eventually_trace_replays_to_a_wave_that_never_completes(tmp_path: Path) -> None:
    path = _saved(tmp_path, "dp_stale_start_wave_wakes", "dp_wave_completes")
    o = invoke("replay", str(path), "--json")
    assert o.code == 1, o.stderr
    data = json.loads(o.stdout)
    assert_matches_schema(data, "replay-dp")
    assert_matches_schema(data, "replay")
    assert (data["kind"], data["config"], data["mutant"]) == ("dp", "dp-2ranks", "dp_stale_start_wave_wakes")
    assert data["reproduced"] is True and data["stale"] is False and data["steps"] == 22
    last = data["violations"][-1]
    assert (last["property"], last["step"]) == ("dp_wave_completes", 22)
    assert "rank1 waits in the all-reduce at step 1 for rank0" in last["message"]


def test_the_trace_without_its_mutant_does_not_reproduce(tmp_path: Path) -> None:
    data = json.loads(_saved(tmp_path, "dp_sync_and_not_or", "dp_stopped_ranks_idle").read_text())
    path = _write(tmp_path, data | {"mutant": None})
    o = invoke("replay", str(path))
    assert o.code == 0, o.stdout + o.stderr
    assert "seeded bug" not in o.stdout
    assert "the trace no longer shows dp_stopped_ranks_idle on the DP spec: it does not reproduce" in o.stdout
    js = json.loads(invoke("replay", str(path), "--json").stdout)
    assert_matches_schema(js, "replay-dp")
    assert (js["reproduced"], js["stale"], js["violations"], js["mutant"]) == (False, True, [], None)
    # the other mutant's trace takes a step the spec does not enable without it: it does not replay at all
    other = json.loads(_saved(tmp_path, "dp_stale_start_wave_wakes", "dp_wave_completes").read_text())
    assert_usage_error(invoke("replay", str(_write(tmp_path, other | {"mutant": None}, "o.json"))),
                       r"^asyncspec: error: step 22: action 'step rank1' is not enabled in the DP spec: .*"
                       r"replays only with its 'mutant' named$")


def test_a_dp_trace_round_trips_exactly(tmp_path: Path) -> None:
    for v in _mutant_run("dp_stale_start_wave_wakes").violations:
        assert isinstance(v.trace, DPTrace)
        data = v.trace.to_json()
        back = dp_trace_from_json(json.loads(json.dumps(data)))
        assert back.to_json() == data and back.dp_actions == v.trace.dp_actions
        assert back.dp_config is not None and v.trace.dp_config is not None
        assert (back.dp_config.requests, back.dp_config.dp_size, back.dp_config.dp_sync_interval) == (
            v.trace.dp_config.requests, v.trace.dp_config.dp_size, v.trace.dp_config.dp_sync_interval)


GOOD: dict[str, Any] = {"asyncspec_dp_trace": 1, "violated": "dp_stopped_ranks_idle", "mutant": None,
                        "config": {"name": "dp-2ranks", "requests": [[0, 3], [1, 1]], "dp_sync_interval": 2},
                        "actions": ["add_request r0", "step rank0"]}


@pytest.mark.parametrize(("change", "pattern"), [
    ({"asyncspec_dp_trace": 2}, r"not a DP trace of version 1 \('asyncspec_dp_trace' is 2\); write it again"),
    ({"asyncspec_dp_trace": True}, r"not a DP trace of version 1"),
    ({"steps": 3}, r"^asyncspec: error: corrupt DP trace: unknown key 'steps'$"),
    ({"actions": None}, r"corrupt DP trace: 'actions' must be a list \(got null\)$"),
    ({"actions": ["add_request r0", "schedule"]}, r"corrupt DP trace: action 2: unknown DP action 'schedule'; "
                                                  r"a DP action is one of add_request rN"),
    ({"actions": ["step r0"]}, r"corrupt DP trace: action 1: bad DP action argument 'step r0'"),
    ({"actions": ["all_reduce"]}, r"step 1: action 'all_reduce' is not enabled in the DP spec"),
    ({"actions": ["add_request r5"]}, r"step 1: action 'add_request r5' is not enabled"),
    ({"config": {"name": "x", "requests": [[0, 1]], "dp_size": 9}},
     r"corrupt DP trace: DP trace config: 'dp_size' must be 2\.\.4 \(got 9\)$"),
    ({"config": {"name": "x", "requests": [[0, 1]], "dp_sync": 2}}, r"unknown setting 'dp_sync' \(did you mean"),
    ({"mutant": "dp_sync_and_or"}, r"unknown DP mutant 'dp_sync_and_or' \(did you mean 'dp_sync_and_not_or'\?\); "
                                   r"give one of .*, or null to replay on the spec as it is$"),
    ({"violated": "dp_lockstep"}, r"'violated' must be one of dp_lockstep_syncs, .*\(did you mean 'dp_lockstep_syncs'\?\)"),
])
def test_a_bad_dp_trace_is_one_line_and_exit_2(tmp_path: Path, change: dict[str, Any], pattern: str) -> None:
    path = _write(tmp_path, GOOD | change)
    assert_usage_error(invoke("replay", str(path)), pattern)
    assert_usage_error(invoke("replay", str(path), "--json"), pattern)


def test_the_good_file_replays(tmp_path: Path) -> None:
    o = invoke("replay", str(_write(tmp_path, GOOD)))
    assert o.code == 0 and "no longer shows dp_stopped_ranks_idle" in o.stdout, o.stdout + o.stderr


def test_an_unreadable_dp_trace_is_one_line(tmp_path: Path) -> None:
    assert_usage_error(invoke("replay", str(_write(tmp_path, '{"asyncspec_dp_trace": 1,'))), r"is not valid JSON")


def test_html_refuses_a_dp_trace_in_one_line(tmp_path: Path) -> None:
    path = _saved(tmp_path, "dp_sync_and_not_or", "dp_stopped_ranks_idle")
    o = invoke("replay", str(path), "--html", str(tmp_path / "t.html"))
    assert_usage_error(o, r"is a DP trace: DP traces have no HTML view yet; replay it without --html")
    assert not (tmp_path / "t.html").exists()


def _restarting_wave(orig: Any) -> Any:
    """A test-only bug: a sync that finds no work restarts the wave on the same counter (no wave end)."""
    def mutant(rank: dp.Rank, has_unfinished: bool) -> dp.Rank:
        return orig(rank, has_unfinished) if has_unfinished else rank._replace(after_sync="", woken=False,
                                                                               step_counter=0, last_batch="")
    return mutant


def _uncounted(orig: Any) -> Any:
    """With it: the coordinator takes no note of a wave_complete (its count would grow forever)."""
    def mutant(s: dp.DPState, wave: int) -> tuple[dp.DPState, frozenset[str]]:
        return s, frozenset()
    return mutant


LIVELOCK = ((dp, "end_sync", _restarting_wave), (dp, "coordinator_wave_complete", _uncounted))


def test_a_livelock_trace_replays_as_a_livelock() -> None:
    with applied(LIVELOCK):
        r = explore_dp(dp_configs()["dp-2ranks"], stop_on_first=False, required_witnesses=(), max_states=5_000)
        assert not r.partial, r.distinct_states
        v = next(v for v in r.violations if v.property == "no_livelock")
        assert isinstance(v.trace, DPTrace)
        trace = dp_trace_from_json(v.trace.to_json())
        rows, found = replay_dp(trace)
        assert found.reproduced, found.failures
        hit = found.failures[-1]
        assert hit.property == "no_livelock" and hit.step == len(rows) - 1 and hit.loop
        assert trace.dp_config is not None
        s = rows[-1][1]  # the loop the replay found leads back to the last state
        for action in hit.loop:
            assert isinstance(action, dp.DPAction)
            s = dp.apply(trace.dp_config, s, action).state
        assert s == rows[-1][1]
        lasso = DPTrace(trace.config, (), [], violated="no_livelock", dp_config=trace.dp_config,
                        dp_actions=trace.dp_actions + [a for a in hit.loop if isinstance(a, dp.DPAction)])
        rows, found = replay_dp(lasso)
        assert found.failures[-1].loop_start == len(trace.dp_actions) and not found.failures[-1].loop
    rows, found = replay_dp(trace)  # the bug gone: the same path no longer ends on a cycle
    assert found.stale and not found.failures


def test_doctests() -> None:
    import doctest

    from asyncspec.checker import dp_replay

    assert doctest.testmod(dp_replay).failed == 0
