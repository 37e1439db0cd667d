"""Fixed-work campaigns in shards: ``asyncspec fuzz --examples N --seed S [--jobs K | --ray ADDRESS]``.

Example i belongs to shard ``i // SHARD`` (``SHARD`` = 20 examples).  A shard
is one seeded Hypothesis batch (``Campaign.run_shard``) whose seed is a
function of (S, shard index) alone (``campaign.shard_seed``), so example i is
the same on any machine, with any ``--jobs``.  Shards run in this process,
in a process pool of K, or as Ray tasks; ``merge`` adds them up in shard
order (events and coverage summed), so the merged result does not depend on
who ran what.

A shard keeps going after a divergence: it records each divergent example's
bucket key (``core/buckets.py``).  The merge counts them per key in campaign
order and ends the campaign at the example where the ``max_divergences``-th
distinct key first shows (that shard is run again up to that example, so the
counts are the same whoever ran what); then each bucket's representative is
shrunk by re-running its first sighting's shard (``shrink_bucket``: the first
example of that key, shrunk within the key).  ``stop_at_first`` is the mode
of old: a shard stops at its first divergence and shrinks it, and the
campaign ends with the first shard that found one.

A time-bounded run (no ``--examples``) dispatches shards in order until the
time is up (or the divergences are enough) and lets every dispatched shard
finish: what ran is shards 0..m-1, ``m x SHARD`` examples, which
``--examples`` reproduces.  With ``--examples`` the time is only an outer
limit: a shard past it stops drawing and the result is marked incomplete.

A part this vLLM cannot run (``skipped_for``: the capability probe, before
any shard) is in ``Plan.skipped``: its shards are not dispatched, so every
other shard is exactly what it would be on any release; a shard whose driver
still raises ``MissingCapability`` (a surface the part's list missed) ends
at once as skipped too (``ShardResult.missing``).  The skipped shards'
examples are not in ``examples``: ``skipped_examples`` counts them per part.
"""
from __future__ import annotations

import math
import multiprocessing
import signal
import time
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Any

from asyncspec.checker import interrupt
from asyncspec.engine.vllm.capabilities import MissingCapability

from asyncspec.statemachine_tests.core.buckets import DEFAULT_MAX_DIVERGENCES, Bucket, add_sighting, divergence_key
from asyncspec.statemachine_tests.scheduler.campaign import Campaign
from asyncspec.statemachine_tests.core.harness import RunResult
from asyncspec.statemachine_tests.core.skipped_parts import first_missing
from asyncspec.statemachine_tests.scheduler.profiles import Profile, part_names, profile_name
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
    found: RunResult | None  # stop_at_first: the shrunk divergence
    known: dict[str, int] = field(default_factory=dict)  # documented vLLM bugs hit (run.KNOWN_BUGS)
    depths: dict[int, int] = field(default_factory=dict)  # examples run per batch-queue depth
    sightings: list[tuple[int, str]] = field(default_factory=list)  # divergent examples: (shard example, key)
    firsts: dict[str, RunResult] = field(default_factory=dict)  # each key's first sighting here, unshrunk
    missing: tuple[str, str] | None = None  # (part, one line): its driver raised MissingCapability


@dataclass
class Merged:
    """Shards added up in index order, and the buckets of their divergent examples."""

    examples: int = 0
    events: int = 0
    coverage: dict[str, int] = field(default_factory=dict)
    timing: dict[str, float] = field(default_factory=dict)
    complete: bool = True
    buckets: list[Bucket] = field(default_factory=list)  # in order of first sighting
    known: dict[str, int] = field(default_factory=dict)
    interrupted: bool = False  # Ctrl-C or SIGTERM ended it (complete is then False)
    shard_examples: dict[int, int] = field(default_factory=dict)  # examples run per shard index
    depths: dict[int, int] = field(default_factory=dict)  # examples run per batch-queue depth
    missing: dict[str, str] = field(default_factory=dict)  # part -> one line: shards whose driver lacked it

    @property
    def divergences(self) -> int:
        """The divergent examples (known vLLM bugs apart)."""
        return sum(b.count for b in self.buckets)

    @property
    def found(self) -> RunResult | None:
        """The first bucket's shrunk representative, if any."""
        return next((b.representative for b in self.buckets if b.representative is not None), None)


