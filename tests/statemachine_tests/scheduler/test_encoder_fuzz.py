"""Encoder inputs in differential fuzzing: the workload and its replay file, vLLM's real scheduler
(built for a config-only PaliGemma with a stand-in processor) in lock step with the spec, finding
V11 on vLLM's own outputs, the ``encoder`` part of the default mix.

vLLM must be installed (``.ci/install-vllm``); without it this module fails at collection
(ASYNCSPEC_ALLOW_NO_VLLM=1 skips instead)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.cli_contract import assert_matches_schema
from tests.vllm_guard import require_pinned_vllm

from asyncspec.statemachine_tests.core.harness import Event, RequestSpec, Workload, parse_event, run_lockstep, workload_problem
from asyncspec.statemachine_tests.core.replay_file import replay_problem
from asyncspec.statemachine_tests.scheduler.fuzz import fuzz_main
from asyncspec.statemachine_tests.scheduler.fuzz_example import planned_events
from asyncspec.statemachine_tests.scheduler.profiles import (
    ALL_PROFILE, ENCODER_PROFILE, PROFILES, part_names, reference_gaps,
)
from asyncspec.statemachine_tests.scheduler.spec_target import SpecTarget
from asyncspec.statemachine_tests.scheduler.vllm_target import VllmTarget

require_pinned_vllm()

SHARED = Workload(requests=(RequestSpec(5, 1), RequestSpec(4, 1), RequestSpec(3, 1)), depth=2, block_size=2,
                  num_blocks=8, token_budget=3, max_num_seqs=3, aborts=False,
                  images=((0, 1, 3, 0), (1, 1, 3, 0), (2, 0, 2, 1)), encoder_cache_size=3, encoder_compute_budget=3)
"""The checker's ``async-d2-encoder`` as a workload: r0 and r1 share item 0, r2's item 1 needs its room."""

UNDO = Workload(requests=(RequestSpec(8, 1), RequestSpec(3, 1)), depth=2, block_size=2, num_blocks=5, token_budget=4,
                max_num_seqs=4, aborts=False, policy="priority", priorities=(1, 0), long_prefill_token_threshold=2,
                images=((0, 6, 2, 0),), encoder_cache_size=2, encoder_compute_budget=2)
"""``finding-encoder-undo-miss`` as a workload (docs/findings_vllm.md, V11)."""


def _events(text: str) -> list[Event]:
    return [parse_event(e.strip()) for e in text.split(",")]


def _encoder(obs: object, name: str) -> object:
    return dict(getattr(obs, "encoder"))[name]


def test_the_workload_round_trips_and_bad_images_are_one_line_problems() -> None:
    data = json.loads(json.dumps(SHARED.to_json()))
    assert Workload.from_json(data) == SHARED and workload_problem(SHARED) is None
    assert replay_problem({"asyncspec_fuzz_replay": 1, "workload": data, "events": ["schedule"]}) is None
    bad = {**data, "images": [[0, 1, 3]]}
    assert "images" in str(replay_problem({"asyncspec_fuzz_replay": 1, "workload": bad, "events": []}))
    one = (RequestSpec(4, 1),)
    for w, why in ((Workload(requests=one, images=((0, 3, 2, 0),), encoder_cache_size=2, encoder_compute_budget=2),
                    "inside"),
                   (Workload(requests=one, images=((0, 0, 2, 0),), encoder_cache_size=1, encoder_compute_budget=2),
                    "largest image"),
                   (Workload(requests=one, images=((0, 0, 2, 0),), encoder_cache_size=2, encoder_compute_budget=2,
                             prefix_caching=True), "prefix caching"),
                   (Workload(requests=one, encoder_cache_size=2), "need images")):
        assert why in str(workload_problem(w))


def test_shared_items_evictions_and_releases_in_lock_step_with_vllm() -> None:
    """r0's image is released while its next chunk is in flight; r1 takes the shared entry back
    from freeable; r2's allocation evicts it, the hash going to the worker with that later step."""
    oracle = SpecTarget(SHARED, target="vllm")
    result = run_lockstep(SHARED, oracle, VllmTarget(SHARED), planned_events(SHARED, oracle, ()))
    assert not result.diverged, result.rows[-1].differences
    assert {"encoder_released_in_flight", "encoder_cache_revived", "encoder_cache_eviction",
            "encoder_input_blocked"} <= set(result.coverage)
    freed = [_encoder(r.actual, "freed") for r in result.rows if r.event.kind == "schedule"]
    assert (0,) in freed  # item 0 evicted, told to the worker in the step that took its room


