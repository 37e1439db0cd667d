"""A fuzz campaign in seeded Hypothesis batches: the spec against a target, with coverage.

Hypothesis drives a workload and its events through the spec and a target.
A batch runs in one of three modes: stop at its first divergence and shrink
it (the default of ``Campaign``, and ``--stop-at-first``); keep going, only
recording each divergent example's bucket key (``keep_going``: what a
campaign's shards do, ``core/buckets.py``); or shrink the first example with
one given key (``wanted``), so a bucket's representative stays in its bucket.
A shrunk divergence has fewer requests, smaller settings, fewer and simpler
events.
"""
from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from hypothesis import HealthCheck, Phase, given, seed, settings, target
from hypothesis.errors import FlakyFailure

from asyncspec.checker import interrupt
from asyncspec.spec import events as ev

from asyncspec.statemachine_tests.core.buckets import divergence_key
from asyncspec.statemachine_tests.core.harness import RunResult, Workload
from asyncspec.statemachine_tests.scheduler.profiles import (
    CHOICES, COVERAGE, CONNECTOR_COVERAGE, BASE_PROFILE, HYBRID_COVERAGE, LONG_PROMPT_COVERAGE,
    PAUSE_COVERAGE, POLICY_COVERAGE, PREFIX_CACHE_HIT, SPEC_DECODE_COVERAGE, STRUCTURED_OUTPUT_COVERAGE, Profile,
    profile_name, swarm_kinds, workloads,
)
from asyncspec.statemachine_tests.scheduler.known_bugs import classify
from asyncspec.statemachine_tests.scheduler.workload_draw import ENCODER_COVERAGE, MAMBA_COVERAGE, STREAMING_COVERAGE
from asyncspec.statemachine_tests.scheduler.fuzz_example import Divergence, Stats, drive


@dataclass
class Campaign:
    """A fuzz of one target; ``found`` is the minimal divergence, if any (``keep_going``: none is
    shrunk, ``sightings`` lists them; ``wanted``: ``found`` is the shrunk first one of that key)."""

    target: str
    seconds: float
    seed: int
    profile: Profile = BASE_PROFILE
    batch: int = 20
    max_batches: int | None = None  # a fixed amount of work (deterministic), else time-bounded
    stats: Stats = field(default_factory=Stats)
    found: RunResult | None = None
    on_example: Callable[[Stats], None] | None = None  # progress, after each example
    depths: dict[int, int] = field(default_factory=dict)  # examples run per batch-queue depth
    keep_going: bool = False  # record each divergent example (``sightings``), raise nothing
    wanted: str | None = None  # shrink the first divergent example of this bucket key only
    sightings: list[tuple[int, str]] = field(default_factory=list)  # (example of the batch, 0-based; key)
    firsts: dict[str, RunResult] = field(default_factory=dict)  # each key's first sighting, unshrunk

    def run(self) -> RunResult | None:
        """Fuzz in seeded batches of ``batch`` examples until the time (or ``max_batches``)
        is used up or a divergence is found."""
        deadline = time.monotonic() + self.seconds
        index = 0
        while self.found is None and self._more(index, deadline):
            self._batch(shard_seed(self.seed, index), deadline if self.max_batches is None else math.inf,
                        index=index)
            index += 1
        return self.found

    def run_shard(self, index: int, limit: int, deadline: float = math.inf) -> bool:
        """Shard ``index`` of a fixed-work campaign: its first ``limit`` examples (of ``batch``).

        Hypothesis always draws a whole batch from the shard's seed, so example
        i of the shard is the same whatever ``limit`` is; those past ``limit``
        (or past ``deadline``) are drawn but not run.  False: the deadline cut
        it short.
        """
        return self._batch(shard_seed(self.seed, index), deadline, limit, index)

    def _more(self, index: int, deadline: float) -> bool:
        if interrupt.requested():
            return False
        if self.max_batches is not None:
            return index < self.max_batches
        return time.monotonic() < deadline

    def _batch(self, batch_seed: int, deadline: float, limit: int | None = None, index: int = 0) -> bool:
        """One seeded Hypothesis batch; batch ``index`` of a mixed profile draws from its part
        ``index mod len(mix)`` (``Profile.part``), so every part gets its share of shards."""
        stats, target = self.stats, self.target
        profile = self.profile.part(index)
        part = profile_name(profile)
        last_failure: list[RunResult] = []
        drawn, cut = [0], [False]
        # Hypothesis keeps weak references to drawn values and mutates from those still
        # alive; holding them for the batch keeps that from depending on when the cyclic
        # garbage collector runs (which differs between processes).
        alive: list[tuple[Workload, frozenset[str]]] = []
        limit = self.batch if limit is None else limit

        @seed(batch_seed)
        @settings(max_examples=self.batch, deadline=None, database=None, derandomize=False,
                  phases=(Phase.generate, Phase.target, Phase.shrink), suppress_health_check=list(HealthCheck),
                  report_multiple_bugs=False)
        @given(workloads(profile), CHOICES, swarm_kinds())
        def example(w: Workload, choices: bytes, kinds: frozenset[str]) -> None:
            alive.append((w, kinds))
            if interrupt.requested():  # Ctrl-C or SIGTERM: stop here, keep what was found
                cut[0] = True
                if last_failure:
                    raise Stopped
                return
            if not last_failure:
                drawn[0] += 1
                if drawn[0] > limit:
                    return
                if time.monotonic() >= deadline:
                    cut[0] = True
                    return
                stats.examples += 1
                self.depths[w.depth] = self.depths.get(w.depth, 0) + 1
            result = drive(w, target, choices, stats, kinds)
            if self.on_example is not None and not last_failure:
                self.on_example(stats)
            cause = classify(result, self.profile) if result.diverged else None
            if cause is not None and not last_failure:  # counted apart, not shrunk
                stats.known[cause] = stats.known.get(cause, 0) + 1
                return
            if result.diverged and (self.keep_going or self.wanted is not None):
                key = divergence_key(result, part)
                if self.keep_going:
                    self.sightings.append((drawn[0] - 1, key))
                    self.firsts.setdefault(key, result)
                if key != self.wanted or cause is not None:
                    return  # another bucket: a pass for this batch (no target() either way)
            if result.diverged:
                last_failure.append(result)
                raise Divergence(result)
            target_coverage(result)

        try:
            with no_local_constants():
                example()
        except Divergence as exc:
            self.found = exc.result
        except Stopped:  # interrupted while shrinking: the smallest divergence so far is kept
            self.found = last_failure[-1]
        except FlakyFailure:  # Hypothesis' replay of the case did not diverge again: keep the first seen
            if not last_failure:
                raise
            self.found = last_failure[0]
        return not cut[0]


