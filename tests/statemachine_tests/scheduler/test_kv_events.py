"""KV cache events on the ``vllm`` target (``scheduler/kv_events_obs.py``): vLLM's BlockStored,
BlockRemoved and AllBlocksCleared in lock step with the events the spec's block hashes imply.

vLLM must be installed (``.ci/install-vllm``); without it this module fails at collection
(ASYNCSPEC_ALLOW_NO_VLLM=1 skips instead)."""
from __future__ import annotations

from tests.vllm_guard import require_pinned_vllm

from asyncspec.statemachine_tests.core.harness import RequestSpec, Workload, parse_event, run_lockstep
from asyncspec.statemachine_tests.core.workload import kv_events_on
from asyncspec.statemachine_tests.mutation.mutant_traces import HAND_TRACES
from asyncspec.statemachine_tests.scheduler.spec_target import SpecTarget
from asyncspec.statemachine_tests.scheduler.vllm_target import VllmTarget

require_pinned_vllm()


def test_stores_an_eviction_and_a_clear_agree_with_vllm() -> None:
    trace = HAND_TRACES["pool_reset_no_clear_event"]
    w = trace.workload
    result = run_lockstep(w, SpecTarget(w, target="vllm"), VllmTarget(w), [parse_event(e) for e in trace.events])
    assert all(not row.differences for row in result.rows) and len(result.rows) == 15
    seen = {row.index: row.actual.kv_events for row in result.rows if row.actual.kv_events}
    assert seen == {2: (("stored", 0, 0), ("stored", 0, 1)),
                    9: (("removed", 0, 1), ("stored", 1, 0), ("stored", 1, 1)),
                    15: (("cleared", -1, -1),)}


def test_events_are_compared_only_where_the_target_turns_them_on() -> None:
    one = (RequestSpec(9, 3),)
    assert kv_events_on(Workload(one, prefix_caching=True))
    assert not kv_events_on(Workload(one)) and not kv_events_on(Workload(one, prefix_caching=True, kv_connector="toy"))
    w = Workload(one, depth=1)  # no prefix caching: no recorder, nothing expected
    result = run_lockstep(w, SpecTarget(w, target="vllm"), VllmTarget(w),
                          [parse_event(e) for e in ("add_request r0", "schedule", "deliver")])
    assert all(not row.differences and row.actual.kv_events == row.expected.kv_events == () for row in result.rows)
