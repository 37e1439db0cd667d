"""Differential fuzzing of vLLM 0.33.0's real scheduler against the spec.

The fast tier runs a short, deterministic conformance fuzz (a fixed number of
Hypothesis examples, so the same events on every machine) and checks that
seeded bugs on either side are found, shrunk and replayed.  The ``campaign``
tier runs the time-bounded fuzz of ``asyncspec fuzz --target vllm``.

vLLM must be installed (``.ci/install-vllm``): without it this module fails
at collection; set ASYNCSPEC_ALLOW_NO_VLLM=1 to skip instead.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from tests.vllm_guard import require_pinned_vllm

from asyncspec.engine.vllm import vllm_environment
from asyncspec.engine.vllm.vllm_environment import VLLM_VERSION
from asyncspec.spec import request as rq

from asyncspec.statemachine_tests.scheduler.campaign import Campaign, coverage_counts
from asyncspec.statemachine_tests.scheduler.fuzz import fuzz_main, replay, replay_vllm
from asyncspec.statemachine_tests.scheduler.profiles import (
    ALL_PROFILE, BASE_PROFILE, PREFIX_CACHING_PROFILE, Profile,
)
from asyncspec.statemachine_tests.core.replay_file import load_replay, save_replay
from asyncspec.statemachine_tests.core.harness import Event, RequestSpec, Workload, run_lockstep
from asyncspec.statemachine_tests.scheduler.spec_target import SpecTarget
from asyncspec.statemachine_tests.scheduler.vllm_target import VllmTarget

require_pinned_vllm()


def campaign(batches: int, seed: int = 0, profile: Profile = BASE_PROFILE) -> Campaign:
    """A deterministic campaign: ``batches`` x 20 examples, whatever the machine's speed."""
    c = Campaign("vllm", seconds=3600, seed=seed, profile=profile, max_batches=batches)
    c.run()
    return c


# ---------------------------------------------------------------- conformance


def test_short_vllm_conformance_fuzz() -> None:
    """300 examples (about 10k events): no divergence, every category covered."""
    c = campaign(batches=15)
    assert c.found is None, f"divergence: {c.found.rows[-1].differences if c.found else ''}"
    counts = coverage_counts(c.stats.coverage)
    zero = [k for k in BASE_PROFILE.enabled_categories() if counts[k] == 0]
    assert zero == [], f"vacuous categories: {zero} ({counts})"
    assert c.stats.examples >= 300 and c.stats.events > 5_000


