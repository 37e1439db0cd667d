"""The torch engine's oracle and fuzzer: async runs must equal the synchronous run.

For one workload the engine runs at D = 1, 2 and 3.  The oracle checks:

* **token streams**: a request the engine finished (EOS or length) has exactly the D = 1
  tokens and finish reason; an aborted one has a prefix of them (aborts land at ticks, and
  the ticks fall at different points of the schedule at different depths);
* **wasted forward passes**: the rows the engine computed for requests it had already
  finished equal the spec's count (``num_wasted_steps``) when the run's action trace is
  replayed on the spec (``spec/engine.py``) with the EOS positions the model produced
  (observed at D = 1, merged with the run's own);
* **the schedule**: on that replay every action is enabled, every step schedules the same
  ``(request, tokens)`` and every *always* property of the spec holds.

:func:`fuzz_torch` draws workloads (arrivals, aborts, forced preemptions, pools small enough
to preempt, chunked prefill, prefix caching, a KV connector, both stale modes) for a time
budget and prints the same JSON summary as the other fuzz targets.
"""

from __future__ import annotations

import json
import random
import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

from asyncspec.checker import interrupt
from asyncspec.checker.progress import ProgressLine, rate
from asyncspec.checker.schema import JSON_SCHEMA_VERSION
from asyncspec.checker.trace import folder_problem, write_atomically
from asyncspec.engine.torch.scheduler_api import EOS, LENGTH
from asyncspec.engine.torch.torch_engine import (
    EngineConfig, RunResult, SchedulerKind, Workload, default_model, run_workload,
)
from asyncspec.engine.torch.model import TinyTransformer
from asyncspec.engine.torch.weights import TinyConfig
from asyncspec.engine.torch.torch_worker import FeedError, Strategy
from asyncspec.spec import engine as spec_engine
from asyncspec.spec import events as ev
from asyncspec.spec.properties import always_for
from asyncspec.spec.state import initial_state

__all__ = [
    "COVERAGE",
    "FUZZ_MODEL",
    "CheckReport",
    "SpecReplay",
    "build_workload",
    "check_workload",
    "compare_streams",
    "coverage_counts",
    "fuzz_torch",
    "replay_on_spec",
]

#: The fuzzed model: the default tiny model with a larger EOS bias, so that most short
#: prompts end with EOS within a dozen tokens, at varied positions.
FUZZ_MODEL = TinyConfig(eos_logit_bias=1.0)

#: Coverage categories of the fuzz JSON contract -> the spec events that count for them.
COVERAGE: dict[str, tuple[str, ...]] = ev.FUZZ_COVERAGE


def coverage_counts(events: Counter[str]) -> dict[str, int]:
    """The contract's coverage counts from counted spec events."""
    return {name: sum(events[e] for e in names) for name, names in COVERAGE.items()}


# ---------------------------------------------------------------- the spec replay


@dataclass
class SpecReplay:
    """The spec's view of one engine run."""

    wasted: int
    events: Counter[str]
    problems: list[str]


def replay_on_spec(
    workload: Workload, result: RunResult, depth: int, eos_positions: Sequence[int]
) -> SpecReplay:
    """Replay ``result.trace`` on the spec with fixed EOS positions.

    Checks that each action is enabled, that each ``schedule`` plans the engine's rows and
    that the spec's *always* properties hold in every state; returns the spec's wasted
    steps (``sum num_wasted_steps``) and events.
    """
    cfg = workload.spec_config(depth, eos_positions=eos_positions)
    state = initial_state(cfg, tuple(eos_positions))
    props = always_for(cfg)
    events: Counter[str] = Counter()
    problems: list[str] = []
    steps = iter(result.scheduled)
    for n, action in enumerate(result.trace):
        if action not in spec_engine.enabled_actions(cfg, state):
            problems.append(f"action {n} ({action}) is not enabled in the spec")
            break
        state, fired = spec_engine.apply(cfg, state, action)
        events.update(fired)
        if action.name == spec_engine.SCHEDULE:
            planned = tuple((e.req, e.num_tokens) for e in state.batch_queue[-1].entries)
            engine = next(steps, None)
            if planned != engine:
                problems.append(f"action {n}: spec schedules {planned}, the engine ran {engine}")
                break
        for prop in props:
            message = prop.check(cfg, state)
            if message is not None:
                problems.append(f"action {n} ({action}): spec property {prop.name}: {message}")
        if problems:
            break
    wasted = sum(c.num_wasted_steps for c in state.counters)
    return SpecReplay(wasted, events, problems)


