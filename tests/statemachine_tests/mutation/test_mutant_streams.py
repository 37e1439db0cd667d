"""The streams the ``--target vllm`` self-test once drew on its own, now parts of the user's default
campaign (issue 27), and the hand traces of the mutants they target (issue 13).

Default tier: one hand trace (``statemachine_tests/mutation/mutant_traces.py``) kills its
mutant in a fresh process with the mutant's overlay installed, at the event and
field it names (``slow``: every other hand trace), and each runs clean on vLLM as installed; the
reset, self-hit and reset-storm profiles are named parts of the default mix ``all`` (so
``mutate-vllm`` measures with the campaign a user runs); a reset-heavy workload is a reset storm
(arrivals first, a larger reset share, a reset after each drain ``schedule()``) and no other workload is.
"""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.vllm_guard import require_pinned_vllm

from asyncspec.statemachine_tests.core.harness import (
    ADD_REQUEST, DELIVER, RESET_PREFIX_CACHE, SCHEDULE, Event, RequestSpec, Workload, apply_event,
)
from asyncspec.statemachine_tests.mutation.mutant_traces import HAND_TRACES, first_difference
from asyncspec.statemachine_tests.scheduler.profiles import (
    ALL_PROFILE, CONNECTOR_PROFILE, DEPTH3_PROFILE, PREFIX_CACHING_PROFILE, PROFILES, RESET_PROFILE,
    RESET_STORM_PROFILE, SELF_HIT_PROFILE, part_names,
)
from asyncspec.statemachine_tests.scheduler.fuzz_example import (
    HEAVY_BOUNDS, RESET_HEAVY, pick, planned_events, reset_heavy,
)
from asyncspec.statemachine_tests.scheduler.spec_target import SpecTarget

require_pinned_vllm()


DEFAULT_HAND_TRACE = "sched_skipped_to_back"
"""The hand trace the default tier runs under its mutant; the others are ``slow`` (each is a
fresh process importing vLLM under an overlay, which is the same path for every mutant)."""


@pytest.fixture(scope="module")
def mutated_runs(request: pytest.FixtureRequest) -> dict[str, subprocess.Popen[str]]:
    """Every selected hand trace under its mutant, one process each, all started at once (vLLM's
    import is most of each one's time)."""
    selected = sorted({item.callspec.params["mutant"] for item in request.session.items
                       if getattr(item, "originalname", "") == "test_hand_trace_kills_its_mutant"
                       and item.module is request.module})
    return {m: subprocess.Popen([sys.executable, "-m", "asyncspec.statemachine_tests.mutation.mutant_traces", m],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for m in selected}


@pytest.mark.parametrize("mutant", [pytest.param(m, marks=() if m == DEFAULT_HAND_TRACE else pytest.mark.slow)
                                    for m in sorted(HAND_TRACES)])
def test_hand_trace_kills_its_mutant(mutant: str, mutated_runs: dict[str, subprocess.Popen[str]]) -> None:
    """The mutant installed before vLLM is imported: the trace differs where it says."""
    out, err = mutated_runs[mutant].communicate(timeout=600)
    assert mutated_runs[mutant].returncode == 0, err[-2000:]
    found = json.loads(out.strip().splitlines()[-1])
    trace = HAND_TRACES[mutant]
    assert (found["event"], found["field"]) == (trace.event, trace.field), found


@pytest.mark.parametrize("mutant", sorted(HAND_TRACES))
def test_hand_trace_is_clean_on_vllm_as_installed(mutant: str) -> None:
    assert first_difference(mutant) is None


def test_the_self_tests_streams_are_parts_of_the_users_default_campaign() -> None:
    """Every profile the self-test drew from is a part of ``all``, named, its earlier parts in place."""
    for profile in (PREFIX_CACHING_PROFILE, RESET_PROFILE, CONNECTOR_PROFILE, SELF_HIT_PROFILE,
                    RESET_STORM_PROFILE, DEPTH3_PROFILE):
        assert profile in ALL_PROFILE.mix
    names = part_names(ALL_PROFILE)
    assert names[:2] == ["base", "depth3"] and names[-4:-1] == ["reset", "self-hit", "reset-storm"]
    assert all(PROFILES[name] == part for name, part in zip(names, ALL_PROFILE.mix))


def _events(w: Workload, choices: list[int]) -> list[str]:
    """The events ``planned_events`` yields, each applied to the spec as it comes."""
    oracle = SpecTarget(w)
    out = []
    for event in planned_events(w, oracle, choices):
        apply_event(oracle, w, event)
        out.append(str(event))
    return out


def test_a_reset_heavy_workload_is_a_reset_storm() -> None:
    requests = (RequestSpec(3, 2), RequestSpec(2, 2))
    heavy = Workload(requests, depth=2, num_blocks=8, reset_prefix_cache=RESET_HEAVY, loop="free")
    assert reset_heavy(heavy) and min(RESET_STORM_PROFILE.resets) >= RESET_HEAVY
    events = _events(heavy, [0])
    assert events[:3] == ["add_request r0", "add_request r1", "schedule"]  # arrivals first
    resets = [i for i, e in enumerate(events) if e == "reset_prefix_cache"]
    assert len(resets) == RESET_HEAVY and all(events[i - 1] == "schedule" for i in resets)  # the drain's
    assert events[3:5] == ["schedule", "reset_prefix_cache"] and events[-1] == "deliver"
    calm = Workload(requests, depth=2, num_blocks=8, reset_prefix_cache=RESET_HEAVY - 1, loop="free")
    events = _events(calm, [0])
    assert events[:2] == ["add_request r0", "schedule"] and "reset_prefix_cache" not in events


def test_reset_heavy_choices_draw_resets_from_a_fifth() -> None:
    enabled = [Event(SCHEDULE), Event(DELIVER), Event(ADD_REQUEST, 1), Event(RESET_PREFIX_CACHE)]
    assert pick(enabled, 210) == Event(SCHEDULE)
    assert pick(enabled, 210, None, HEAVY_BOUNDS) == Event(RESET_PREFIX_CACHE)
    assert pick(enabled, 180, None, HEAVY_BOUNDS) == Event(ADD_REQUEST, 1)
    assert 256 - HEAVY_BOUNDS[2] >= 256 // 5