def test_fuzz_main_json_contract(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc = fuzz_main("vllm", 3, 7, True, False, tmp_path)
    data = json.loads(capsys.readouterr().out)
    assert rc == 0 and data["divergences"] == 0
    assert data["target"] == "vllm" and data["events"] > 0 and data["examples"] > 0
    base = {"preemption_with_output_in_flight", "stale_delivery", "stale_drop", "deferred_free",
            "wasted_step", "max_tokens_guard", "chunked_prefill", "abort_in_flight"}
    # the default campaign (all) reports every part's categories
    assert set(data["coverage"]) == set(ALL_PROFILE.reported_categories()) > base | {
        "sliding_window_free", "kv_async_load", "priority_preemption", "model_len_capped", "prefix_cache_hit"}
    assert isinstance(data["zero_coverage"], list)


def test_hand_written_stale_delivery_agrees() -> None:
    """The driver's preemption scenario, through the harness: spec and vLLM agree."""
    w = Workload(requests=(RequestSpec(15, 10, 0), RequestSpec(15, 10, 0)), block_size=16,
                 num_blocks=2, token_budget=64)
    events = [Event("add_request", 0), Event("add_request", 1), Event("schedule"),
              Event("schedule"), Event("deliver"), Event("schedule"), Event("deliver")]
    result = run_lockstep(w, SpecTarget(w), VllmTarget(w), events)
    assert not result.diverged, result.rows[-1].differences
    assert result.rows[5].actual.preempted == (1,)
    assert result.rows[6].actual.delivered[1][0] == 1  # r1's stale token was delivered


# ---------------------------------------------------------------- seeded divergences


def _check_found_shrunk_and_replays(c: Campaign, tmp_path: Path, field_prefix: str,
                                    max_events: int) -> Path:
    assert c.found is not None, "the seeded bug was not found"
    rows = c.found.rows
    assert len(rows) <= max_events, [str(r.event) for r in rows]
    assert any(d.field.startswith(field_prefix) or field_prefix in d.field
               for d in rows[-1].differences), rows[-1].differences
    path = tmp_path / "replay.json"
    save_replay(c.found, "vllm", path)
    workload, events = load_replay(path)
    assert workload == c.found.workload and events == c.found.events
    assert replay_vllm(path) == 1
    return path


def test_seeded_spec_bug_is_found_shrunk_and_replayed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The spec without the max_tokens guard (PR #27922) schedules past max_tokens."""
    monkeypatch.setattr(rq, "max_tokens_guard", lambda A, p, c: False)
    c = campaign(batches=5)
    path = _check_found_shrunk_and_replays(c, tmp_path, "scheduled", max_events=4)
    assert c.found is not None and len(c.found.workload.requests) == 1
    monkeypatch.undo()
    assert replay_vllm(path) == 0  # fixed spec: the same events agree


def test_seeded_vllm_bug_is_found_shrunk_and_replayed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """vLLM freeing blocks at once despite deferral (``_request_blocks_can_be_freed``)."""
    from vllm.v1.core.sched.scheduler import Scheduler

    monkeypatch.setattr(Scheduler, "_request_blocks_can_be_freed", lambda self, request: True)
    c = campaign(batches=10)
    _check_found_shrunk_and_replays(c, tmp_path, "free", max_events=12)


def test_vllm_scheduler_crash_is_a_divergence() -> None:
    """docs/findings_vllm.md, finding 1: reset_prefix_cache under deferral raises in vLLM."""
    w = Workload(requests=(RequestSpec(4, 4, 0),), defer_block_free=True, reset_prefix_cache=1)
    events = [Event("add_request", 0), Event("schedule"), Event("reset_prefix_cache")]
    result = run_lockstep(w, SpecTarget(w), VllmTarget(w), events)
    assert result.diverged and len(result.rows) == 3
    first = result.rows[-1].differences[0]
    assert first.field == "error" and first.expected is None
    assert str(first.actual).startswith("RuntimeError: Failed to reset KV cache")


# ---------------------------------------------------------------- usage and replay files


def test_version_refusal(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                         capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(vllm_environment, "_installed_vllm_version", lambda: "0.29.0")
    assert fuzz_main("vllm", 1, 0, True, False, tmp_path) == 2
    err = capsys.readouterr().err.strip()
    assert VLLM_VERSION in err and "0.29.0" in err and "\n" not in err
    assert fuzz_main("vllm", 0.5, 0, True, True, tmp_path) == 0  # --allow-version


@pytest.mark.parametrize("target", ["nope", "spec", "torch"])
def test_unknown_or_unconnected_target_is_usage_error(
        target: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert fuzz_main(target, 1, 0, True, False, tmp_path) == 2
    assert capsys.readouterr().out == ""


@pytest.mark.parametrize("content", ["not json", "{}", json.dumps(
    {"asyncspec_fuzz_replay": 1, "workload": {"requests": [[4, 2, 0]]}, "events": ["jump"]})])
def test_bad_replay_file_is_usage_error(content: str, tmp_path: Path) -> None:
    path = tmp_path / "bad.json"
    path.write_text(content)
    assert replay(path, "vllm") == 2


def test_replay_of_an_event_the_spec_does_not_enable_is_usage_error(tmp_path: Path) -> None:
    path = tmp_path / "r.json"
    path.write_text(json.dumps({"asyncspec_fuzz_replay": 1, "workload": {"requests": [[4, 2, 0]]},
                                "events": ["add_request r0", "deliver"]}))
    assert replay(path, "vllm") == 2


# ---------------------------------------------------------------- campaign tier


@pytest.mark.campaign
@pytest.mark.parametrize("profile", [BASE_PROFILE, PREFIX_CACHING_PROFILE], ids=["pc-off", "pc-on"])
def test_vllm_fuzz_campaign(profile: Profile, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    seconds = float(os.environ.get("ASYNCSPEC_FUZZ_SECONDS", "300"))
    rc = fuzz_main("vllm", seconds, int(os.environ.get("ASYNCSPEC_FUZZ_SEED", "0")), True, False,
                   tmp_path, profile=profile)
    data: dict[str, Any] = json.loads(capsys.readouterr().out)
    assert rc == 0, capsys.readouterr().err
    assert data["zero_coverage"] == []
