"""docs/findings_vllm.md, V4: a priority victim whose scheduling is taken back keeps the hashes
``allocate_slots`` gave its blocks in that ``schedule()``; the known-bug switch
``priority-undo-keeps-hash`` counts that divergence apart."""
from __future__ import annotations

from collections.abc import Sequence

from tests.vllm_guard import require_pinned_vllm

from asyncspec.spec import events as ev

from asyncspec.statemachine_tests.core.harness import (
    RunResult, Workload, apply_event, parse_event, run_lockstep,
)
from asyncspec.statemachine_tests.scheduler.known_bugs import classify
from asyncspec.statemachine_tests.scheduler.profiles import PRIORITY_PROFILE, with_known_bugs
from asyncspec.statemachine_tests.scheduler.spec_target import SpecTarget
from asyncspec.statemachine_tests.scheduler.vllm_target import VllmTarget

require_pinned_vllm()

SWITCHED = with_known_bugs(PRIORITY_PROFILE, ["priority-undo-keeps-hash"])

MINIMAL = Workload.from_json({
    "requests": [[1, 5, 0], [1, 1, 0], [4, 1, 0], [4, 2, 0], [1, 1, 0], [1, 1, 0]], "depth": 2, "block_size": 4,
    "num_blocks": 4, "token_budget": 8, "max_num_seqs": 4, "chunked_prefill": True, "prefix_caching": True,
    "policy": "priority", "priorities": [2, 1, 0, 0, 1, 0]})
MINIMAL_EVENTS = ("add_request r0, schedule, schedule, deliver, add_request r1, add_request r2, add_request r3, "
                  "add_request r4, add_request r5, schedule, deliver, schedule, deliver, schedule")

CHUNK = Workload.from_json({
    "requests": [[24, 1, 0], [4, 3, 0]], "depth": 2, "block_size": 4, "num_blocks": 7, "token_budget": 12,
    "chunked_prefill": True, "prefix_caching": True, "policy": "priority", "priorities": [1, 0],
    "long_prefill_token_threshold": 6})
CHUNK_EVENTS = ("add_request r0, schedule, add_request r1, schedule, deliver, schedule, deliver, schedule, deliver, "
                "schedule, deliver, schedule")
"""r0's third prefill chunk (positions 18..23) is taken back: it filled block 4 (positions 16..19)."""


def events(text: str) -> list[str]:
    return [e.strip() for e in text.split(",")]


def lockstep(w: Workload, text: str) -> RunResult:
    return run_lockstep(w, SpecTarget(w), VllmTarget(w), [parse_event(e) for e in events(text)])


def test_minimal_trace_keeps_the_hash_and_is_the_known_bug() -> None:
    result = lockstep(MINIMAL, MINIMAL_EVENTS)
    assert result.diverged and len(result.rows) == 14
    row = result.rows[-1]
    assert ev.PREEMPTED_SCHEDULED_UNDONE in row.spec_events and row.actual.preempted == (0,)
    assert [(d.field, d.expected, d.actual) for d in row.differences] == [
        ("cached_blocks", ((2, 3, 0),), ((0, 0, 0), (2, 3, 0))),
        ("kv_events", (("removed", 2, 0),), (("removed", 2, 0), ("stored", 0, 0)))]  # the kept hash, stored
    assert classify(result, SWITCHED) == "priority-undo-keeps-hash"
    assert classify(result, PRIORITY_PROFILE) is None  # without the switch it is a divergence


def test_taken_back_prefill_chunk_is_hashed_and_hit_on_resume() -> None:
    """The consequence: r0's block 4 is hashed although positions 18 and 19 were scheduled only
    in the taken-back step; resumed, r0 hits blocks 0..4 and vLLM never computes 18 and 19."""
    head = lockstep(CHUNK, ", ".join(events(CHUNK_EVENTS)[:6]))
    assert head.diverged and len(head.rows) == 6 and classify(head, SWITCHED) == "priority-undo-keeps-hash"
    assert (4, 0, 4) in head.rows[-1].actual.cached_blocks
    assert (4, 0, 4) not in head.rows[-1].expected.cached_blocks
    scheduled, hits = vllm_positions(CHUNK, events(CHUNK_EVENTS))
    assert hits == {0: 20}  # the resumed r0 starts at C = 20 (blocks 0..4 hit)
    assert {18, 19}.isdisjoint(scheduled[0]) and set(range(18)) | set(range(20, 24)) == scheduled[0]


def vllm_positions(w: Workload, texts: Sequence[str]) -> tuple[dict[int, set[int]], dict[int, int]]:
    """vLLM alone: the positions each request had in a step that stayed scheduled, and where a
    request resumed (num_computed_tokens before its first step after a preemption)."""
    target = VllmTarget(w)
    scheduled: dict[int, set[int]] = {}
    preempted: set[int] = set()
    hits: dict[int, int] = {}
    for text in texts:
        apply_event(target, w, parse_event(text))
        obs = target.observe()
        counters = dict(obs.requests)
        preempted |= set(obs.preempted)
        for req, n, _ in obs.scheduled:
            start = counters[req].num_computed_tokens - n
            if req in preempted:
                preempted.discard(req)
                hits[req] = start
            scheduled.setdefault(req, set()).update(range(start, start + n))
    return scheduled, hits
