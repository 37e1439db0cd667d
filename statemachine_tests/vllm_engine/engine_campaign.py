"""A ``vllm-engine`` campaign: Hypothesis cases on vLLM's EngineCore, the spec in lock step, shrunk divergences.

Engines are built once per configuration and reused by every case (start-up
is paid once per campaign, not per case).  A campaign is a fixed amount of
work — ``batches`` of ``batch`` examples, each batch seeded from the campaign
seed — or time-bounded.  By default a divergence stops it and is shrunk by
Hypothesis (``run_fixed``, the entry point ``asyncspec mutate-vllm`` uses, and
``--stop-at-first``); with ``keep_going`` (``asyncspec fuzz``) it counts each
divergent example in its bucket (``core/buckets.py``) until
``max_divergences`` distinct ones, then ``shrink_buckets`` shrinks one
representative per bucket by running its first sighting's batch again.

A part this vLLM cannot run (``skipped``: part -> one line, from the probe
before the campaign, or from a driver's ``MissingCapability`` at its first
case) keeps its cases drawn, so every other case is the same on any release,
but not run: ``EngineStats.skipped`` counts them per part, and they fill the
fixed work (``drawn``) as run ones do; ``examples`` counts the ones run.
"""
from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, Phase, given, seed, settings
from hypothesis.errors import FlakyFailure

from asyncspec.checker import interrupt
from asyncspec.engine.vllm.capabilities import MissingCapability
from asyncspec.engine.vllm.engine_config import EngineDriverConfig

from asyncspec.statemachine_tests.core.buckets import DEFAULT_MAX_DIVERGENCES, Bucket, add_sighting, divergence_key
from asyncspec.statemachine_tests.vllm_engine import engine_case as ec
from asyncspec.statemachine_tests.scheduler.campaign import Stopped, no_local_constants
from asyncspec.statemachine_tests.vllm_engine.engine_profile import (
    CHOICES, DEFAULT_ENGINE_PROFILE, MAX_DRAIN, EngineProfile, drain, engine_cases, pick, planned,
)
from asyncspec.statemachine_tests.vllm_engine.engine_explained import explain
from asyncspec.statemachine_tests.vllm_engine.engine_run import EngineRun, EngineRunResult
from asyncspec.statemachine_tests.vllm_engine.engine_target import EngineTarget
from asyncspec.statemachine_tests.scheduler.fuzz_example import Divergence


@dataclass
class EngineStats:
    """What a campaign did."""

    examples: int = 0
    engine_events: int = 0
    steps: int = 0
    coverage: dict[str, int] = field(default_factory=dict)  # spec events and worker categories
    depths: set[int] = field(default_factory=set)
    explained: dict[str, int] = field(default_factory=dict)  # known causes (engine_explained.py) -> cases
    first_divergence_example: int | None = None  # examples run when the first divergence showed
    flaky: int = 0  # divergences Hypothesis' replay of the same case did not reproduce (kept, unshrunk)
    timing: dict[str, float] = field(default_factory=dict)
    skipped: dict[str, int] = field(default_factory=dict)  # part -> cases drawn but not run (a skipped part)

    def drawn(self) -> int:
        """Cases of the campaign's range so far: run or skipped (the fixed work counts both)."""
        return self.examples + sum(self.skipped.values())


class EngineTargets:
    """One ``EngineTarget`` per engine configuration, built on first use."""

    def __init__(self) -> None:
        self._targets: dict[EngineDriverConfig, EngineTarget] = {}
        self.build_seconds = 0.0

    def get(self, config: EngineDriverConfig) -> EngineTarget:
        if config not in self._targets:
            t0 = time.perf_counter()
            self._targets[config] = EngineTarget(config)
            self.build_seconds += time.perf_counter() - t0
        return self._targets[config]

    def recover(self, config: EngineDriverConfig) -> None:
        """After a divergence: abort what is left and step the engine idle; a broken one is rebuilt."""
        target = self._targets.get(config)
        if target is None:
            return
        try:
            target.driver.abort(list(target.driver.scheduler.requests))
            _step_idle(target)
            still_held = target.driver.leftover()
        except Exception:  # noqa: BLE001 - an engine that crashed is not reused
            still_held = "crashed"
        if still_held is not None:  # not idle even after the aborts: the next case gets a new engine
            del self._targets[config]

    def runner_class(self) -> str:
        for target in self._targets.values():
            return type(target.driver.worker.runner).__name__
        return ""


