"""Worker model composed with the scheduler spec: W1-W4, witnesses, mutants (fast tier)."""
from __future__ import annotations

import pytest

from asyncspec.checker.joint import (
    EXPECTATIONS, MUTANTS, JointExpectation, JointTrace, WorkerMutant, explore_joint,
    run_expectation, run_worker_mutant, small_configs,
)
from asyncspec.spec.worker import (
    WorkerConfig, condense, initial_worker_state, rows_of,
)

# Pinned joint state counts (symmetry on); a change means the model changed.
PINNED: dict[tuple[str, str], int] = {
    ("worker-d2", "v1"): 400,
    ("worker-d2", "v2"): 400,
    ("worker-d2", "neuron"): 1670,
    ("worker-d3", "v1"): 81,  # stops at the W1 finding
    ("worker-d3", "v2"): 390,
    ("worker-d3", "neuron"): 1437,
    ("worker-d3-nostagger", "v1"): 470,
    ("worker-d3-nostagger", "v2"): 470,
    ("worker-d3-nostagger", "neuron"): 2106,  # stops at the W1 finding
}


@pytest.mark.parametrize("e", EXPECTATIONS, ids=lambda e: f"{e.config}-{e.strategy}")
def test_joint_config(e: JointExpectation) -> None:
    r = run_expectation(e)
    assert not r.partial
    assert r.vacuous == [], f"witnesses never reached: {r.vacuous}"
    found = [v.property for v in r.violations]
    if e.expect_violation is None:
        assert found == [], [v.message for v in r.violations]
    else:
        assert found == [e.expect_violation]
    assert r.ok
    assert r.distinct_states == PINNED[(e.config, e.strategy)]


def test_every_pin_has_a_row() -> None:
    assert {(e.config, e.strategy) for e in EXPECTATIONS} == set(PINNED)


@pytest.mark.parametrize("m", MUTANTS, ids=lambda m: m.name)
def test_mutant_killed(m: WorkerMutant) -> None:
    r = run_worker_mutant(m)
    assert r.killed, f"{m.name} survived (violated: {r.violated})"


def test_every_property_has_a_mutant() -> None:
    props = {m.property for m in MUTANTS}
    assert props == {"W1_feed_is_last_sampled", "W2_materialized_once",
                     "W3_materialize_before_update", "W4_counters_and_efficiency"}


def test_findings_replay_and_name_the_stale_token() -> None:
    for e in EXPECTATIONS:
        if e.expect_violation is None:
            continue
        v = run_expectation(e).violations[0]
        assert "stale" in v.message
        trace = v.trace
        assert isinstance(trace, JointTrace)
        rows = trace.joint_states()
        assert rows[-1][1].worker.errors.w1 is not None
        assert trace.to_json()["worker"]["strategy"] == e.strategy


def test_exploration_is_deterministic() -> None:
    cfg = small_configs()["worker-d2"]
    a = explore_joint(cfg, "neuron")
    b = explore_joint(cfg, "neuron")
    assert (a.distinct_states, a.transitions, a.depth) == (b.distinct_states, b.transitions, b.depth)


def test_condense_fills_holes_from_the_end() -> None:
    assert condense((0, 1, 2), {0, 2}) == (0, 2)
    assert condense((0, 1, 2), {1, 2}) == (2, 1)
    assert condense((0, 1, 2, 3), {1, 3}) == (3, 1)
    assert condense((0, 1), set()) == ()


def test_rows_of_first_step() -> None:
    from asyncspec.spec import engine
    from asyncspec.spec.state import initial_states

    cfg = small_configs()["worker-d2"]
    s0 = initial_states(cfg)[0]
    s1, _ = engine.apply(cfg, s0, engine.Action(engine.SCHEDULE))
    rows = rows_of(s1.batch_queue[-1], s1)
    assert [(r.req, r.first_pos, r.last_pos, r.sampled_position, r.is_decode) for r in rows] == [
        (0, 0, 1, 1, False), (1, 0, 0, 0, False)]
    assert initial_worker_state(cfg).steps == 0
    assert WorkerConfig("neuron").bucket(2) == 4
