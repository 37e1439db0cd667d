"""Fixed-work campaigns in shards: ``asyncspec fuzz --examples N --seed S [--jobs K | --ray ADDRESS]``.

Example i belongs to shard ``i // SHARD`` (``SHARD`` = 20 examples).  A shard
is one seeded Hypothesis batch (``Campaign.run_shard``) whose seed is a
function of (S, shard index) alone (``campaign.shard_seed``), so example i is
the same on any machine, with any ``--jobs``.  Shards run in this process,
in a process pool of K, or as Ray tasks; ``merge`` adds them up in shard
order (events and coverage summed, divergences deduplicated by their shrunk
workload and events), so the merged result does not depend on who ran what.

A time-bounded run (no ``--examples``) dispatches shards in order until the
time is up and lets every dispatched shard finish: what ran is shards 0..m-1,
``m x SHARD`` examples, which ``--examples`` reproduces.  With ``--examples``
the time is only an outer limit: a shard past it stops drawing and the
result is marked incomplete.
"""
from __future__ import annotations

import math
import multiprocessing
import signal
import time
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass, field

from asyncspec.checker import interrupt

from asyncspec.statemachine_tests.scheduler.campaign import Campaign
from asyncspec.statemachine_tests.core.harness import RunResult
from asyncspec.statemachine_tests.scheduler.profiles import Profile
from asyncspec.statemachine_tests.scheduler.fuzz_example import Stats

SHARD = 20  # examples per shard (one seeded Hypothesis batch); part of what (S, i) means


@dataclass
class ShardResult:
    """What one shard did."""

    index: int
    examples: int  # examples run (shrinking not counted)
    events: int  # events applied (shrinking included)
    coverage: dict[str, int]
    timing: dict[str, float]
    complete: bool  # False: the outer time limit cut it short
    found: RunResult | None
    known: dict[str, int] = field(default_factory=dict)  # documented vLLM bugs hit (run.KNOWN_BUGS)
    depths: dict[int, int] = field(default_factory=dict)  # examples run per batch-queue depth


@dataclass
class Merged:
    """Shards added up in index order."""

    examples: int = 0
    events: int = 0
    coverage: dict[str, int] = field(default_factory=dict)
    timing: dict[str, float] = field(default_factory=dict)
    complete: bool = True
    divergences: list[RunResult] = field(default_factory=list)
    known: dict[str, int] = field(default_factory=dict)
    interrupted: bool = False  # Ctrl-C or SIGTERM ended it (complete is then False)
    shard_examples: dict[int, int] = field(default_factory=dict)  # examples run per shard index
    depths: dict[int, int] = field(default_factory=dict)  # examples run per batch-queue depth

    @property
    def found(self) -> RunResult | None:
        return self.divergences[0] if self.divergences else None


def run_shard(target: str, profile: Profile, seed: int, index: int, limit: int, deadline: float,
              on_example: Callable[[Stats], None] | None = None) -> ShardResult:
    """Shard ``index``: its first ``limit`` examples; ``deadline`` is wall-clock (``time.time``)."""
    c = Campaign(target, math.inf, seed, profile, batch=SHARD, on_example=on_example)
    local = time.monotonic() + (deadline - time.time()) if math.isfinite(deadline) else math.inf
    complete = c.run_shard(index, limit, local)
    s = c.stats
    return ShardResult(index, s.examples, s.events, dict(s.coverage), dict(s.timing), complete, c.found,
                       dict(s.known), dict(c.depths))


def divergence_key(result: RunResult) -> tuple[str, tuple[str, ...]]:
    """Two divergences are the same when their shrunk workload and events are."""
    return repr(result.workload), tuple(str(e) for e in result.events)


def merge(shards: list[ShardResult]) -> Merged:
    """Add ``shards`` up in index order; the first divergence of each shrunk trace is kept."""
    m, seen = Merged(), set()
    for s in sorted(shards, key=lambda s: s.index):
        m.examples += s.examples
        m.events += s.events
        m.complete = m.complete and s.complete
        for name, n in s.coverage.items():
            m.coverage[name] = m.coverage.get(name, 0) + n
        for name, t in s.timing.items():
            m.timing[name] = m.timing.get(name, 0.0) + t
        for name, n in s.known.items():
            m.known[name] = m.known.get(name, 0) + n
        m.shard_examples[s.index] = s.examples
        for depth, n in s.depths.items():
            m.depths[depth] = m.depths.get(depth, 0) + n
        if s.found is not None and divergence_key(s.found) not in seen:
            seen.add(divergence_key(s.found))
            m.divergences.append(s.found)
    return m