def drive_case(case: ec.EngineCase, choices: bytes, targets: EngineTargets, stats: EngineStats) -> EngineRunResult:
    """One example: the case's events on the engine and the spec until they differ or the engine idles."""
    target = targets.get(case.engine)
    run = EngineRun(case, target, stats.coverage)
    stats.depths.add(case.engine.depth)
    arrived = 0
    for choice in planned(choices):
        if run.diverged:
            break
        has_work = target.driver.has_work()
        if choice is None:
            event = drain(arrived, len(case.requests), has_work, target.driver.paused(),
                          run.oracle.enabled() if arrived else [])
        else:
            event = pick(choice, arrived, len(case.requests), run.oracle.enabled() if arrived else [],
                         target.driver.aborts_pending(), has_work, target.driver.schedules_next())
        if event is None:
            if choice is None:
                break
            continue
        arrived += event.kind == ec.ADD_REQUEST
        stats.engine_events += 1
        stats.steps += event.kind == ec.STEP
        run.apply(event)
    if not run.diverged:
        run.check_finished(target.driver.leftover())
    if run.diverged:
        targets.recover(case.engine)
    return run.result


def _step_idle(target: EngineTarget) -> None:
    """Step the engine until it is idle after a divergence's aborts (at most ``MAX_DRAIN`` steps)."""
    for _ in range(MAX_DRAIN):
        if not target.driver.has_work():
            return
        target.driver.step()


@dataclass
class EngineCampaign:
    """Fuzz the production engine; ``found`` is the minimal divergence, if any."""

    seconds: float
    seed: int
    profile: EngineProfile = DEFAULT_ENGINE_PROFILE
    batch: int = 20
    max_batches: int | None = None  # fixed work (deterministic), else time-bounded
    max_examples: int | None = None  # fixed work: stop after this many (the last batch cut short)
    stats: EngineStats = field(default_factory=EngineStats)
    targets: EngineTargets = field(default_factory=EngineTargets)
    found: EngineRunResult | None = None
    on_example: Callable[[EngineStats], None] | None = None  # progress, after each example
    keep_going: bool = False  # count divergent examples in ``buckets`` instead of stopping at the first
    max_divergences: int = DEFAULT_MAX_DIVERGENCES  # keep_going: the distinct ones that end the campaign
    wanted: str | None = None  # shrink the first divergent example of this bucket key only
    buckets: dict[str, Bucket] = field(default_factory=dict)  # keep_going: by key, in order of first sighting
    skipped: dict[str, str] = field(default_factory=dict)  # part (``EngineProfile.config_part``) -> one line

    def run(self) -> EngineRunResult | None:
        deadline = time.monotonic() + self.seconds
        index = 0
        while self.found is None and not self._enough() and self._more(index, deadline):
            self._batch(self.batch_seed(index), deadline, index)
            index += 1
        return self.found

    def batch_seed(self, index: int) -> int:
        """The Hypothesis seed of batch ``index``."""
        return self.seed * 1_000_003 + index

    def part(self) -> str:
        """The profile part of a bucket key: the runner, and whether drafts are drawn."""
        return self.profile.runner + ("+spec-decode" if any(self.profile.spec_tokens) else "")

    def _enough(self) -> bool:
        return self.keep_going and len(self.buckets) >= self.max_divergences

    def shrink_buckets(self) -> list[Bucket]:
        """Each bucket with its representative: its first sighting's batch run again up to it,
        shrunk within its key (the first sighting, unshrunk, if that does not reproduce it or
        an interrupt came); in order of first sighting."""
        for key, bucket in self.buckets.items():
            shrunk = None
            if not interrupt.requested():
                again = EngineCampaign(math.inf, self.seed, self.profile, self.batch, targets=self.targets,
                                       max_examples=bucket.first_example - bucket.shard * self.batch + 1, wanted=key,
                                       skipped=dict(self.skipped))
                again._batch(self.batch_seed(bucket.shard), math.inf, bucket.shard)
                shrunk = again.found
            bucket.representative = shrunk or bucket.sighting
        return list(self.buckets.values())

    def _more(self, index: int, deadline: float) -> bool:
        if index:
            interrupt.pause_point("mid-run")  # after the first batch: a test signals here (checker/interrupt.py)
        if interrupt.requested() or (self.max_examples is not None and self.stats.drawn() >= self.max_examples):
            return False
        if self.max_batches is not None and index >= self.max_batches:
            return False
        if self.max_batches is None and self.skipped and all(p in self.skipped for p in self.profile.parts()):
            return False  # time-bounded with every part skipped: it would only draw (fixed work counts them)
        return time.monotonic() < deadline  # with fixed work, an outer limit (the run is then partial)

    def _batch(self, batch_seed: int, deadline: float, index: int = 0) -> None:
        stats, targets = self.stats, self.targets
        failures: list[EngineRunResult] = []

        @seed(batch_seed)
        @settings(max_examples=self.batch, deadline=None, database=None, derandomize=False,
                  phases=(Phase.generate, Phase.shrink), suppress_health_check=list(HealthCheck),
                  report_multiple_bugs=False)
        @given(engine_cases(self.profile), CHOICES)
        def example(case: ec.EngineCase, choices: bytes) -> None:
            if interrupt.requested():  # keep what was found (Stopped: the smallest divergence so far)
                if failures:
                    raise Stopped
                return
            if time.monotonic() >= deadline and not failures:
                return
            if self.max_examples is not None and stats.drawn() >= self.max_examples and not failures:
                return  # example i of a batch is the same whatever the limit (campaign.run_shard)
            if self._enough():
                return
            part = self.profile.config_part(case.engine)
            if part in self.skipped:  # drawn, not run: the other cases stay what they are
                if not failures:
                    stats.skipped[part] = stats.skipped.get(part, 0) + 1
                return
            try:
                stats.examples += 1
                result = drive_case(case, choices, targets, stats)
            except MissingCapability as exc:  # a surface the part's list missed: skipped from here on
                stats.examples -= 1
                self.skipped[part] = str(exc).splitlines()[0]
                stats.skipped[part] = stats.skipped.get(part, 0) + 1
                return
            if self.on_example is not None and not failures:
                self.on_example(stats)
            cause = explain(result) if result.diverged else None
            if cause is not None:
                stats.explained[cause] = stats.explained.get(cause, 0) + 1
            elif result.diverged and (self.keep_going or self.wanted is not None):
                key = divergence_key(result, self.part())
                if self.keep_going:
                    add_sighting(self.buckets, key, stats.drawn() - 1, index, result)
                if key == self.wanted:
                    failures.append(result)
                    raise Divergence(result)
            elif result.diverged:
                if stats.first_divergence_example is None:
                    stats.first_divergence_example = stats.drawn()
                failures.append(result)
                raise Divergence(result)

        try:
            with no_local_constants():  # the same cases in every process (campaign.py)
                example()
        except Divergence as exc:
            assert isinstance(exc.result, EngineRunResult)
            self.found = exc.result
        except Stopped:
            self.found = failures[-1]
        except FlakyFailure:  # Hypothesis' replay of the case did not diverge again: keep the first one seen,
            if not failures:  # unshrunk (the engine is reused across cases; see ``flaky``)
                raise
            self.found = failures[0]
            self.stats.flaky += 1

    def coverage(self) -> dict[str, int]:
        """The reported categories: spec-event ones summed, worker ones as counted."""
        out = {cat: sum(self.stats.coverage.get(e, 0) for e in events)
               for cat, events in self.profile.event_categories().items()}
        for cat in self.profile.categories():
            out.setdefault(cat, self.stats.coverage.get(cat, 0))
        return out


