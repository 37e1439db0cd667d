"""Hand-written traces that kill scheduler-side vLLM mutants, one mutant each.

    python -m asyncspec.statemachine_tests.mutation.mutant_traces MUTANT [--on none]

Each trace is a workload and its events, run in lockstep on the spec and vLLM's
scheduler (``--target vllm``), and the first difference the mutant causes:
the event it shows at and the observation field.  The command installs the
mutant's overlay (``engine/vllm/overlay.py``) before vLLM is imported, runs the
trace and prints one JSON object: the event and field of the first difference
(null when none).  ``--on none`` runs the same trace on vLLM as installed,
which must not differ.  These are the inputs the self-test's campaign needs
for the mutants it killed last or not at all (docs/fuzzing.md, "Scheduler-side
mutants"); ``tests/statemachine_tests/mutation/test_mutant_streams.py`` runs each.
"""
from __future__ import annotations

import argparse
import json
import sys
from typing import NamedTuple

from asyncspec.statemachine_tests.core.harness import RequestSpec, Workload, parse_event, run_lockstep


class HandTrace(NamedTuple):
    """A workload, its events, and where the mutant's first difference shows."""

    workload: Workload
    events: tuple[str, ...]
    event: int  # 1-based index of the event whose observation differs
    field: str  # the first differing field (harness.compare)


_EVENTS = Workload((RequestSpec(9, 3), RequestSpec(9, 3)), depth=1, num_blocks=4, prefix_caching=True,
                   reset_prefix_cache=1)
_EVENT_TRACE = ("add_request r0",) + ("schedule", "deliver") * 3 + ("add_request r1",) + ("schedule", "deliver") * 3 + (
    "reset_prefix_cache",)