@dataclass(frozen=True)
class Plan:
    """What to run: ``examples`` (None: time-bounded), the outer limit, and where."""

    target: str
    profile: Profile
    seed: int
    examples: int | None
    seconds: float
    jobs: int = 1
    ray: str | None = None

    def shards(self) -> Iterator[tuple[int, int]]:
        """(index, examples of it to run), in order; endless when time-bounded."""
        index = 0
        while self.examples is None or index * SHARD < self.examples:
            left = SHARD if self.examples is None else min(SHARD, self.examples - index * SHARD)
            yield index, left
            index += 1


Submit = Callable[[int, int], "Future[ShardResult]"]
Report = Callable[[int, dict[str, int]], None]  # progress: examples so far, spec events covered


def run_plan(plan: Plan, report: Report | None = None) -> Merged:
    """Run ``plan`` here (``jobs`` 1) or in a process pool of ``jobs``; the merged result
    (Ray: ``ray_shards.run_on_ray``).  An interrupt (``checker.interrupt``) ends it with the
    shards finished so far (a shard running here keeps its examples and any divergence)."""
    deadline = time.time() + plan.seconds
    if plan.jobs == 1:
        merged = merge(list(_serial(plan, deadline, report)))
    else:
        ctx = multiprocessing.get_context("spawn")  # vLLM and torch are not fork-safe
        with ProcessPoolExecutor(plan.jobs, mp_context=ctx, initializer=_ignore_sigint) as pool:
            def submit(index: int, limit: int) -> Future[ShardResult]:
                return pool.submit(run_shard, *shard_args(plan, index, limit, deadline))

            merged = merge(dispatch(plan, deadline, submit, report, lambda: _stop_workers(pool)))
    merged.interrupted = interrupt.requested()
    merged.complete = merged.complete and not merged.interrupted
    return merged


def _ignore_sigint() -> None:
    """A pool worker leaves Ctrl-C (sent to the whole process group) to the parent."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _stop_workers(pool: ProcessPoolExecutor) -> None:
    """On an interrupt: no new shard, and the running ones end now (their work is not counted)."""
    processes = list((getattr(pool, "_processes", None) or {}).values())
    pool.shutdown(wait=False, cancel_futures=True)
    for process in processes:
        process.terminate()


def _serial(plan: Plan, deadline: float, report: Report | None = None) -> Iterator[ShardResult]:
    done = [0]
    coverage: dict[str, int] = {}

    def on_example(stats: Stats) -> None:
        if report is not None:
            report(done[0] + stats.examples, coverage | stats.coverage)
    for index, limit in plan.shards():
        if interrupt.requested() or (plan.examples is None and time.time() >= deadline):
            return
        result = run_shard(*shard_args(plan, index, limit, deadline), on_example=on_example)
        done[0] += result.examples
        for name, n in result.coverage.items():
            coverage[name] = coverage.get(name, 0) + n
        yield result
        if plan.examples is None and result.found is not None:
            return  # a time-bounded run stops at its first divergence
        if not result.complete:
            return


def dispatch(plan: Plan, deadline: float, submit: Submit, report: Report | None = None,
             stop: Callable[[], None] | None = None) -> list[ShardResult]:
    """At most ``jobs`` shards in flight, dispatched in index order (so what ran is a prefix).

    Time-bounded: no new shard once the time is up or a divergence was found.
    Fixed work: every shard, each cut at ``deadline``.  An interrupt: the shards
    finished so far, and ``stop()`` ends the others.
    """
    pending: set[Future[ShardResult]] = set()
    done: list[ShardResult] = []

    def collect(until_one: bool) -> None:
        nonlocal pending
        while pending and not interrupt.requested():
            finished, pending = wait(pending, timeout=0.2, return_when=FIRST_COMPLETED)
            done.extend(f.result() for f in finished)
            if finished and report is not None:
                report(sum(r.examples for r in done), merge(done).coverage)
            if finished and until_one:
                return
    for index, limit in plan.shards():
        if interrupt.requested():
            break
        if plan.examples is None and (time.time() >= deadline or any(r.found for r in done)):
            break
        if len(pending) >= plan.jobs:
            collect(until_one=True)
            if interrupt.requested():
                break
        pending.add(submit(index, limit))
    collect(until_one=False)
    if pending and stop is not None:  # interrupted: what finished is kept
        done.extend(f.result() for f in pending if f.done() and not f.cancelled() and f.exception() is None)
        stop()
    return done


ShardArgs = tuple[str, Profile, int, int, int, float]  # run_shard's positional arguments


def shard_args(plan: Plan, index: int, limit: int, deadline: float) -> ShardArgs:
    """The arguments of ``run_shard`` for one shard of ``plan``."""
    outer = deadline if plan.examples is not None else math.inf
    return plan.target, plan.profile, plan.seed, index, limit, outer
