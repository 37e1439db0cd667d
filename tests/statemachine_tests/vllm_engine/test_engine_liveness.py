"""A ``vllm-engine`` case that does not finish is a divergence, never an internal error.

After a case's events and the drain (``engine_profile.MAX_DRAIN`` steps), an engine that still
holds work (the scheduler's requests, steps in the batch queue, requests in the runner's
persistent batch) fails the case at its last row with ``engine_idle``; the campaign then shrinks
and saves it like any other divergence, and the broken engine is rebuilt for the next case.
Stand-ins replace the engine (no vLLM start-up); ``drive_case`` itself runs.
"""
from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from asyncspec.engine.vllm.engine_config import EngineDriverConfig
from asyncspec.statemachine_tests.core.harness import Event, Observation, Row
from asyncspec.statemachine_tests.vllm_engine import engine_campaign
from asyncspec.statemachine_tests.vllm_engine import engine_case as ec
from asyncspec.statemachine_tests.vllm_engine.engine_profile import MAX_DRAIN
from asyncspec.statemachine_tests.vllm_engine.engine_run import EngineRunResult

_EMPTY = Observation((), (), (), (), (), (), (), 0, False, (), 0, 0, ())


class _Run:
    """An ``EngineRun`` whose events all agree: one row, no difference."""

    def __init__(self, case: ec.EngineCase, target: Any, coverage: dict[str, int]) -> None:
        self.result = EngineRunResult(case.workload(), [], coverage, case=case)
        self.result.rows.append(Row(1, Event("schedule"), _EMPTY, _EMPTY, frozenset(), []))
        self.oracle = SimpleNamespace(enabled=lambda: [])

    @property
    def diverged(self) -> bool:
        return self.result.diverged

    def apply(self, event: ec.EngineEvent) -> bool:
        return True

    check_finished = engine_campaign.EngineRun.check_finished


class _Targets:
    """One stand-in engine whose driver reports ``left`` after the case; records recoveries."""

    def __init__(self, left: str | None) -> None:
        self.driver = SimpleNamespace(has_work=lambda: False, aborts_pending=lambda: False, leftover=lambda: left,
                                      paused=lambda: False, schedules_next=lambda: False)
        self.recovered: list[Any] = []

    def get(self, config: Any) -> Any:
        return SimpleNamespace(driver=self.driver)

    def recover(self, config: Any) -> None:
        self.recovered.append(config)


def _a_case() -> ec.EngineCase:
    return ec.EngineCase(EngineDriverConfig(), (ec.EngineRequest((5, 9), 3),))


@pytest.mark.parametrize("left", ["the model runner still holds ['0']",
                                  "the scheduler holds ['1'], 1 step(s) in the batch queue"])
def test_an_engine_that_does_not_go_idle_fails_the_case(monkeypatch: pytest.MonkeyPatch, left: str) -> None:
    monkeypatch.setattr(engine_campaign, "EngineRun", _Run)
    targets = _Targets(left)
    stats = engine_campaign.EngineStats()
    result = engine_campaign.drive_case(_a_case(), b"", targets, stats)  # type: ignore[arg-type]
    assert result.diverged
    (difference,) = result.rows[-1].differences
    assert difference.field == "engine_idle" and difference.actual == left
    assert str(MAX_DRAIN) in difference.expected
    assert len(targets.recovered) == 1  # the next case gets an engine rebuilt or stepped idle


def test_an_idle_engine_passes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(engine_campaign, "EngineRun", _Run)
    targets = _Targets(None)
    result = engine_campaign.drive_case(_a_case(), b"", targets, engine_campaign.EngineStats())  # type: ignore[arg-type]
    assert not result.diverged and targets.recovered == []
