"""``EngineCore.pause_scheduler`` / ``resume_scheduler`` on the ``vllm-engine`` target (issue 28, item 5).

Default tier: the pause events parse and replay; a hand-written case pauses in keep mode with
``clear_cache`` while a step is in the batch queue and the spec follows it (the running requests
preempted by the reset, the step in flight processed while paused, the resume); the ``pause``
profile's short campaign is clean and reaches its categories.  Slow: the three engine-side pause
mutants die in the pause stage of ``mutate-vllm --target vllm-engine``.
"""
from __future__ import annotations

import json

import pytest

from asyncspec.engine.vllm.engine_config import EngineDriverConfig
from asyncspec.engine.vllm.mutants_features import ENGINE_PAUSE_MUTANTS
from asyncspec.statemachine_tests.vllm_engine import engine_case as ec
from asyncspec.statemachine_tests.vllm_engine.engine_campaign import run_fixed
from asyncspec.statemachine_tests.vllm_engine.engine_profile import PAUSE_ENGINE_PROFILE, drain, pick
from asyncspec.statemachine_tests.core.harness import Event
from tests.statemachine_tests.vllm_engine.drive_case import drive, engine_kill


def test_pause_events_round_trip_and_the_case_keeps_its_pause_options() -> None:
    for kind in (ec.PAUSE_ABORT, ec.PAUSE_KEEP, ec.RESUME):
        assert ec.parse_engine_event(str(ec.EngineEvent(kind))) == ec.EngineEvent(kind)
    with pytest.raises(ValueError, match="takes no argument"):
        ec.parse_engine_event("pause_keep r0")
    case = ec.EngineCase(EngineDriverConfig(depth=2), (ec.EngineRequest((900, 901), 3),), resets=1,
                         pauses=2, clear_cache=True)
    again = ec.EngineCase.from_json(json.loads(json.dumps(case.to_json())))
    assert again == case
    w = case.workload()
    assert w.pauses == 2 and w.reset_prefix_cache == 3  # each clearing pause resets the prefix cache


def test_pick_pauses_resumes_and_keeps_an_abort_in_step_apart_from_a_pause() -> None:
    unpaused = [Event("pause_abort"), Event("pause_keep"), Event("abort", 0)]
    assert pick(245, 1, 2, unpaused, False, True) == ec.EngineEvent(ec.PAUSE_ABORT)
    assert pick(250, 1, 2, unpaused, False, True) == ec.EngineEvent(ec.PAUSE_KEEP)
    assert pick(250, 1, 2, unpaused, True, True) != ec.EngineEvent(ec.PAUSE_KEEP)  # an abort waits in the queue
    paused = [Event("resume"), Event("abort", 0)]
    assert pick(225, 1, 2, paused, False, True) == ec.EngineEvent(ec.RESUME)
    assert pick(150, 1, 2, paused, False, True) == ec.EngineEvent(ec.ADD_REQUEST, 1)  # held by the pause
    assert pick(245, 2, 2, paused, False, True, schedules_next=False) == ec.EngineEvent(ec.STEP)  # not scheduling
    assert pick(10, 2, 2, paused, False, False) == ec.EngineEvent(ec.RESUME)  # nothing to step
    assert drain(2, 2, False, paused=True) == ec.EngineEvent(ec.RESUME)


def test_a_keep_pause_that_clears_the_cache_with_a_step_in_flight_is_followed() -> None:
    pytest.importorskip("vllm")
    config = EngineDriverConfig(depth=2, block_size=4, num_blocks=8, max_num_seqs=4, max_num_batched_tokens=16,
                                enable_chunked_prefill=True, enable_prefix_caching=True, max_model_len=32)
    case = ec.EngineCase(config, (ec.EngineRequest((900, 901, 902, 903, 904), 6),
                                  ec.EngineRequest((910, 911, 912), 6)), pauses=1, clear_cache=True)
    step = ec.EngineEvent(ec.STEP)
    events = [ec.EngineEvent(ec.ADD_REQUEST, 0), ec.EngineEvent(ec.ADD_REQUEST, 1), step, step, step,
              ec.EngineEvent(ec.PAUSE_KEEP), step, step, ec.EngineEvent(ec.RESUME)]
    run, coverage = drive(case, events)
    assert not run.diverged
    assert coverage.get("pause_in_flight", 0) == 1 and coverage.get("paused_output", 0) >= 1
    assert coverage.get("resumed_held", 0) == 1


def test_the_pause_profile_is_clean_and_reaches_its_categories() -> None:
    pytest.importorskip("vllm")
    summary = run_fixed(100, 0, PAUSE_ENGINE_PROFILE.depths, PAUSE_ENGINE_PROFILE)
    assert summary["divergences"] == 0, summary["first_divergence"]
    for name in ("pause_in_flight", "paused_output", "resumed_held"):
        assert summary["coverage"][name] > 0, name


@pytest.mark.slow
@pytest.mark.parametrize("mutant", [m.id for m in ENGINE_PAUSE_MUTANTS])
def test_the_engine_pause_mutants_die_in_the_pause_stage(mutant: str) -> None:
    pytest.importorskip("vllm")
    result = engine_kill(mutant)
    assert result["killed"] and "(pause profile)" in result["detail"], result
