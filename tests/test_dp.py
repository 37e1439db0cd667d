"""Data parallelism's waves (spec/dp.py): the lockstep loop, its config, pin, properties and mutants."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from asyncspec.checker import configs as cfgs
from asyncspec.checker.dp_model import DPTrace, dp_config_from_dict, dp_configs, explore_dp
from asyncspec.checker.spec_mutants import MUTANTS, MUTANTS_BY_NAME, run_mutant
from asyncspec.spec import dp
from asyncspec.spec.dp import DPAction, DPConfig, DPConfigError, parse_dp_action
from asyncspec.spec.dp_properties import DP_ALWAYS

from tests.cli_contract import assert_matches_schema, invoke

CFG = dp_configs()["dp-2ranks"]  # r0: rank 0, 3 steps; r1: rank 1, 1 step; r2: rank 0, 1 step; sync 1 and every 2nd


def run(actions: list[str], cfg: DPConfig = CFG) -> tuple[dp.DPState, list[frozenset[str]]]:
    s, seen = dp.initial_state(cfg), []
    for text in actions:
        t = dp.apply(cfg, s, parse_dp_action(text))
        s = t.state
        seen.append(t.events)
    return s, seen


def test_dp_configs_match_their_pinned_counts() -> None:
    pinned = cfgs.load_manifest()
    for name, cfg in dp_configs().items():
        r = explore_dp(cfg, stop_on_first=False)
        assert (r.distinct_states, r.depth) == (pinned[name]["distinct_states"], pinned[name]["depth"])
        assert r.ok and not r.vacuous, [v.message for v in r.violations]


def test_a_request_wakes_its_rank_and_start_dp_wave_the_other() -> None:
    s, seen = run(["add_request r0"])
    assert s.ranks[0].running and s.ranks[0].work == 3 and dp.START_WAVE_SENT in seen[0]
    assert s.ranks[1].inbox == ((0, 0),) and not s.ranks[1].running  # START_DP_WAVE(wave 0, excluded 0)
    s, seen = run(["add_request r0", "step rank0"])  # step 1 syncs: rank 0 waits for rank 1
    assert s.ranks[0].at_sync and s.ranks[0].step_counter == 1
    assert [str(t.action) for t in dp.next_states(CFG, s)] == ["add_request r1", "start_dp_wave rank1"]
    s, seen = run(["add_request r0", "step rank0", "start_dp_wave rank1", "step rank1"])
    assert dp.START_WAVE_WAKES in seen[2] and dp.DUMMY_BATCH in seen[3]


def test_an_idle_rank_steps_dummy_batches_until_a_sync_finds_no_work() -> None:
    sync = ["all_reduce", "end_iteration rank0", "end_iteration rank1"]
    head = ["add_request r0", "step rank0", "start_dp_wave rank1", "step rank1"] + sync
    s, seen = run(head[:5])  # step 1: rank 0 has 2 steps left, so the OR keeps both running
    assert dp.DUMMY_KEEPS_WAVE in seen[-1] and [r.after_sync for r in s.ranks] == ["run", "run"]
    s, seen = run(head)  # rank 0, idle when its iteration began: start_wave of its own wave, deduped
    assert dp.START_WAVE_DEDUPED in seen[-2] and all(r.running and not r.woken for r in s.ranks)
    s, seen = run(head + ["step rank0", "step rank1"] + sync)  # step 2: rank 0 has 1 left
    assert s.ranks[1].last_batch == "dummy" and all(r.running for r in s.ranks)
    s, seen = run(head + ["step rank0", "step rank1"] + sync + ["step rank0", "step rank1"])
    assert dp.SYNC_SKIPPED in seen[-1] and not s.ranks[0].at_sync  # step 3: no sync (interval 2)
    s, seen = run(head + ["step rank0", "step rank1"] + sync + ["step rank0", "step rank1"] * 2 + sync)
    assert dp.WAVE_COMPLETE in seen[-2] and s.coordinator_wave == 1 and not s.coordinator_running
    assert [(r.running, r.current_wave, r.step_counter) for r in s.ranks] == [(False, 1, 0), (False, 1, 0)]


def test_a_wave_complete_after_a_newer_wave_started_keeps_the_coordinator_running() -> None:
    s = dp.DPState((dp.Rank(), dp.Rank()), coordinator_wave=2, coordinator_running=True)
    s2, events = dp.coordinator_wave_complete(s, 1)
    assert (s2.coordinator_wave, s2.coordinator_running) == (2, True) and dp.WAVE_COMPLETE_LATE in events
    s3, events = dp.coordinator_start_wave(s2._replace(coordinator_running=False), 2, 1)
    assert s3.ranks[0].inbox == ((2, 1),) and s3.ranks[1].inbox == () and dp.START_WAVE_SENT in events


def test_a_start_dp_wave_of_an_ended_wave_is_ignored() -> None:
    s, seen = run(["add_request r0", "add_request r1"])  # both woken: the coordinator broadcasts the first only
    assert s.ranks[0].inbox == () and s.ranks[1].inbox == ((0, 0),) and dp.START_WAVE_DEDUPED in seen[1]
    rank = dp.Rank(current_wave=1, inbox=((0, 1),))
    assert dp.handle_start_wave(rank, 0) == (dp.Rank(current_wave=1), frozenset({dp.START_WAVE_STALE}))
    assert not dp.accepts_start_wave(dp.Rank(), 0, 1, 1)  # the excluded engine does not take its own wave
    assert dp.accepts_start_wave(dp.Rank(current_wave=2), 3, 0, 1)


def test_add_request_takes_a_newer_wave() -> None:
    rank, wakes, events = dp.add_request(dp.Rank(current_wave=1), 2, request_wave=3)
    assert (rank.current_wave, rank.running, rank.work, wakes) == (3, True, 2, True)
    assert dp.REQUEST_WAVE_BUMPS in events
    rank, wakes, events = dp.add_request(rank, 1, request_wave=0)
    assert (rank.current_wave, wakes) == (3, False) and dp.REQUEST_TO_RUNNING in events


def test_sync_steps_are_step_one_and_every_interval() -> None:
    assert [n for n in range(1, 10) if dp.is_sync_step(n, 3)] == [1, 3, 6, 9]
    assert [n for n in range(1, 4) if dp.is_sync_step(n, 1)] == [1, 2, 3]


def test_each_always_property_fails_on_a_state_that_breaks_it() -> None:
    by_name = {p.name: p for p in DP_ALWAYS}
    apart = dp.DPState((dp.Rank(running=True, at_sync=True, step_counter=1),
                        dp.Rank(running=True, at_sync=True, step_counter=2)))
    assert "out of step" in (by_name["dp_lockstep_syncs"].check(CFG, apart) or "")
    stopped = dp.DPState((dp.Rank(work=1), dp.Rank()))
    assert "stopped stepping" in (by_name["dp_stopped_ranks_idle"].check(CFG, stopped) or "")
    dummy = dp.DPState((dp.Rank(work=1, running=True, last_batch="dummy"), dp.Rank()))
    assert "dummy batch" in (by_name["dp_dummy_only_without_work"].check(CFG, dummy) or "")
    assert all(p.check(CFG, dp.initial_state(CFG)) is None for p in DP_ALWAYS)


@pytest.mark.parametrize("name", [m.name for m in MUTANTS if m.config in dp_configs()])
def test_each_dp_spec_mutant_is_killed(name: str) -> None:
    r = run_mutant(MUTANTS_BY_NAME[name])
    assert r.killed, r.violated


def test_a_mutant_trace_replays_to_its_violation() -> None:
    with_and = MUTANTS_BY_NAME["dp_sync_and_not_or"]
    from asyncspec.checker.spec_mutants import applied

    with applied(with_and.patches):
        r = explore_dp(CFG, required_witnesses=())
        v = next(v for v in r.violations if v.property == "dp_stopped_ranks_idle")
        assert isinstance(v.trace, DPTrace)
        last = v.trace.dp_states()[-1][1]
    assert any(not rk.running and rk.work for rk in last.ranks)


def test_bad_dp_configs_are_one_line_errors() -> None:
    with pytest.raises(DPConfigError, match="request 0 must be"):
        dp_config_from_dict({"name": "x", "requests": [[2, 1]]})
    with pytest.raises(DPConfigError, match="dp_sync_interva"):
        dp_config_from_dict({"name": "x", "requests": [[0, 1]], "dp_sync_intervl": 2})
    with pytest.raises(ValueError, match="unknown DP action"):
        parse_dp_action("schedule")
    assert parse_dp_action(str(DPAction(dp.ADD_REQUEST, 2))) == DPAction(dp.ADD_REQUEST, 2)


def test_check_command_runs_the_dp_set(tmp_path: Path) -> None:
    o = invoke("check", "-c", "dp", "--json", "--trace-dir", str(tmp_path))
    assert o.code == 0, o.stderr[-500:]
    data = json.loads(o.stdout)
    assert_matches_schema(data, "check")
    assert [c["name"] for c in data["configs"]] == list(dp_configs())
    assert data["configs"][0]["distinct_states"] == cfgs.load_manifest()["dp-2ranks"]["distinct_states"]