def run_shard(target: str, profile: Profile, seed: int, index: int, limit: int, deadline: float,
              on_example: Callable[[Stats], None] | None = None, stop_at_first: bool = False) -> ShardResult:
    """Shard ``index``: its first ``limit`` examples; ``deadline`` is wall-clock (``time.time``).
    It keeps going after a divergence (``sightings``) unless ``stop_at_first`` (``found``, shrunk)."""
    c = Campaign(target, math.inf, seed, profile, batch=SHARD, on_example=on_example, keep_going=not stop_at_first)
    local = time.monotonic() + (deadline - time.time()) if math.isfinite(deadline) else math.inf
    try:
        complete = c.run_shard(index, limit, local)
    except MissingCapability as exc:  # the whole shard is skipped: nothing of it counts
        names = part_names(profile)
        return ShardResult(index, 0, 0, {}, {}, True, None, missing=(names[index % len(names)], str(exc)))
    s = c.stats
    sightings, firsts = c.sightings, c.firsts
    if c.found is not None:  # stop_at_first: the divergence is the shard's last example
        key = divergence_key(c.found, profile_name(profile.part(index)))
        sightings, firsts = [(s.examples - 1, key)], {key: c.found}
    return ShardResult(index, s.examples, s.events, dict(s.coverage), dict(s.timing), complete, c.found,
                       dict(s.known), dict(c.depths), sightings, firsts)


def shrink_bucket(target: str, profile: Profile, seed: int, index: int, key: str, example: int) -> RunResult | None:
    """The representative of bucket ``key``: shard ``index`` again up to its first sighting (example
    ``example`` of the shard), shrunk by Hypothesis within the key."""
    c = Campaign(target, math.inf, seed, profile, batch=SHARD, wanted=key)
    c.run_shard(index, example + 1)
    return c.found


def cut_point(shards: list[ShardResult], max_divergences: int, stop_at_first: bool = False) -> tuple[int, int] | None:
    """Where the campaign ends, in shard order: (shard index, examples of it kept), at the example
    where the ``max_divergences``-th distinct key first shows (``stop_at_first``: the first
    divergence); None if it never does."""
    keys: set[str] = set()
    for s in sorted(shards, key=lambda s: s.index):
        for example, key in s.sightings:
            keys.add(key)
            if stop_at_first or len(keys) >= max_divergences:
                return s.index, example + 1
    return None


def merge(shards: list[ShardResult], max_divergences: int = DEFAULT_MAX_DIVERGENCES,
          stop_at_first: bool = False) -> Merged:
    """Add ``shards`` up in index order, up to the cut (``cut_point``; the shard it cuts must have
    run exactly that far); the divergent examples counted per bucket key."""
    m, buckets = Merged(), dict[str, Bucket]()
    cut = cut_point(shards, max_divergences, stop_at_first)
    for s in sorted(shards, key=lambda s: s.index):
        if cut is not None and s.index > cut[0]:
            break
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
        if s.missing is not None:
            m.missing.setdefault(*s.missing)
        for depth, n in s.depths.items():
            m.depths[depth] = m.depths.get(depth, 0) + n
        for example, key in s.sightings:
            if cut is None or s.index < cut[0] or example < cut[1]:
                add_sighting(buckets, key, s.index * SHARD + example, s.index, s.firsts.get(key))
    m.buckets = list(buckets.values())
    return m


def enough(done: list[ShardResult], plan: Plan) -> bool:
    """Whether the shards finished so far already reach the campaign's end (``cut_point``): no
    shard after them is needed (every shard before them was dispatched first)."""
    return cut_point(done, plan.max_divergences, plan.stop_at_first) is not None


@dataclass(frozen=True)
class Plan:
    """What to run: ``examples`` (None: time-bounded), the outer limit, where, and when to stop."""

    target: str
    profile: Profile
    seed: int
    examples: int | None
    seconds: float
    jobs: int = 1
    ray: str | None = None
    max_divergences: int = DEFAULT_MAX_DIVERGENCES  # distinct divergences (buckets) that end the campaign
    stop_at_first: bool = False  # the first divergence ends the campaign (bisecting)
    skipped: tuple[tuple[str, str], ...] = ()  # (part, one line): parts this vLLM cannot run (``skipped_for``)

    def shards(self) -> Iterator[tuple[int, int]]:
        """(index, examples of it to run), in order, the skipped parts' left out; endless when time-bounded."""
        names, skipped = part_names(self.profile), dict(self.skipped)
        if all(name in skipped for name in names):  # nothing to run (a time-bounded run would never end)
            return
        for index, left in self.all_shards():
            if names[index % len(names)] not in skipped:
                yield index, left

    def all_shards(self) -> Iterator[tuple[int, int]]:
        """(index, examples of it), skipped parts included, in order; endless when time-bounded."""
        index = 0
        while self.examples is None or index * SHARD < self.examples:
            left = SHARD if self.examples is None else min(SHARD, self.examples - index * SHARD)
            yield index, left
            index += 1


