"""Speculative decoding, structured output and the enablement decision against vLLM 0.33.0.

Fast tier: short deterministic fuzzes of the ``spec-decode`` and
``structured-output`` profiles, hand-written traces, seeded bugs on either
side, the known spec gap (docs/findings_vllm.md, V2) and a corner of the enablement grid
(``enablement_check``: every rule and vLLM outcome).  Slow tier: the whole grid.  Campaign
tier: the time-bounded fuzz of both profiles.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from tests.vllm_guard import require_pinned_vllm

from asyncspec.spec import request as rq

from asyncspec.statemachine_tests.scheduler.campaign import Campaign, coverage_counts
from asyncspec.statemachine_tests.scheduler.fuzz import fuzz_main
from asyncspec.statemachine_tests.scheduler.profiles import (
    SPEC_DECODE_PROFILE, STRUCTURED_OUTPUT_PROFILE, Profile,
)
from asyncspec.statemachine_tests.core.harness import Event, RequestSpec, Workload, parse_event, run_lockstep
from asyncspec.statemachine_tests.scheduler.spec_target import SpecTarget
from asyncspec.statemachine_tests.scheduler.vllm_target import VllmTarget

require_pinned_vllm()

ADD0, ADD1 = Event("add_request", 0), Event("add_request", 1)
SCHED, DELIVER = Event("schedule"), Event("deliver")


def campaign(profile: Profile, batches: int, seed: int = 0) -> Campaign:
    c = Campaign("vllm", seconds=3600, seed=seed, profile=profile, max_batches=batches)
    c.run()
    return c


def test_event_with_acceptance_round_trips() -> None:
    e = Event("deliver", None, ((0, 1), (2, 0)))
    assert str(e) == "deliver accept=r0:1,r2:0" and parse_event(str(e)) == e
    with pytest.raises(ValueError):
        parse_event("deliver accept=0:1")


# ---------------------------------------------------------------- speculative decoding


def test_spec_decode_conformance_fuzz() -> None:
    """k in {1, 2}, depth 1 and 2: no divergence; rejections and full acceptances both seen."""
    c = campaign(SPEC_DECODE_PROFILE, batches=4)
    assert c.found is None, f"divergence: {c.found.rows[-1].differences if c.found else ''}"
    counts = coverage_counts(c.stats.coverage, SPEC_DECODE_PROFILE)
    assert counts["spec_decode_rejection"] > 0 and counts["spec_decode_all_accepted"] > 0, counts


def test_rejection_rolls_back_like_the_spec() -> None:
    """Async, k = 2: the second step's drafts are rejected, C and H roll back by 2 in both,
    and the worker's correction makes the in-flight step sample position 3, not 5."""
    w = Workload(requests=(RequestSpec(6, 8, 0),), num_speculative_tokens=2)
    events = [ADD0, SCHED, SCHED, DELIVER, SCHED, Event("deliver", None, ((0, 0),)),
              SCHED, Event("deliver", None, ((0, 2),))]
    result = run_lockstep(w, SpecTarget(w), VllmTarget(w), events)
    assert not result.diverged, result.rows[-1].differences
    assert result.rows[2].actual.scheduled == ((0, 3, 2),)  # 1 + 2 drafts, samples position 2
    before, after = (result.rows[i].actual.requests[0][1] for i in (4, 5))
    assert after.num_computed_tokens == before.num_computed_tokens - 2  # both drafts rolled back
    assert [len(t) for _, t in result.rows[7].actual.delivered] == [3]  # 2 accepted + 1


def test_sync_drafts_come_from_the_worker() -> None:
    """Depth 1: drafts reach the scheduler through update_draft_token_ids (post_step)."""
    w = Workload(requests=(RequestSpec(5, 6, 0),), depth=1, num_speculative_tokens=2)
    events = [ADD0, SCHED, DELIVER, SCHED, Event("deliver", None, ((0, 1),)), SCHED]
    result = run_lockstep(w, SpecTarget(w), VllmTarget(w), events)
    assert not result.diverged, result.rows[-1].differences
    assert result.rows[2].actual.requests[0][1].num_spec_token_ids == 2
    assert result.rows[3].actual.scheduled == ((0, 3, 2),)