def test_finding_v10_vllm_never_computes_the_image_of_a_request_it_preempted_after_scheduling() -> None:
    """docs/findings_vllm.md, V11, on vLLM's real scheduler: r0's image is allocated in the step that
    priority-preempts r0, taken out of scheduled_encoder_inputs but left cached; resumed, r0 hits it
    and its step reads positions 6-7 with no step ever having computed item 0."""
    events = _events("add_request r0, schedule, add_request r1, schedule, deliver, schedule, deliver, schedule, "
                     "deliver, schedule, deliver, schedule")
    result = run_lockstep(UNDO, SpecTarget(UNDO, target="vllm"), VllmTarget(UNDO), events)
    assert not result.diverged, result.rows[-1].differences  # the spec predicts vLLM exactly
    steps = [r.actual for r in result.rows if r.event.kind == "schedule"]
    assert all(_encoder(obs, "scheduled") == () for obs in steps)  # item 0 is never computed
    last = steps[-1]
    assert (0, 4, 1) in last.scheduled and dict(_encoder(last, "cached"))[0] == (0,)  # r0 reads 4..8 from a hit
    assert "encoder_miss" in result.rows[-1].spec_events and "preempted_scheduled_undone" in result.coverage


def test_the_encoder_part_is_last_in_the_default_mix_and_not_on_the_reference() -> None:
    assert part_names(ALL_PROFILE)[16] == "encoder" and PROFILES["encoder"] is ENCODER_PROFILE
    assert reference_gaps(ENCODER_PROFILE) == ["the priority policy", "images (encoder inputs)"]
    assert {"encoder_cache_eviction", "encoder_input_blocked", "encoder_released_in_flight",
            "encoder_cache_revived", "encoder_evicted_reallocated"} <= set(ALL_PROFILE.reported_categories())


def test_a_short_encoder_campaign_on_vllm_is_clean_and_reaches_its_categories(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc = fuzz_main("vllm", 600.0, 0, True, False, tmp_path, ENCODER_PROFILE, examples=30)
    data = json.loads(capsys.readouterr().out)
    assert_matches_schema(data, "fuzz")
    assert rc == 0 and data["divergences"] == 0 and data["parts"] == {"encoder": 30}
    for category in ("encoder_cache_eviction", "encoder_input_blocked", "encoder_released_in_flight",
                     "encoder_cache_revived"):
        assert data["coverage"][category] > 0, category


def test_the_recycled_shape_is_vllm_52482s_hand_trace_shape() -> None:
    """Half the encoder part's draws of four requests or more (``workload_draw.recycled_images``): short
    prompts each opening with a 2-position image, items 0, 1, 2, 0, a cache and a compute budget of two."""
    from asyncspec.statemachine_tests.core.workload import RequestSpec
    from asyncspec.statemachine_tests.scheduler import workload_draw
    from hypothesis import given, settings, strategies as st

    @settings(max_examples=20, database=None, deadline=None)
    @given(st.data())
    def check(data: st.DataObject) -> None:
        requests = tuple(RequestSpec(data.draw(st.integers(2, 12)), 3) for _ in range(4))
        short, images, cache, compute, budget = data.draw(st.composite(
            lambda draw: workload_draw.recycled_images(draw, requests, 4))())
        assert [r.prompt_len for r in short] == [min(r.prompt_len, 3) for r in requests]
        assert images == ((0, 0, 2, 0), (1, 0, 2, 1), (2, 0, 2, 2), (3, 0, 2, 0)) and cache == compute == 4
        assert budget == 6

    check()
