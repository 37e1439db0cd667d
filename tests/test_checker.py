"""The explorer on the named configs: pinned counts, witnesses, findings, determinism."""
from __future__ import annotations

import dataclasses

import pytest

from asyncspec.checker import configs as cfgs
from asyncspec.checker.bfs import Explorer, explore
from asyncspec.checker.result import CheckResult

from tests.plain_runs import plain_run
from asyncspec.checker.trace import load_trace, save_trace
from asyncspec.spec import request as rq
from asyncspec.spec.algebra import CONCRETE as A
from asyncspec.spec.config import SpecConfig
from asyncspec.spec.properties import expected_output

FAST = [c.name for c in cfgs.config_set("default") + cfgs.config_set("finding")]


def explored(name: str) -> CheckResult:
    """The plain explorer's whole result of a named config, computed once per test session."""
    return plain_run(name)[1]


@pytest.mark.parametrize("name", FAST)
def test_named_config_matches_its_pinned_counts(name: str) -> None:
    r = explored(name)
    pinned = cfgs.load_manifest()[name]
    assert (r.distinct_states, r.depth) == (pinned["distinct_states"], pinned["depth"])
    assert r.ok, [v.message for v in r.violations] + r.vacuous


@pytest.mark.slow
@pytest.mark.parametrize("name", [c.name for c in cfgs.config_set("slow")])
def test_slow_config_matches_its_pinned_counts(name: str) -> None:
    cfg = cfgs.named_configs()[name]
    r = explore(cfg)
    pinned = cfgs.load_manifest()[name]
    assert (r.distinct_states, r.depth) == (pinned["distinct_states"], pinned["depth"]) and r.ok


def test_the_default_set_reaches_every_witness_the_issue_names() -> None:
    reached: set[str] = set()
    for cfg in cfgs.config_set("default"):
        reached |= {w for w, hit in explored(cfg.name).witnesses.items() if hit}
    needed = {"max_tokens_guard", "wasted_step", "preemption_in_flight_deliver",
              "preemption_in_flight_drop", "stale_delivery", "deferred_free_drained",
              "chunked_prefill", "empty_step"}
    assert needed <= reached


def test_an_unreachable_required_witness_fails_the_config_as_vacuous() -> None:
    cfg = SpecConfig(name="vac", requests=((2, 1),), num_blocks=2, extra={"witnesses": ("preemption",)})
    r = explore(cfg)
    assert not r.violations and r.vacuous == ["preemption"] and not r.ok


def test_findings_report_exactly_the_expected_property() -> None:
    for cfg in cfgs.config_set("finding"):
        r = explore(cfg, stop_on_first=False)
        assert {v.property for v in r.violations} == {cfg.expect_violation}


def test_exploration_is_deterministic() -> None:
    cfg = cfgs.named_configs()["finding-d3-no-stagger"]
    a, b = explore(cfg), explore(cfg)
    assert [str(x) for x in a.violations[0].trace.actions] == [str(x) for x in b.violations[0].trace.actions]
    ea, eb = Explorer(cfg), Explorer(cfg)
    ea.run(), eb.run()
    assert ea.graph.states == eb.graph.states


def test_symmetry_reduction_keeps_the_verdict_and_shrinks_the_space() -> None:
    cfg = cfgs.named_configs()["async-free"]
    reduced, concrete = explore(cfg), explore(cfg, symmetry=False)
    assert reduced.ok and concrete.ok
    assert reduced.distinct_states < concrete.distinct_states
    assert reduced.witnesses == concrete.witnesses


def test_max_states_gives_a_partial_result() -> None:
    r = explore(cfgs.named_configs()["async-free"], max_states=50)
    assert r.partial and "max-states" in r.partial_reason and not r.ok
    assert r.distinct_states >= 50


def test_violation_trace_is_shortest_and_replays(tmp_path) -> None:  # type: ignore[no-untyped-def]
    cfg = cfgs.named_configs()["finding-d3-no-stagger"]
    v = explore(cfg).violations[0]
    path = tmp_path / "t.json"
    save_trace(v.trace, path)
    back = load_trace(path)
    rows = back.states()
    assert len(rows) == len(v.trace.actions) + 1
    last = rows[-1][1]
    assert any(c.status == rq.FINISHED_LENGTH_CAPPED and c.num_wasted_steps for c in last.counters)
    # BFS: no shorter prefix already violates
    for k in range(len(rows) - 1):
        assert all(c.num_wasted_steps == 0 or c.status != rq.FINISHED_LENGTH_CAPPED for c in rows[k][1].counters)


def _final_outputs(cfg: SpecConfig) -> dict[tuple[int, ...], set[tuple[tuple[int, int], ...]]]:
    ex = Explorer(cfg)
    ex.run()
    out: dict[tuple[int, ...], set[tuple[tuple[int, int], ...]]] = {}
    for i, succ in enumerate(ex.graph.edges):
        if succ:
            continue
        s = ex.graph.states[i]
        eos = tuple(p.eos_position for p in s.params)
        out.setdefault(eos, set()).add(tuple((c.num_output_tokens, c.status) for c in s.counters))
    return out


@pytest.mark.parametrize("depth", [2, 3])
def test_async_final_output_equals_the_synchronous_engine(depth: int) -> None:
    base = SpecConfig(name="eq", requests=((3, 2), (2, 3)), token_budget=4, block_size=2,
                      num_blocks=3, batch_queue_depth=1)
    sync = _final_outputs(base)
    deep = _final_outputs(dataclasses.replace(base, batch_queue_depth=depth))
    assert sync.keys() == deep.keys()
    for eos, outcomes in sync.items():
        assert len(outcomes) == 1 and deep[eos] == outcomes
        (outcome,) = outcomes
        params = [rq.RequestParams(p, m, e) for (p, m), e in zip(base.requests, eos)]
        assert outcome == tuple(expected_output(p) for p in params)


def test_wasted_steps_follow_the_eos_position() -> None:
    """EOS at the 1st token wastes one step at depth 2; max_tokens wastes none."""
    cfg = SpecConfig(name="w", requests=((2, 3),), batch_queue_depth=2, num_blocks=2, block_size=4)
    ex = Explorer(cfg)
    ex.run()
    finals = {s.params[0].eos_position: s.counters[0].num_wasted_steps
              for i, s in enumerate(ex.graph.states) if not ex.graph.edges[i]}
    assert finals == {0: 0, 1: 1, 2: 1, 3: 0}
    assert rq.is_finished(A, ex.graph.states[-1].counters[0])


def test_ctrl_c_gives_a_partial_report(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from asyncspec.spec import engine

    real, calls = engine.next_states, {"n": 0}

    def interrupted(cfg, s):  # type: ignore[no-untyped-def]
        calls["n"] += 1
        if calls["n"] == 30:
            raise KeyboardInterrupt
        return real(cfg, s)

    monkeypatch.setattr(engine, "next_states", interrupted)
    r = explore(cfgs.named_configs()["async-free"])
    assert r.partial and r.partial_reason == "interrupted" and not r.ok
    assert r.distinct_states > 0