# ---------------------------------------------------------------- comparing runs


def compare_streams(base: RunResult, other: RunResult, label: str) -> list[str]:
    """Differences of ``other`` from the synchronous run ``base`` (see the module docstring)."""
    problems: list[str] = []
    for req, tokens in base.outputs.items():
        mine = other.outputs[req]
        r_base, r_mine = base.reasons.get(req), other.reasons.get(req)
        engine_done = r_base in (EOS, LENGTH) and r_mine in (EOS, LENGTH)
        if engine_done and (mine != tokens or r_base != r_mine):
            problems.append(
                f"{label}: r{req} produced {mine} ({r_mine}), D=1 produced {tokens} ({r_base})"
            )
        elif not engine_done:
            short, long = sorted((tokens, mine), key=len)
            if long[: len(short)] != short:
                problems.append(
                    f"{label}: r{req} produced {mine} ({r_mine}), not a prefix-compatible "
                    f"stream of D=1's {tokens} ({r_base})"
                )
    return problems


def merged_eos(results: Sequence[RunResult]) -> tuple[tuple[int, ...], list[str]]:
    """EOS positions observed in any run (they must agree where observed twice)."""
    n = len(results[0].eos_positions)
    merged = [0] * n
    problems: list[str] = []
    for result in results:
        for req, pos in enumerate(result.eos_positions):
            if pos and merged[req] and pos != merged[req]:
                problems.append(f"r{req}: EOS at output position {merged[req]} and {pos}")
            merged[req] = merged[req] or pos
    return tuple(merged), problems


@dataclass
class CheckReport:
    """The oracle's verdict on one workload."""

    workload: Workload
    strategy: Strategy
    results: dict[int, RunResult] = field(default_factory=dict)
    spec_wasted: dict[int, int] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    events: Counter[str] = field(default_factory=Counter)

    @property
    def ok(self) -> bool:
        """No divergence."""
        return not self.problems

    @property
    def engine_events(self) -> int:
        """Engine actions run, over all depths."""
        return sum(len(r.trace) for r in self.results.values())


def check_workload(
    workload: Workload,
    *,
    strategy: Strategy = "v2",
    scheduler: SchedulerKind = "reference",
    depths: Sequence[int] = (1, 2, 3),
    bug: str | None = None,
    model: TinyTransformer | None = None,
    check_spec: bool = True,
) -> CheckReport:
    """Run ``workload`` at every depth and apply the oracle (the first depth is the baseline).

    ``bug`` seeds an engine bug in the runs after the baseline.
    """
    report = CheckReport(workload, strategy)
    for depth in depths:
        cfg = EngineConfig(depth=depth, strategy=strategy, scheduler=scheduler,
                           bug=bug if depth != depths[0] else None)
        try:
            report.results[depth] = run_workload(workload, cfg, model)
        except FeedError as exc:
            report.problems.append(f"D={depth}: {exc}")
            return report
        report.events.update(report.results[depth].events)
    base = report.results[depths[0]]
    for depth in depths[1:]:
        report.problems += compare_streams(base, report.results[depth], f"D={depth}")
    eos, eos_problems = merged_eos(list(report.results.values()))
    report.problems += eos_problems
    if check_spec:
        for depth, result in report.results.items():
            replay = replay_on_spec(workload, result, depth, eos)
            report.spec_wasted[depth] = replay.wasted
            report.problems += [f"D={depth}: {p}" for p in replay.problems]
            if not replay.problems and replay.wasted != result.wasted:
                report.problems.append(
                    f"D={depth}: the engine computed {result.wasted} wasted rows, "
                    f"the spec predicts {replay.wasted}"
                )
    return report


# ---------------------------------------------------------------- workloads


Draw = Callable[[int, int], int]  # draw(lo, hi): an integer in [lo, hi]


