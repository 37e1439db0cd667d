"""Streaming-input sessions in differential fuzzing: the events, the workload and its replay
file, vLLM's real scheduler in lock step with the spec, finding V8, the ``streaming`` part.

vLLM must be installed (``.ci/install-vllm``); without it this module fails at collection
(ASYNCSPEC_ALLOW_NO_VLLM=1 skips instead)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.cli_contract import assert_matches_schema
from tests.vllm_guard import require_pinned_vllm

from asyncspec.statemachine_tests.core.harness import (
    STREAM_CLOSE, STREAM_UPDATE, Event, RequestSpec, Unsupported, Workload, apply_event, parse_event, run_lockstep,
    workload_problem,
)
from asyncspec.statemachine_tests.core.replay_file import replay_problem
from asyncspec.statemachine_tests.scheduler.fuzz import fuzz_main
from asyncspec.statemachine_tests.scheduler.fuzz_example import planned_events
from asyncspec.statemachine_tests.scheduler.known_bugs import classify
from asyncspec.statemachine_tests.scheduler.profiles import (
    ALL_PROFILE, PROFILES, STREAMING_PROFILE, part_names, reference_gaps, with_known_bugs,
)
from asyncspec.statemachine_tests.scheduler.spec_target import SpecTarget
from asyncspec.statemachine_tests.scheduler.vllm_target import VllmTarget

require_pinned_vllm()

SESSION = Workload(requests=(RequestSpec(2, 2, 1), RequestSpec(2, 1)), depth=2, block_size=2, num_blocks=8,
                   token_budget=8, max_num_seqs=2, resumable=(0,), stream_updates=((2, 2),))


def _events(text: str) -> list[Event]:
    return [parse_event(e.strip()) for e in text.split(",")]


def test_stream_events_parse_and_print() -> None:
    for text in ("stream_update r0", "stream_close r3"):
        assert str(parse_event(text)) == text
    assert parse_event("stream_close r1") == Event(STREAM_CLOSE, 1) and Event(STREAM_UPDATE, 0).req == 0
    with pytest.raises(ValueError, match="needs a request name"):
        parse_event("stream_update")


def test_the_workload_round_trips_and_bad_sessions_are_one_line_problems() -> None:
    data = json.loads(json.dumps(SESSION.to_json()))
    assert Workload.from_json(data) == SESSION and workload_problem(SESSION) is None
    assert replay_problem({"asyncspec_fuzz_replay": 1, "workload": data, "events": ["stream_update r0"]}) is None
    bad = {**data, "stream_updates": [[1]]}
    assert "stream_updates" in str(replay_problem({"asyncspec_fuzz_replay": 1, "workload": bad, "events": []}))
    for w, why in ((Workload(requests=(RequestSpec(2, 1),), prefix_caching=True, resumable=(0,)), "prefix caching"),
                   (Workload(requests=(RequestSpec(2, 1),), stream_updates=((1, 1),)), "needs resumable"),
                   (Workload(requests=(RequestSpec(2, 1),), resumable=(0,), stream_updates=((0, 1),)), "at least 1")):
        assert why in str(workload_problem(w))


def test_a_session_pauses_resumes_and_ends_in_lock_step_with_vllm() -> None:
    """EOS at output 1 with output 2 in flight: the turn stops, its in-flight output is dropped, the
    session pauses holding its blocks; its update resumes it (the kept output is prompt); its
    stream's end finishes it at the next stop."""
    oracle = SpecTarget(SESSION, target="vllm")  # the drain: the engine loop, a paused session's next input
    result = run_lockstep(SESSION, oracle, VllmTarget(SESSION), planned_events(SESSION, oracle, ()))
    assert not result.diverged, result.rows[-1].differences
    statuses = [dict(r.expected.requests)[0].status for r in result.rows]
    assert "WAITING_FOR_STREAMING_REQ" in statuses and statuses[-1] in ("STOPPED", "LENGTH", "ABORTED")
    assert max(r.expected.num_waiting_for_streaming_input for r in result.rows) == 1
    assert {"stream_stop_in_flight", "stream_pause", "stream_resume", "stream_end"} <= set(result.coverage)
    assert [str(r.event) for r in result.rows if "stream" in r.event.kind] == ["stream_update r0", "stream_close r0"]