def part_capabilities(part: Profile) -> tuple[str, ...]:
    """The capabilities (``engine/vllm/surfaces.py``) a ``vllm`` shard of ``part`` may need: those of a
    scheduler with every feature the part can draw (``vllm_config.needed_capabilities``),
    structured output when it draws grammars, and the stop conditions when it draws stops."""
    from asyncspec.engine.vllm import surfaces
    from asyncspec.engine.vllm.vllm_config import DriverConfig, needed_capabilities

    widest = DriverConfig(
        mrv2_pp=3 in part.depths, num_speculative_tokens=max(part.spec_tokens),
        sliding_window=max(part.sliding_windows), kv_connector=any(part.kv_connectors),
        kv_connector_name=next((n for n in ("nixl", "offloading") if n in part.kv_connectors), "toy"),
        policy="priority" if "priority" in part.policies else "fcfs",
        long_prefill_adaptive=True in part.long_prefill_adaptive, streaming_input=part.streaming,
        mamba_cache_mode=next((m for m in part.mamba_modes if m), ""))
    grammar = (surfaces.STRUCTURED_OUTPUT,) if True in part.structured_output else ()
    stops = (surfaces.STOP_CONDITIONS,) if part.stops else ()
    return (*needed_capabilities(widest), *grammar, *stops)


def skipped_for(target: str, profile: Profile) -> tuple[tuple[str, str], ...]:
    """(part, one line) for each part of ``profile`` the installed vLLM cannot run (``vllm`` only;
    the probe, ``core/skipped_parts.first_missing``), in part order, each part once."""
    if target != "vllm":
        return ()
    found: dict[str, str] = {}
    for index, name in enumerate(part_names(profile)):
        reason = found.get(name) or first_missing(part_capabilities(profile.part(index)))
        if reason is not None:
            found[name] = reason
    return tuple(found.items())


def skipped_examples(plan: Plan, m: Merged) -> dict[str, int]:
    """Examples per skipped part (``plan.skipped`` and ``m.missing``) the campaign's range held but did
    not run: every skipped shard of a fixed-work run that went to its end, else those before the
    last shard run."""
    names, reasons = part_names(plan.profile), dict(plan.skipped) | m.missing
    cut = (plan.stop_at_first and bool(m.buckets)) or len(m.buckets) >= plan.max_divergences
    whole = plan.examples is not None and m.complete and not cut
    last = max((i for i, n in m.shard_examples.items() if n), default=-1)
    counts = {name: 0 for name in reasons}
    for index, left in plan.all_shards():
        if not whole and index >= last:
            break
        name = names[index % len(names)]
        if name in reasons and (name in dict(plan.skipped) or m.shard_examples.get(index) == 0):
            counts[name] += left
    return counts


Submit = Callable[[int, int], "Future[ShardResult]"]
Report = Callable[[int, dict[str, int]], None]  # progress: examples so far, spec events covered
Call = Callable[..., "Future[Any]"]  # call(function, *args): runs it here, in a pool or on Ray


def run_plan(plan: Plan, report: Report | None = None) -> Merged:
    """Run ``plan`` here (``jobs`` 1) or in a process pool of ``jobs``; the merged result
    (Ray: ``ray_shards.run_on_ray``).  An interrupt (``checker.interrupt``) ends it with the
    shards finished so far (a shard running here keeps its examples and any divergence)."""
    deadline = time.time() + plan.seconds
    if plan.jobs == 1:
        merged = finish_plan(plan, list(_serial(plan, deadline, report)), run_here)
    else:
        ctx = multiprocessing.get_context("spawn")  # vLLM and torch are not fork-safe
        with ProcessPoolExecutor(plan.jobs, mp_context=ctx, initializer=_ignore_sigint) as pool:
            def submit(index: int, limit: int) -> Future[ShardResult]:
                return pool.submit(run_shard, *shard_args(plan, index, limit, deadline))

            shards = dispatch(plan, deadline, submit, report, lambda: _stop_workers(pool))
            merged = finish_plan(plan, shards, run_here if interrupt.requested() else pool.submit)
    merged.interrupted = interrupt.requested()
    merged.complete = merged.complete and not merged.interrupted
    return merged


def run_here(function: Callable[..., Any], *args: Any) -> Future[Any]:
    """``Call`` in this process: ``function(*args)`` now, as a finished future."""
    future: Future[Any] = Future()
    future.set_result(function(*args))
    return future


def finish_plan(plan: Plan, shards: list[ShardResult], call: Call) -> Merged:
    """The shards merged: the shard the campaign ends in run again up to its cut, then each
    bucket's representative shrunk (all through ``call``; an interrupt leaves them unshrunk)."""
    cut = cut_point(shards, plan.max_divergences, plan.stop_at_first)
    if cut is not None and not plan.stop_at_first and not interrupt.requested():
        index, limit = cut
        last = next(s for s in shards if s.index == index)
        if limit < last.examples:
            again: ShardResult = call(run_shard, *shard_args(plan, index, limit, math.inf)).result()
            shards = [again if s.index == index else s for s in shards]
    merged = merge(shards, plan.max_divergences, plan.stop_at_first)
    todo = [] if plan.stop_at_first or interrupt.requested() else merged.buckets  # stop_at_first: shrunk
    futures = [call(shrink_bucket, plan.target, plan.profile, plan.seed, b.shard, b.key,
                    b.first_example - b.shard * SHARD) for b in todo]
    for bucket, future in zip(todo, futures):
        bucket.representative = future.result()
    for bucket in merged.buckets:  # stop_at_first (shrunk), interrupted or not reproduced (unshrunk)
        bucket.representative = bucket.representative or bucket.sighting
    return merged