class Stopped(BaseException):
    """Raised inside a Hypothesis batch on an interrupt once a divergence is known (not an
    ``Exception``, so Hypothesis neither shrinks it nor reports it)."""


@contextmanager
def no_local_constants() -> Iterator[None]:
    """Hypothesis without the literals of the project's imported modules.

    Hypothesis (``internal/conjecture/providers.py``, ``_get_local_constants``)
    sometimes draws a literal found in the local modules imported so far, so
    the same seed draws differently in a process that imported other modules
    (the CLI, a pool worker).  A campaign draws from Hypothesis's own constants
    only, so example i is the same in every process.
    """
    from hypothesis.internal.conjecture import providers

    original = getattr(providers, "_get_local_constants", None)
    cache = getattr(providers, "CONSTANTS_CACHE", None)
    if original is None or cache is None:
        yield
        return
    empty = getattr(providers, "Constants")()
    setattr(providers, "_get_local_constants", lambda: empty)
    cache.cache.clear()
    try:
        yield
    finally:
        setattr(providers, "_get_local_constants", original)
        cache.cache.clear()


SOUGHT: dict[str, tuple[str, ...]] = {
    "in-flight preemptions": (ev.PREEMPT_IN_FLIGHT_DELIVER, ev.PREEMPT_IN_FLIGHT_DROP),
    "stale outputs": (ev.STALE_DELIVERY, ev.STALE_DROP),
    "aborts in flight": (ev.ABORT_IN_FLIGHT,),
}
"""The rarest coverage categories of the default profile, each a Hypothesis ``target()`` label."""


def target_coverage(result: RunResult) -> None:
    """Coverage-seeking inside a shard: Hypothesis ``target()`` on the number of distinct spec
    events the example exercised and on the rare ones it hit (no feedback leaves the shard)."""
    hits: dict[str, int] = {}
    for row in result.rows:
        for name in row.spec_events:
            hits[name] = hits.get(name, 0) + 1
    target(float(len(hits)), label="distinct spec events")
    for label, names in SOUGHT.items():
        target(float(sum(hits.get(n, 0) for n in names)), label=label)


def shard_seed(campaign_seed: int, index: int) -> int:
    """The Hypothesis seed of shard ``index``: a function of the campaign seed and the index only."""
    return campaign_seed * 1_000_003 + index


def coverage_counts(spec_events: dict[str, int], profile: Profile | None = None) -> dict[str, int]:
    """The reported categories from the spec-event counts (the profile's extra ones too)."""
    names = dict(COVERAGE)
    if profile is not None:
        names |= {PREFIX_CACHE_HIT: (ev.PREFIX_CACHE_HIT,)} | SPEC_DECODE_COVERAGE | STRUCTURED_OUTPUT_COVERAGE
        names |= HYBRID_COVERAGE | CONNECTOR_COVERAGE | POLICY_COVERAGE | LONG_PROMPT_COVERAGE | PAUSE_COVERAGE
        names |= STREAMING_COVERAGE | ev.KV_RECOVERY_COVERAGE | ENCODER_COVERAGE | ev.OFFLOAD_COVERAGE | MAMBA_COVERAGE
        names = {c: names[c] for c in profile.reported_categories()}
    return {cat: sum(spec_events.get(e, 0) for e in evs) for cat, evs in names.items()}
