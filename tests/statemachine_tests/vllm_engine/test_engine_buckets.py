"""The ``vllm-engine`` campaign keeps going after a divergence and buckets what it sees
(``core/buckets.py``), here with two stand-in bugs in place of vLLM's engine (no vLLM start-up):
two buckets, each representative shrunk within its bucket; ``max_divergences`` ends it early.
"""
from __future__ import annotations

from typing import Any

import pytest

from asyncspec.statemachine_tests.core.buckets import divergence_key
from asyncspec.statemachine_tests.core.harness import Difference, Event, Observation, Row
from asyncspec.statemachine_tests.vllm_engine import engine_campaign
from asyncspec.statemachine_tests.vllm_engine import engine_case as ec
from asyncspec.statemachine_tests.vllm_engine.engine_run import EngineRunResult

_EMPTY = Observation((), (), (), (), (), (), (), 0, False, (), 0, 0, ())


def two_bugs(case: ec.EngineCase, choices: bytes, *_: Any) -> EngineRunResult:
    """A case of three or more requests diverges at its first schedule; one whose first choice is 200
    or more at a deliver; any other agrees."""
    result = EngineRunResult(case.workload(), [], {}, case=case)
    if len(case.requests) >= 3:
        result.rows.append(Row(1, Event("schedule"), _EMPTY, _EMPTY, frozenset(), [Difference("scheduled", (), (1,))]))
    elif choices and choices[0] >= 200:
        result.rows.append(Row(1, Event("deliver"), _EMPTY, _EMPTY, frozenset(),
                               [Difference(f"r{len(case.requests) - 1}.num_tokens", 1, 2)]))
    return result


@pytest.fixture()
def stand_in(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(engine_campaign, "drive_case", two_bugs)
    monkeypatch.setattr(engine_campaign, "explain", lambda _: None)


def campaign(**kwargs: Any) -> engine_campaign.EngineCampaign:
    c = engine_campaign.EngineCampaign(seconds=float("inf"), seed=0, max_batches=3, keep_going=True, **kwargs)
    assert c.run() is None  # nothing stops it
    return c


@pytest.mark.usefixtures("stand_in")
def test_two_bugs_give_two_buckets_each_shrunk_within_its_bucket() -> None:
    c = campaign()
    buckets = c.shrink_buckets()
    assert c.stats.examples == 60 and len(buckets) == 2
    assert buckets[0].first_example < buckets[1].first_example  # in order of first sighting
    assert {b.key.split(" | ")[1:] == ["schedule", "scheduled"] for b in buckets} == {True, False}, buckets
    for b in buckets:
        rep = b.representative
        assert isinstance(rep, EngineRunResult) and rep is not b.sighting and divergence_key(rep, "v1") == b.key
        assert rep.case is not None and len(rep.case.requests) == (3 if "scheduled" in b.key else 1)  # shrunk
        assert b.signature.startswith(b.key + " [depth=")
    assert sum(b.count for b in buckets) > 2


@pytest.mark.usefixtures("stand_in")
def test_max_divergences_1_ends_at_the_first_bucket() -> None:
    c = campaign(max_divergences=1)
    (bucket,) = c.shrink_buckets()
    assert c.stats.examples == bucket.first_example + 1 < 60