def build_workload(draw: Draw, max_requests: int = 5, vocab: int = 64) -> Workload:
    """A workload from integer choices (``random.Random.randint`` or a Hypothesis draw).

    Prompts start with distinct tokens (no two requests share a prefix-cache block, which
    the spec does not model); the pool fits every request alone and is often small enough
    to preempt.
    """
    n = draw(1, max_requests)
    firsts: list[int] = []
    prompts: list[tuple[int, ...]] = []
    for _ in range(n):
        first = draw(2, vocab - 1)
        while first in firsts:
            first = first + 1 if first < vocab - 1 else 2
        firsts.append(first)
        prompts.append((first, *(draw(2, vocab - 1) for _ in range(draw(0, 11)))))
    max_tokens = tuple(draw(1, 12) for _ in range(n))
    block_size = (1, 2, 4)[draw(0, 2)]
    need = max(-(-(len(p) + m) // block_size) for p, m in zip(prompts, max_tokens))
    chunked = draw(0, 4) > 0
    longest = max(len(p) + m for p, m in zip(prompts, max_tokens))
    budget = draw(2, 16) if chunked else draw(longest, longest + 8)
    arrivals: tuple[int, ...] = ()
    if draw(0, 1):
        ticks = sorted(draw(0, 30) for _ in range(n - 1))
        arrivals = (0, *ticks)
    aborts = tuple((draw(0, 40), draw(0, n - 1)) for _ in range(draw(0, 2)))
    resets = tuple(draw(0, 40) for _ in range(draw(0, 2)))
    return Workload(
        prompts=tuple(prompts),
        max_tokens=max_tokens,
        arrivals=arrivals,
        aborts=aborts,
        resets=resets,
        token_budget=budget,
        max_num_seqs=draw(1, 4),
        block_size=block_size,
        num_blocks=need + draw(0, 8),
        enable_chunked_prefill=chunked,
        enable_prefix_caching=draw(0, 3) > 0,
        kv_connector=draw(0, 2) == 0,
        stale_mode="drop" if draw(0, 1) else "deliver",
    )


def strategy_for(index: int) -> tuple[Strategy, tuple[int, ...]]:
    """The strategy (and depths) of the ``index``-th example: v2, neuron, v1 in turn.

    V1 runs at D <= 2 only: at D = 3 the spec's decode stagger skips steps, and
    ``prev_req_id_to_index`` cannot feed a request absent from the previous step
    (``docs/worker.md``, the V1 D = 3 finding).
    """
    strategy: Strategy = ("v2", "neuron", "v1")[index % 3]
    return strategy, (1, 2) if strategy == "v1" else (1, 2, 3)


# ---------------------------------------------------------------- fuzz entry point


EXIT_OK, EXIT_DIVERGENCE, EXIT_USAGE, EXIT_PARTIAL = 0, 1, 2, 3


@dataclass
class FuzzStats:
    """Counts of one fuzz campaign."""

    examples: int = 0
    events: int = 0
    wasted_engine: int = 0
    wasted_spec: int = 0
    spec_events: Counter[str] = field(default_factory=Counter)
    failure: CheckReport | None = None


def fuzz_campaign(
    seconds: float,
    seed: int,
    *,
    scheduler: SchedulerKind = "reference",
    max_examples: int | None = None,
    on_example: Callable[[FuzzStats], None] | None = None,
) -> FuzzStats:
    """Check random workloads for ``seconds`` (or ``max_examples``); stop at a divergence or
    an interrupt.  Example i is the i-th draw of ``random.Random(seed)``, so the first N
    examples of a time-bounded run are exactly ``max_examples=N``."""
    torch.set_num_threads(1)
    rng = random.Random(seed)
    model = default_model("cpu", FUZZ_MODEL)
    stats = FuzzStats()
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and (max_examples is None or stats.examples < max_examples) \
            and not interrupt.requested():
        workload = build_workload(rng.randint)
        strategy, depths = strategy_for(stats.examples)
        report = check_workload(workload, strategy=strategy, scheduler=scheduler,
                                depths=depths, model=model)
        stats.examples += 1
        stats.events += report.engine_events
        stats.spec_events.update(report.events)
        stats.wasted_engine += sum(r.wasted for r in report.results.values())
        stats.wasted_spec += sum(report.spec_wasted.values())
        if on_example is not None:
            on_example(stats)
        if not report.ok:
            stats.failure = report
            break
        interrupt.pause_point("mid-run")  # after the first example: a test signals here (checker/interrupt.py)
    return stats


def fuzz_summary(stats: FuzzStats, seconds: float, seed: int, replay: Path | None,
                 complete: bool = True, interrupted: bool = False) -> dict[str, Any]:
    """The JSON summary (the contract of ``asyncspec fuzz``)."""
    coverage = coverage_counts(stats.spec_events)
    return {
        "result": "divergence" if stats.failure else "ok" if complete and stats.examples else "partial",
        "interrupted": interrupted,
        "complete": complete,
        "schema_version": JSON_SCHEMA_VERSION,
        "target": "torch",
        "seed": seed,
        "seconds": round(seconds, 2),
        "events": stats.events,
        "examples": stats.examples,
        "events_per_s": round(stats.events / seconds, 1) if seconds > 0 else 0.0,
        "divergences": 1 if stats.failure else 0,
        "coverage": coverage,
        "zero_coverage": [k for k, v in coverage.items() if v == 0],
        "spec_events": dict(sorted(stats.spec_events.items())),
        "wasted_steps": {"engine": stats.wasted_engine, "spec": stats.wasted_spec},
        "replay_file": None if replay is None else str(replay),
    }


def fuzz_torch(
    seconds: float, seed: int, json_out: bool = False, out_dir: Path | None = None,
    examples: int | None = None,
) -> int:
    """``asyncspec fuzz --target torch``: 0 clean, 1 divergence, 2 bad usage, 3 partial
    (interrupted, or the time ran out before ``examples``).

    On a divergence the workload and the differences are printed (and saved as a replay
    file in ``out_dir`` when given: ``asyncspec replay FILE --target torch``).
    """
    if seconds <= 0:
        print("fuzz: --seconds must be > 0", file=sys.stderr)
        return EXIT_USAGE
    problem = folder_problem(out_dir, "--out-dir") if out_dir is not None else None
    if problem:  # refused before the campaign: a divergence is never found and then lost
        print(f"fuzz: {problem}", file=sys.stderr)
        return EXIT_USAGE
    start = time.monotonic()
    with interrupt.catching(), ProgressLine("fuzz torch", quiet=json_out) as line:
        def progress(s: FuzzStats) -> None:
            of = f"/{examples}" if examples is not None else ""
            reached = sum(1 for v in coverage_counts(s.spec_events).values() if v)
            line.update(f"{s.examples}{of} examples ({rate(s.examples, time.monotonic() - start)}), "
                        f"coverage {reached}/{len(COVERAGE)} categories")
        stats = fuzz_campaign(seconds, seed, max_examples=examples, on_example=progress)
        interrupted = interrupt.requested()
    elapsed = time.monotonic() - start
    complete = not interrupted and (examples is None or stats.examples >= examples)
    replay: Path | None = None
    if stats.failure is not None:
        failure = replay_json(stats.failure, seed, stats.examples - 1)
        print(json.dumps(failure, indent=1), file=sys.stderr if json_out else sys.stdout)
        if out_dir is not None:
            replay = out_dir / f"fuzz-torch-seed{seed}.json"
            write_atomically(replay, json.dumps(failure, indent=1) + "\n")
    summary = fuzz_summary(stats, elapsed, seed, replay, complete, interrupted)
    if json_out:
        print(json.dumps(summary))
    else:
        print(f"fuzz torch: {summary['examples']} examples, {summary['events']} events in "
              f"{summary['seconds']} s, {summary['divergences']} divergences; wasted rows "
              f"engine {stats.wasted_engine} = spec {stats.wasted_spec}")
        for name, count in summary["coverage"].items():
            print(f"  {name:34} {count}")
        if summary["zero_coverage"]:
            print(f"VACUOUS: no coverage of {', '.join(summary['zero_coverage'])}")
        if interrupted:
            print(f"PARTIAL: interrupted after {stats.examples} examples")
        if replay is not None:
            print(f"replay with: asyncspec replay {replay} --target torch")
        print(f"reproduce with: --examples {stats.examples} --seed {seed}")
    if stats.failure is None and summary["examples"] == 0:
        print(f"fuzz: no example completed within --seconds {seconds}; raise --seconds "
              "(a run that checked nothing never passes)", file=sys.stderr)
        return EXIT_PARTIAL
    return EXIT_DIVERGENCE if stats.failure else EXIT_OK if complete else EXIT_PARTIAL


TORCH_REPLAY = 1  # the version of a torch divergence file


def replay_json(report: CheckReport, seed: int, example: int) -> dict[str, Any]:
    """A torch divergence as a replay file (``engine/torch/replay.py`` re-runs it)."""
    return {"asyncspec_torch_replay": TORCH_REPLAY, "target": "torch", "seed": seed, "example": example,
            "workload": asdict(report.workload), "strategy": report.strategy,
            "depths": list(strategy_for(example)[1]), "problems": report.problems}