HAND_TRACES: dict[str, HandTrace] = {
    # CachedRequestData.num_output_tokens leaves out the placeholder of the step in flight
    "sched_output_count_no_placeholders": HandTrace(
        Workload((RequestSpec(3, 4),), depth=2),
        ("add_request r0", "schedule", "schedule"), 3, "payload"),
    # reset_prefix_cache preempts the oldest first, so they return newest first
    "sched_reset_preempts_oldest_first": HandTrace(
        Workload((RequestSpec(3, 4), RequestSpec(3, 4)), depth=2, reset_prefix_cache=1),
        ("add_request r0", "add_request r1", "schedule", "reset_prefix_cache"), 4, "waiting"),
    # a second reset before the first step's output adds the stale share twice (free loop only)
    "sched_preempt_stale_accumulates": HandTrace(
        Workload((RequestSpec(3, 6),), depth=2, num_blocks=8, reset_prefix_cache=2, loop="free"),
        ("add_request r0", "schedule", "reset_prefix_cache", "schedule", "reset_prefix_cache"), 5,
        "r0.num_stale_output_tokens"),
    # r1 preempted by KV pressure with a step in flight (drop mode) when its 4 known tokens fill the
    # block cached when they were scheduled: re-admitted, its full hit leaves no token to compute and
    # vLLM asserts (SELF_HIT_PROFILE, shrunk)
    "kv_full_prefix_hit": HandTrace(
        Workload((RequestSpec(13, 6), RequestSpec(1, 5)), depth=2, num_blocks=6, prefix_caching=True,
                 stale_mode="drop"),
        ("add_request r0", "add_request r1") + ("schedule", "schedule") + ("deliver", "schedule") * 6, 16, "error"),
    # depth 3: r3 preempted in pass 1 with a step in flight (deliver mode); the next schedule()
    # must skip it while that output is in flight (depth3, shrunk)
    "sched_no_stale_resume_skip": HandTrace(
        Workload((RequestSpec(4, 2), RequestSpec(9, 1), RequestSpec(1, 1), RequestSpec(3, 1), RequestSpec(1, 1)),
                 depth=3, num_blocks=6),
        ("add_request r0", "add_request r1", "add_request r2", "add_request r3", "add_request r4",
         "schedule", "schedule", "schedule", "deliver", "schedule"), 10, "scheduled"),
    # the same skip; the skipped r3 must stay ahead of r4 in waiting (depth3, shrunk)
    "sched_skipped_to_back": HandTrace(
        Workload((RequestSpec(1, 2), RequestSpec(1, 2), RequestSpec(4, 2), RequestSpec(3, 1), RequestSpec(1, 1)),
                 depth=3, num_blocks=4, token_budget=8),
        ("add_request r0", "add_request r1", "add_request r2", "add_request r3", "add_request r4",
         "schedule", "schedule", "schedule", "deliver", "schedule"), 10, "waiting"),
    # images: r0's item 0 and r1's item 1 freeable, oldest first; in one pass r2's item 2 evicts item 0
    # and r3's item 0 evicts item 1 to be allocated again: only item 1 may be sent as freed (vllm#52482)
    "ecm_freed_unfiltered": HandTrace(
        Workload((RequestSpec(3, 1),) * 4, depth=2, block_size=2, num_blocks=16, token_budget=6, max_num_seqs=4,
                 aborts=False, images=((0, 0, 2, 0), (1, 0, 2, 1), (2, 0, 2, 2), (3, 0, 2, 0)),
                 encoder_cache_size=4, encoder_compute_budget=4),
        ("add_request r0", "add_request r1", "schedule", "schedule", "deliver", "add_request r2", "add_request r3",
         "schedule"), 8, "encoder.freed"),
    # KV cache events (kv_events_obs.py): r0's two full prompt blocks stored at its first schedule(),
    # one evicted for r1 (a pool of 4), then a reset clears the cache
    "pool_stored_event_no_hashes": HandTrace(_EVENTS, _EVENT_TRACE[:2], 2, "kv_events"),
    "pool_evict_no_removed_event": HandTrace(_EVENTS, _EVENT_TRACE[:9], 9, "kv_events"),
    "pool_reset_no_clear_event": HandTrace(_EVENTS, _EVENT_TRACE, 15, "kv_events"),
    # check_stop (spec/stop.py): r0's EOS at output 2, below its min_tokens of 4, still stops it
    "stop_min_tokens_holds_eos": HandTrace(
        Workload((RequestSpec(3, 6, 2),), depth=1, stops=((0, 0, 4, 0, 0, 0, 0),)),
        ("add_request r0",) + ("schedule", "deliver") * 2, 5, "finished"),
    # r0's stop token at output 2: FINISHED_STOPPED with the token as its stop_reason
    "stop_token_no_reason": HandTrace(
        Workload((RequestSpec(3, 6, 2),), depth=1, stops=((0, 1, 0, 0, 0, 0, 0),)),
        ("add_request r0",) + ("schedule", "deliver") * 2, 5, "r0.stop_reason"),
    # r0 repeats one token from output 1 (min_count 2: detectable at 2), held back to its min_tokens of 5
    "stop_repetition_ignores_min_tokens": HandTrace(
        Workload((RequestSpec(2, 8, 1),), depth=1, stops=((0, 2, 5, 1, 1, 2, 1),)),
        ("add_request r0",) + ("schedule", "deliver") * 2, 5, "finished"),
    # the same repetition without min_tokens: FINISHED_REPETITION at output 2
    "stop_repetition_as_stopped": HandTrace(
        Workload((RequestSpec(2, 8, 1),), depth=1, stops=((0, 2, 0, 1, 1, 2, 1),)),
        ("add_request r0",) + ("schedule", "deliver") * 2, 5, "finished"),
    # one token repeated from output 3, min_count 3: detected at output 5, not at 4
    "stop_repetition_one_period_early": HandTrace(
        Workload((RequestSpec(2, 8, 3),), depth=1, stops=((0, 2, 0, 1, 1, 3, 1),)),
        ("add_request r0",) + ("schedule", "deliver") * 4, 9, "finished"),
}


def first_difference(mutant: str) -> tuple[int, str] | None:
    """Run ``mutant``'s trace on the spec and vLLM as imported now: the first difference
    (event index, field), or None.  Installing the mutant is the caller's business."""
    from asyncspec.statemachine_tests.scheduler.spec_target import SpecTarget
    from asyncspec.statemachine_tests.scheduler.vllm_target import VllmTarget

    trace = HAND_TRACES[mutant]
    w = trace.workload
    result = run_lockstep(w, SpecTarget(w, target="vllm"), VllmTarget(w), [parse_event(e) for e in trace.events])
    row = result.rows[-1]
    return (row.index, row.differences[0].field) if row.differences else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="mutant_traces")
    parser.add_argument("mutant", choices=sorted(HAND_TRACES))
    parser.add_argument("--on", choices=("mutant", "none"), default="mutant",
                        help="none: the same trace on vLLM as installed")
    args = parser.parse_args(argv)
    if args.on == "mutant":
        from asyncspec.engine.vllm.vllm_mutants import MUTANTS_BY_ID
        from asyncspec.engine.vllm.overlay import install

        install(MUTANTS_BY_ID[args.mutant])
    found = first_difference(args.mutant)
    print(json.dumps({"mutant": args.mutant, "on": args.on,
                      "event": found[0] if found else None, "field": found[1] if found else None}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