def _ignore_sigint() -> None:
    """A pool worker leaves Ctrl-C (sent to the whole process group) to the parent."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _stop_workers(pool: ProcessPoolExecutor) -> None:
    """On an interrupt: no new shard, and the running ones end now (their work is not counted)."""
    processes = list((getattr(pool, "_processes", None) or {}).values())
    manager = getattr(pool, "_executor_manager_thread", None)
    pool.shutdown(wait=False, cancel_futures=True)
    for process in processes:
        process.terminate()
    # shutdown(wait=False) forgets the pool's manager thread; joined here, it has closed its wakeup
    # pipe before concurrent.futures' exit hook writes to that pipe (EBADF traceback otherwise)
    if manager is not None:
        manager.join(timeout=10)


def _serial(plan: Plan, deadline: float, report: Report | None = None) -> Iterator[ShardResult]:
    done: list[ShardResult] = []
    coverage: dict[str, int] = {}

    def on_example(stats: Stats) -> None:
        if report is not None:
            report(sum(r.examples for r in done) + stats.examples, coverage | stats.coverage)
        interrupt.pause_point("mid-run")  # a test signals here (checker/interrupt.py)
    for index, limit in plan.shards():
        if interrupt.requested() or (plan.examples is None and time.time() >= deadline):
            return
        args = shard_args(plan, index, limit, deadline)
        result = run_shard(*args[:6], on_example=on_example, stop_at_first=plan.stop_at_first)
        done.append(result)
        for name, n in result.coverage.items():
            coverage[name] = coverage.get(name, 0) + n
        yield result
        if enough(done, plan) or not result.complete:
            return


def dispatch(plan: Plan, deadline: float, submit: Submit, report: Report | None = None,
             stop: Callable[[], None] | None = None) -> list[ShardResult]:
    """At most ``jobs`` shards in flight, dispatched in index order (so what ran is a prefix).

    No new shard once the finished ones reach the campaign's end (``enough``);
    time-bounded, none once the time is up either.  Fixed work: every shard,
    each cut at ``deadline``.  An interrupt: the shards finished so far, and
    ``stop()`` ends the others.
    """
    pending: set[Future[ShardResult]] = set()
    done: list[ShardResult] = []
    submitted: list[int] = []  # shard indices in dispatch order

    def collect(until_one: bool) -> None:
        nonlocal pending
        while pending and not interrupt.requested():
            finished, pending = wait(pending, timeout=0.2, return_when=FIRST_COMPLETED)
            done.extend(f.result() for f in finished)
            if finished and report is not None:
                report(sum(r.examples for r in done), merge(done).coverage)
            if finished:
                interrupt.pause_point("mid-run")  # a test signals here (checker/interrupt.py)
            if finished and until_one:
                return
    for index, limit in plan.shards():
        if interrupt.requested() or enough(done, plan):
            break
        if plan.examples is None and time.time() >= deadline:
            break
        if len(pending) >= plan.jobs:
            collect(until_one=True)
            if interrupt.requested() or enough(done, plan):
                break
        pending.add(submit(index, limit))
        submitted.append(index)
    collect(until_one=False)
    if pending and stop is not None:  # interrupted: what finished is kept
        done.extend(f.result() for f in pending if f.done() and not f.cancelled() and f.exception() is None)
        stop()
    return dispatched_prefix(done, submitted) if interrupt.requested() else done


def dispatched_prefix(done: list[ShardResult], submitted: list[int]) -> list[ShardResult]:
    """The finished shards that are a prefix of the dispatch order: an interrupted run keeps only
    those, so ``--examples N --seed S`` (which runs the first shards) reproduces it exactly."""
    by_index = {s.index: s for s in done}
    kept: list[ShardResult] = []
    for index in submitted:
        if index not in by_index:
            break
        kept.append(by_index[index])
    return kept


ShardArgs = tuple[str, Profile, int, int, int, float, None, bool]  # run_shard's positional arguments


def shard_args(plan: Plan, index: int, limit: int, deadline: float) -> ShardArgs:
    """The arguments of ``run_shard`` for one shard of ``plan``."""
    outer = deadline if plan.examples is not None else math.inf
    return plan.target, plan.profile, plan.seed, index, limit, outer, None, plan.stop_at_first