def test_finding_v8_a_reset_while_a_session_holds_its_blocks_raises_in_vllm() -> None:
    """docs/findings_vllm.md, V8: the shrunk trace; the spec keeps the hashes (the pool is not all
    free), vLLM raises the misleading RuntimeError of V1, counted apart behind its switch."""
    w = Workload(requests=(RequestSpec(1, 1),), block_size=4, num_blocks=8, token_budget=8, max_num_seqs=2,
                 reset_prefix_cache=1, resumable=(0,))
    events = _events("add_request r0, schedule, schedule, deliver, deliver, reset_prefix_cache")
    result = run_lockstep(w, SpecTarget(w, target="vllm"), VllmTarget(w), events)
    first = result.rows[-1].differences[0]
    assert result.diverged and first.field == "error" and str(first.actual).startswith("RuntimeError: Failed to reset")
    assert "reset_prefix_cache_failed" in result.rows[-1].spec_events
    assert classify(result, with_known_bugs(STREAMING_PROFILE, ["reset-with-session"])) == "reset-with-session"
    assert classify(result, STREAMING_PROFILE) is None


def test_a_target_without_sessions_refuses_their_events() -> None:
    class NoSessions:
        name = "plain"

    with pytest.raises(Unsupported, match="no streaming-input sessions"):
        apply_event(NoSessions(), SESSION, Event(STREAM_UPDATE, 0))  # type: ignore[arg-type]


def test_the_streaming_part_is_in_the_default_mix_and_not_on_the_reference() -> None:
    assert part_names(ALL_PROFILE)[15] == "streaming" and PROFILES["streaming"] is STREAMING_PROFILE  # issue 28 parts follow
    assert reference_gaps(STREAMING_PROFILE) == ["streaming-input sessions"]
    assert {"stream_stop_in_flight", "stream_resume"} <= set(ALL_PROFILE.reported_categories())


def test_a_short_streaming_campaign_on_vllm_is_clean_and_reaches_its_categories(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc = fuzz_main("vllm", 600.0, 0, True, False, tmp_path, STREAMING_PROFILE, examples=20)
    data = json.loads(capsys.readouterr().out)
    assert_matches_schema(data, "fuzz")
    assert rc == 0 and data["divergences"] == 0 and data["parts"] == {"streaming": 20}
    assert data["coverage"]["stream_stop_in_flight"] > 0 and data["coverage"]["stream_resume"] > 0



def test_the_reset_with_session_switch_counts_finding_v8_apart(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``--known-bug reset-with-session``: resets are drawn beside sessions (the drain resets right
    after a pause) and each V8 divergence is counted apart; the run stays clean."""
    profile = with_known_bugs(STREAMING_PROFILE, ["reset-with-session"])
    rc = fuzz_main("vllm", 600.0, 0, True, False, tmp_path, profile, examples=20)
    data = json.loads(capsys.readouterr().out)
    assert rc == 0 and data["divergences"] == 0 and data["profile"] == "streaming+reset-with-session"
    assert data["known_bug_divergences"].get("reset-with-session", 0) > 0


STREAM_MUTANT_KILLS = {
    "stream_stop_keeps_optimistic": ".num_computed_tokens",
    "stream_late_token_delivered": ".drop_stale_output",
    "stream_paused_slot_free": "scheduled",
    "stream_abort_paused_uncounted": "num_waiting_for_streaming_input",
}
"""The streaming-input vLLM mutants (``engine/vllm/mutants_sched.py``) and the first field that
differs when ``--target vllm`` kills each, in the mix's ``streaming`` shard (shard 15 of the 16-part mix,
examples 300-319)."""


@pytest.mark.slow
@pytest.mark.parametrize("mutant_id", sorted(STREAM_MUTANT_KILLS))
def test_the_streaming_mutants_are_killed_by_the_scheduler_target(mutant_id: str) -> None:
    """``asyncspec mutate-vllm --target vllm --only ID``: measured 24-54 s each on a shared 2-core
    machine (docs/fuzzing.md, "Streaming input")."""
    from asyncspec.statemachine_tests.mutation.mutate_vllm import run_worker

    r = run_worker(mutant_id, "vllm", examples=320, seed=0, timeout=900)
    assert r.killed and r.how == "divergence" and r.loaded, r
    assert r.died_at_example is not None and 300 < r.died_at_example <= 320, r
    assert STREAM_MUTANT_KILLS[mutant_id] in r.detail, r
