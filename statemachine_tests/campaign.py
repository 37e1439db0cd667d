"""A time-bounded fuzz campaign: Hypothesis examples until the first divergence, with coverage.

Hypothesis drives a workload and its events through the spec and a target;
a divergence is shrunk (fewer requests, smaller settings, fewer and simpler
events) before it is reported.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

from hypothesis import HealthCheck, Phase, given, seed, settings

from asyncspec.spec import events as ev

from .harness import RunResult, Workload
from .profiles import (
    CHOICES,
    COVERAGE,
    DEFAULT_PROFILE,
    PREFIX_CACHE_HIT,
    SPEC_DECODE_COVERAGE,
    STRUCTURED_OUTPUT_COVERAGE,
    Profile,
    workloads,
)
from .run import Divergence, Stats, drive


@dataclass
class Campaign:
    """A time-bounded fuzz of one target; ``found`` is the minimal divergence, if any."""

    target: str
    seconds: float
    seed: int
    profile: Profile = DEFAULT_PROFILE
    batch: int = 20
    max_batches: int | None = None  # a fixed amount of work (deterministic), else time-bounded
    stats: Stats = field(default_factory=Stats)
    found: RunResult | None = None

    def run(self) -> RunResult | None:
        """Fuzz in seeded batches of ``batch`` examples until the time (or ``max_batches``)
        is used up or a divergence is found."""
        deadline = time.monotonic() + self.seconds
        index = 0
        while self.found is None and self._more(index, deadline):
            self._batch(self.seed * 1_000_003 + index, deadline)
            index += 1
        return self.found

    def _more(self, index: int, deadline: float) -> bool:
        if self.max_batches is not None:
            return index < self.max_batches
        return time.monotonic() < deadline

    def _batch(self, batch_seed: int, deadline: float) -> None:
        stats, target = self.stats, self.target
        last_failure: list[RunResult] = []

        @seed(batch_seed)
        @settings(max_examples=self.batch, deadline=None, database=None, derandomize=False,
                  phases=(Phase.generate, Phase.shrink), suppress_health_check=list(HealthCheck),
                  report_multiple_bugs=False)
        @given(workloads(self.profile), CHOICES)
        def example(w: Workload, choices: bytes) -> None:
            if self.max_batches is None and time.monotonic() >= deadline and not last_failure:
                return
            stats.examples += 1
            result = drive(w, target, choices, stats)
            if result.diverged:
                last_failure.append(result)
                raise Divergence(result)

        try:
            example()
        except Divergence as exc:
            self.found = exc.result


def coverage_counts(spec_events: dict[str, int], profile: Profile | None = None) -> dict[str, int]:
    """The reported categories from the spec-event counts (the profile's extra ones too)."""
    names = dict(COVERAGE)
    if profile is not None:
        names |= {PREFIX_CACHE_HIT: (ev.PREFIX_CACHE_HIT,)} | SPEC_DECODE_COVERAGE | STRUCTURED_OUTPUT_COVERAGE
        names = {c: names[c] for c in profile.reported_categories()}
    return {cat: sum(spec_events.get(e, 0) for e in evs) for cat, evs in names.items()}