def test_seeded_spec_bug_rejection_keeps_computed() -> None:
    """The spec mutant ``rejection_keeps_computed``: vLLM rolls C back, the mutant does not."""
    w = Workload(requests=(RequestSpec(6, 8, 0),), num_speculative_tokens=2)
    events = [ADD0, SCHED, SCHED, DELIVER, SCHED, Event("deliver", None, ((0, 0),))]
    original = rq.reject_drafts
    try:
        rq.reject_drafts = lambda A, c, num_rejected, is_stale: original(A, c, num_rejected, is_stale)._replace(
            num_computed_tokens=c.num_computed_tokens)
        result = run_lockstep(w, SpecTarget(w), VllmTarget(w), events)
    finally:
        rq.reject_drafts = original
    assert result.diverged and len(result.rows) == 6
    assert "r0.num_computed_tokens" in [d.field for d in result.rows[-1].differences]


def test_single_token_admission_is_padded_as_vllm_does() -> None:
    """docs/findings_vllm.md, V2 (fixed in the spec): vLLM pads a 1-token admission
    behind running decodes to 1 + k positions (``pad_spec_decode``); so does the spec."""
    w = Workload(requests=(RequestSpec(4, 4, 0), RequestSpec(1, 3, 0)), num_speculative_tokens=2)
    result = run_lockstep(w, SpecTarget(w), VllmTarget(w), [ADD0, SCHED, Event("add_request", 1), SCHED])
    assert not result.diverged and len(result.rows) == 4
    assert result.rows[-1].expected.scheduled == ((0, 3, 2), (1, 3, 1))


# ---------------------------------------------------------------- structured output


def test_structured_output_conformance_fuzz() -> None:
    """Grammar requests (with and without drafts): deferral seen, no divergence, no gap."""
    c = campaign(STRUCTURED_OUTPUT_PROFILE, batches=4)
    assert c.found is None, f"divergence: {c.found.rows[-1].differences if c.found else ''}"
    counts = coverage_counts(c.stats.coverage, STRUCTURED_OUTPUT_PROFILE)
    assert counts["structured_output_deferral"] > 0, counts


def test_deferred_sampling_keeps_the_grammar_in_order() -> None:
    w = Workload(requests=(RequestSpec(4, 4, 0), RequestSpec(5, 3, 0)), structured_output=(0,),
                 num_speculative_tokens=1)
    target = VllmTarget(w)
    events = [ADD0, ADD1, SCHED, SCHED, DELIVER, SCHED, Event("deliver", None, ((0, 0), (1, 0)))]
    result = run_lockstep(w, SpecTarget(w), target, events)
    assert not result.diverged, result.rows[-1].differences
    assert result.rows[3].actual.sampling_deferred and result.rows[3].actual.num_in_flight_steps == 1
    assert not result.rows[4].actual.sampling_deferred
    grammar = target.driver.grammars["r0"]
    assert grammar.accepted == list(result.rows[-1].actual.requests[0][1].output_tokens)
    assert not any(obs.grammar_gap for _, obs in result.rows[-1].actual.requests)


def test_seeded_vllm_bug_no_deferral_is_a_grammar_gap(monkeypatch: pytest.MonkeyPatch) -> None:
    """vLLM never setting pending_structured_output_tokens: the bitmask is built before
    the previous token is known; the spec defers."""
    from vllm.v1.core.sched.async_scheduler import AsyncScheduler

    original = AsyncScheduler._update_after_schedule

    def no_pending(self: Any, out: Any) -> None:
        original(self, out)
        out.pending_structured_output_tokens = False

    monkeypatch.setattr(AsyncScheduler, "_update_after_schedule", no_pending)
    w = Workload(requests=(RequestSpec(4, 4, 0),), structured_output=(0,))
    result = run_lockstep(w, SpecTarget(w), VllmTarget(w), [ADD0, SCHED, SCHED])
    assert result.diverged
    fields = [d.field for d in result.rows[-1].differences]
    assert "sampling_deferred" in fields and "r0.grammar_gap" in fields, fields