def run_fixed(examples: int, seed: int, depths: tuple[int, ...] = (1, 2, 3),
              profile: EngineProfile | None = None) -> dict[str, Any]:
    """A fixed-work campaign of about ``examples`` cases (whole batches of 20); its summary."""
    base = profile if profile is not None else DEFAULT_ENGINE_PROFILE
    chosen = replace(base, depths=depths)
    batch = min(20, max(1, examples))
    campaign = EngineCampaign(seconds=float("inf"), seed=seed, profile=chosen, batch=batch,
                              max_batches=max(1, -(-examples // batch)))
    found = campaign.run()
    return {"examples": campaign.stats.examples, "divergences": int(found is not None),
            "coverage": campaign.coverage(), "depths": sorted(campaign.stats.depths),
            "explained": dict(campaign.stats.explained),
            "first_divergence_example": campaign.stats.first_divergence_example,
            "first_divergence": str(found.rows[-1].differences[0]) if found else None}



SPEC_DECODE_KILL_EXAMPLES = 100
"""The spec-decode campaign ``run_for_mutants`` adds after a clean default campaign."""
PAUSE_KILL_EXAMPLES = 300
"""The pause campaign ``run_for_mutants`` adds next (the default campaign's ``pause`` part)."""
STREAMING_KILL_EXAMPLES = 200
"""The streaming campaign ``run_for_mutants`` adds next (the default campaign's ``streaming`` part)."""
KV_RECOVERY_KILL_EXAMPLES = 100
"""The kv-recovery campaign ``run_for_mutants`` adds next (the default campaign's ``kv-recovery`` part)."""
ENCODER_KILL_EXAMPLES = 100
"""The encoder campaign ``run_for_mutants`` adds next (the default campaign's ``encoder`` part)."""
MAMBA_KILL_EXAMPLES = 200
"""The mamba campaign ``run_for_mutants`` adds next (the default campaign's ``mamba`` part, about 5 s)."""
DP_KILL_EXAMPLES = 100
"""The DP wave cases ``run_for_mutants`` adds next (the default campaign's ``dp`` part)."""
LOGPROBS_KILL_EXAMPLES = 200
"""The logprobs cases ``run_for_mutants`` adds last (the default campaign's ``logprobs`` part: the runner's
prompt logprobs, ``mutants_features.RUNNER_LOGPROBS_MUTANTS``: the profile kills one at its example 6, the
other at 178)."""


def run_for_mutants(examples: int, seed: int, spec_examples: int = SPEC_DECODE_KILL_EXAMPLES,
                    pause_examples: int = PAUSE_KILL_EXAMPLES,
                    streaming_examples: int = STREAMING_KILL_EXAMPLES,
                    kv_examples: int = KV_RECOVERY_KILL_EXAMPLES,
                    encoder_examples: int = ENCODER_KILL_EXAMPLES, mamba_examples: int = MAMBA_KILL_EXAMPLES,
                    dp_examples: int = DP_KILL_EXAMPLES,
                    logprobs_examples: int = LOGPROBS_KILL_EXAMPLES) -> dict[str, Any]:
    """What ``asyncspec mutate-vllm`` runs on this target: ``run_fixed`` over the default profile
    and, while each stays clean, ``spec_examples`` cases of the ``spec-decode`` profile
    (speculative decoding reaches code no default case does: ``EngineCore.post_step``'s draft
    path, the runner's draft bookkeeping), ``pause_examples`` of the ``pause`` profile
    (``EngineCore.pause_scheduler``), ``streaming_examples`` of the ``streaming`` profile (the
    runner's session update path), ``kv_examples`` of the ``kv-recovery`` profile (the
    scheduler's connector paths, the toy connector's worker half in the runner) and
    ``encoder_examples`` of the ``encoder`` profile (encoder inputs, the encoder cache manager, the
    runner's encoder path) and ``mamba_examples`` of the ``mamba`` profile (a Mamba group in mode none: its
    state blocks in the scheduler, the runner's second block table), then ``dp_examples`` cases of the ``dp`` part (``DPEngineCoreProc``'s wave
    loop: ``dp_part.py``), then ``logprobs_examples`` of the ``logprobs`` profile (the runner's prompt logprobs,
    ``logprobs_check.py``).  Examples are counted across all, in that order."""
    from asyncspec.statemachine_tests.vllm_engine.engine_profile import (
        ENCODER_ENGINE_PROFILE, KV_RECOVERY_ENGINE_PROFILE, MAMBA_ENGINE_PROFILE, PAUSE_ENGINE_PROFILE,
        SPEC_DECODE_ENGINE_PROFILE, STREAMING_ENGINE_PROFILE,
    )

    summary = run_fixed(examples, seed)
    for count, profile, name in ((spec_examples, SPEC_DECODE_ENGINE_PROFILE, "spec-decode"),
                                 (pause_examples, PAUSE_ENGINE_PROFILE, "pause"),
                                 (streaming_examples, STREAMING_ENGINE_PROFILE, "streaming"),
                                 (kv_examples, KV_RECOVERY_ENGINE_PROFILE, "kv-recovery"),
                                 (encoder_examples, ENCODER_ENGINE_PROFILE, "encoder"),
                                 (mamba_examples, MAMBA_ENGINE_PROFILE, "mamba")):
        if summary["divergences"] or not count:
            return summary
        summary = _then(summary, run_fixed(count, seed, profile.depths, profile), name)
    if summary["divergences"] or not dp_examples:
        return summary
    summary = _then(summary, dp_summary(dp_examples, seed), "dp")
    if summary["divergences"] or not logprobs_examples:
        return summary
    from asyncspec.statemachine_tests.vllm_engine.engine_profile import LOGPROBS_ENGINE_PROFILE as logprobs

    return _then(summary, run_fixed(logprobs_examples, seed, logprobs.depths, logprobs), "logprobs")


def dp_summary(examples: int, seed: int) -> dict[str, Any]:
    """``examples`` cases of the ``dp`` part (``dp_part.py``) as ``run_fixed``'s summary fields ``_then`` reads."""
    import tempfile

    from asyncspec.statemachine_tests.vllm_engine.dp_part import run_dp_cases

    with tempfile.TemporaryDirectory() as folder:
        run, _ = run_dp_cases(seed, examples, Path(folder), 1, True)
    first = next(iter(run.buckets.values()), None)
    return {"examples": run.ran, "divergences": sum(int(b["count"]) for b in run.buckets.values()),
            "first_divergence_example": None if first is None else int(first["first_example"]),
            "first_divergence": run.messages[0] if run.messages else None, "coverage": dict(run.coverage)}


def _then(before: dict[str, Any], more: dict[str, Any], name: str) -> dict[str, Any]:
    """``more``'s summary with the examples of ``before`` counted first."""
    first = more["first_divergence_example"]
    return {**more, "examples": before["examples"] + more["examples"],
            "first_divergence_example": None if first is None else before["examples"] + first,
            "first_divergence": None if more["first_divergence"] is None
            else f"{more['first_divergence']} ({name} profile)"}
