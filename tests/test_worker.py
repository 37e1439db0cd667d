"""Worker model composed with the scheduler spec: W1-W4, witnesses, mutants (fast tier)."""
from __future__ import annotations

import pytest

from asyncspec.checker.configs import load_manifest
from asyncspec.checker.joint import (
    EXPECTATIONS, JointExpectation, JointTrace, explore_joint, run_expectation, small_configs,
)
from asyncspec.checker.worker_mutants import MUTANTS, WorkerMutant, run_worker_mutant
from asyncspec.spec import worker_neuron as neuron
from asyncspec.spec.worker import (
    W_MATERIALIZE_MAIN, WorkerConfig, WorkerState, condense, initial_worker_state, rows_of,
)

# The pinned joint state counts and depths (symmetry on) are the manifest's CONFIG/STRATEGY
# entries (configs/manifest.json); a change means the model changed. History: Neuron was
# re-pinned when the model was held against vllm-neuron 9fc042e (docs/worker.md): the guard
# and _update_states run on empty steps (d2 1670 -> 1622), re-added rows take the scheduler's
# history as in V1 (d3: all hold at 1437 -> the V1 finding, stops at 142), the fallback fixup
# repairs the D=3 stale read (nostagger: finding at 2106 -> holds, 5287).
PINNED = load_manifest()


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
    pin = PINNED[f"{e.config}/{e.strategy}"]
    assert (r.name, r.distinct_states, r.depth) == (f"{e.config}/{e.strategy}", pin["distinct_states"], pin["depth"])


def test_every_worker_pin_has_a_row() -> None:
    rows = {f"{e.config}/{e.strategy}" for e in EXPECTATIONS}
    assert rows == {name for name in PINNED if "/" in name} and len(rows) == len(EXPECTATIONS) == 11


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


def _after_first_step(cfg_name: str) -> WorkerState:
    """The Neuron worker after the first scheduled step of ``cfg_name`` (r0's prefill samples)."""
    from asyncspec.spec import engine
    from asyncspec.spec.state import initial_states

    cfg = small_configs()[cfg_name]
    s1, _ = engine.apply(cfg, initial_states(cfg)[0], engine.Action(engine.SCHEDULE))
    [(ws, _)] = neuron.execute(WorkerConfig("neuron"), initial_worker_state(cfg), rows_of(s1.batch_queue[-1], s1),
                               frozenset())[:1]
    return ws


def test_neuron_empty_step_runs_the_guard_and_empties_the_batch() -> None:
    # vllm-neuron's guard runs before execute_model's early return for an empty
    # SchedulerOutput: the pending output is materialised on the main thread
    # (both ranks) and _update_states drops every (unscheduled) row.
    ws = _after_first_step("worker-d2")
    assert ws.slots == (0, 1) and not ws.outputs[0].actualized
    result = neuron.execute_empty_step(ws, frozenset())
    assert result is not None
    ws2, events = result
    assert ws2.slots == () and ws2.buffer == ws.buffer._replace(off_actualized=True)
    assert ws2.outputs[0].actualized and ws2.outputs[0].materializations == 1
    assert ws2.host[0] == ws2.off_host[0] == (1,)
    assert W_MATERIALIZE_MAIN in events
    assert (ws2.steps, ws2.async_steps, ws2.sync_fallback_steps) == (ws.steps, ws.async_steps,
                                                                      ws.sync_fallback_steps)


def test_neuron_empty_step_waits_for_the_output_threads_lock() -> None:
    ws = _after_first_step("worker-d2")
    waiting, _ = neuron.output_thread_step(ws, neuron.OUTPUT_WAIT)
    assert neuron.execute_empty_step(waiting, frozenset()) is None


def test_neuron_off_rank_host_advances_only_on_main_thread_materialisation() -> None:
    ws = _after_first_step("worker-d2")
    waiting, _ = neuron.output_thread_step(ws, neuron.OUTPUT_WAIT)
    done, _ = neuron.output_thread_step(waiting, neuron.OUTPUT_DONE)
    assert done.host[0] == (1,) and done.off_host[0] == ()


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