# ---------------------------------------------------------------- enablement


CORNERS = [  # (flag, runner, method, PP, V2, platform, custom executor, unpadded): one per rule and outcome
    (None, "generate", None, 1, False, "cuda", False, False),  # on: auto-on
    (None, "generate", None, 1, False, "cpu", False, False),  # off: platform-cpu
    (None, "generate", None, 2, False, "cuda", False, False),  # off: v1-runner-incompatible
    (None, "pooling", None, 1, False, "cuda", False, False),  # off: pooling-model
    (True, "generate", None, 1, False, "cuda", False, False),  # on: explicit-on
    (True, "generate", None, 2, False, "cuda", False, False),  # error: v1-runner-incompatible
    (False, "generate", None, 1, False, "cuda", False, False),  # off: explicit-off
    (None, "generate", None, 1, False, "cuda", True, False),  # off: executor-unsupported
    (True, "generate", None, 1, False, "cuda", True, False),  # error: executor-unsupported
    (True, "generate", "ngram", 1, False, "cuda", False, False),  # error: spec decode on the V1 runner
    (None, "generate", "eagle3", 1, True, "cuda", False, False),  # on: eagle3 on the V2 runner
    (True, "generate", "eagle3", 1, True, "cuda", False, True),  # eagle3, disable_padded_drafter_batch
    (None, "generate", "ngram_gpu", 1, True, "cpu", False, False),  # off: the CPU hook over spec decode
]
"""The default tier's corner of the enablement grid: every rule and every vLLM outcome of the
whole grid (``slow``), each built as a real ``VllmConfig``."""


def _assert_agrees_with_every_rule_and_outcome(rows: Any) -> list[Any]:
    """Our decision equals vLLM's on every row; every vLLM outcome and every rule is among the rows
    compared (the rest are skipped with a reason). Returns the compared rows."""
    bad = [f"{r.describe()}: vllm={r.vllm}/{r.vllm_depth}/{r.vllm_scheduler} ours={r.ours}"
           for r in rows if not r.agrees]
    assert bad == []
    compared = [r for r in rows if not r.skipped]
    assert all(r.reason for r in rows if r.skipped)
    assert {r.vllm for r in compared} == {"on", "off", "error"}
    assert {r.ours.rule for r in compared} >= {"explicit-off", "explicit-on", "auto-on", "pooling-model",
                                               "executor-unsupported", "v1-runner-incompatible",
                                               "platform-cpu"}
    return compared


def test_enablement_decision_matches_vllm_on_a_corner_of_the_grid() -> None:
    from asyncspec.statemachine_tests.scheduler.enablement_check import check_grid, grid

    assert set(CORNERS) <= set(grid())
    rows = check_grid(CORNERS)  # type: ignore[arg-type]
    compared = _assert_agrees_with_every_rule_and_outcome(rows)
    assert len(compared) == len(CORNERS)


@pytest.mark.slow
def test_enablement_decision_matches_vllm_on_the_grid() -> None:
    from asyncspec.statemachine_tests.scheduler.enablement_check import check_grid

    rows = check_grid()
    compared = _assert_agrees_with_every_rule_and_outcome(rows)
    assert len(compared) >= 200


# ---------------------------------------------------------------- campaign tier


@pytest.mark.campaign
@pytest.mark.parametrize("profile", ["spec-decode", "structured-output"])
def test_vllm_feature_fuzz_campaign(profile: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from asyncspec.statemachine_tests.scheduler.profiles import PROFILES

    seconds = float(os.environ.get("ASYNCSPEC_FUZZ_SECONDS", "300"))
    rc = fuzz_main("vllm", seconds, int(os.environ.get("ASYNCSPEC_FUZZ_SEED", "0")), True, False,
                   tmp_path, profile=PROFILES[profile])
    data: dict[str, Any] = json.loads(capsys.readouterr().out)
    assert rc == 0 and data["divergences"] == 0
    assert data["zero_coverage"] == [], data["coverage"]
