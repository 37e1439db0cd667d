"""The ``dp`` part of the vllm-engine default campaign: vLLM's data-parallel wave loop against the DP spec.

Each case (``dp_case.py``) is a random run of the DP spec (``spec/dp.py``) over two or three ranks;
``engine/vllm/dp_driver.py`` plays each rank's messages on vLLM's own ``DPEngineCoreProc.run_busy_loop``,
one thread per rank, and every iteration of every rank is compared with the spec's: the batch kind
(a real step, a dummy batch, the idle ``continue``), ``step_counter``, ``current_wave``,
``engines_running`` and the ``wave_complete`` / ``start_wave`` outputs; a rank the spec leaves in
the all-reduce must hang there in vLLM too (``DPHang``), and no other may.  The ranks' all-reduce is
the driver's stand-in (``Rendezvous``: the SUM in this process, a hang told at once), the part's one
vLLM driver serving all cases; ``tests/statemachine_tests/vllm_engine/test_dp_part.py`` holds it to
vLLM's own all-reduce over a real gloo group.

A divergence is one bucket per (rank, field) of its first difference; its case is saved as JSON
(``dp-SEED-N.json``: the config, the walk, what differed).
"""
from __future__ import annotations

import json
from collections import Counter
from dataclasses import asdict
from pathlib import Path
from typing import Any

from asyncspec.checker import interrupt
from asyncspec.checker.atomic import WriteError, note_unsaved, write_atomically
from asyncspec.engine.vllm.dp_driver import DPDriver, Iteration, RankRun
from asyncspec.spec import dp
from asyncspec.statemachine_tests.vllm_engine.dp_case import INJECTED, DPCase, Expected, RankScript, draw_case

HANG = "dp_hang"  # a rank the spec leaves in the all-reduce hung there in vLLM
THREE_RANKS = "dp_three_ranks"
DP_COVERAGE = (dp.STEP_EXECUTED, dp.DUMMY_BATCH, dp.SYNC_SKIPPED, dp.DUMMY_KEEPS_WAVE, dp.WAVE_COMPLETE,
               dp.START_WAVE_SENT, dp.START_WAVE_WAKES, dp.START_WAVE_STALE, dp.START_WAVE_RUNNING,
               dp.REQUEST_WAVE_BUMPS, dp.REQUEST_TO_RUNNING, dp.START_WAVE_DEDUPED, dp.WAVE_COMPLETE_LATE,
               INJECTED, HANG, THREE_RANKS)
"""The categories a clean ``dp`` part must reach (each counts the cases that reached it)."""


def first_difference(script: RankScript, run: RankRun) -> str | None:
    """What rank's vLLM iterations do differently from the spec's first, or None."""
    for n, (want, got) in enumerate(zip(script.expected, run.seen)):
        for name in ("kind", "step_counter", "current_wave", "engines_running", "outputs"):
            if getattr(want, name) != getattr(got, name):
                return f"iteration {n}: {name} is {getattr(got, name)!r}, the spec's {getattr(want, name)!r}"
    if len(run.seen) != len(script.expected):
        return f"{len(run.seen)} iterations ended, the spec's {len(script.expected)}"
    hung = run.error is not None and run.error.startswith("DPHang")
    if script.hangs != hung:
        if script.hangs:
            return "the spec leaves this rank in the all-reduce; vLLM's loop ended"
        return f"vLLM's loop failed: {run.error}"
    return None


def check_case(driver: DPDriver, case: DPCase) -> tuple[list[str | None], list[RankRun]]:
    """Play ``case`` on vLLM; each rank's first difference (None where it agrees)."""
    inputs = [script.inputs for script in case.scripts]
    runs = driver.run(inputs, case.cfg.dp_sync_interval)
    return [first_difference(s, r) for s, r in zip(case.scripts, runs)], runs


def case_coverage(case: DPCase) -> set[str]:
    """The categories ``case`` reached."""
    out = {e for e in case.events if e in DP_COVERAGE}
    if any(s.hangs for s in case.scripts):
        out.add(HANG)
    if case.cfg.dp_size == 3:
        out.add(THREE_RANKS)
    return out


class DPPartRun:
    """``examples`` cases from ``seed``: coverage, buckets of divergences, their saved cases."""

    def __init__(self, seed: int, examples: int, out_dir: Path, max_divergences: int, stop_at_first: bool) -> None:
        self.seed, self.examples, self.out_dir = seed, examples, out_dir
        self.max_divergences, self.stop_at_first = max_divergences, stop_at_first
        self.coverage: Counter[str] = Counter({c: 0 for c in DP_COVERAGE})
        self.buckets: dict[str, dict[str, Any]] = {}
        self.ran = 0
        self.iterations = 0
        self.messages: list[str] = []  # each bucket's first divergence, one line

    def run(self) -> None:
        drivers = {size: DPDriver(size) for size in (2, 3)}
        for index in range(self.examples):
            if interrupt.requested() or (self.stop_at_first and self.buckets):
                break
            case = draw_case(self.seed, index)
            differences, runs = check_case(drivers[case.cfg.dp_size], case)
            self.ran += 1
            self.iterations += sum(len(r.seen) for r in runs)
            self.coverage.update(case_coverage(case))
            for rank, difference in enumerate(differences):
                if difference is not None:
                    self._record(case, index, rank, difference, runs)
                    break

    def _record(self, case: DPCase, index: int, rank: int, difference: str, runs: list[RankRun]) -> None:
        what = difference.split(": ", 1)[1].split(" is ")[0] if difference.startswith("iteration") else \
            difference.split(":")[0]
        key = f"dp rank{rank}: {what}"
        bucket = self.buckets.get(key)
        if bucket is not None:
            bucket["count"] += 1
            return
        if len(self.buckets) >= self.max_divergences:
            return
        path = self.out_dir / f"dp-{self.seed}-{len(self.buckets) + 1}.json"
        self.buckets[key] = {"signature": key, "count": 1, "first_example": index,
                             "replay_file": str(path) if _save_case(path, case, rank, difference, runs) else None}
        self.messages.append(f"dp case {index} (seed {self.seed}), rank {rank}: {difference}")


def _save_case(path: Path, case: DPCase, rank: int, difference: str, runs: list[RankRun]) -> bool:
    """The diverging case as JSON; False (noted for the run's end) where it cannot be written."""
    data = {"asyncspec_dp_case": 1, "config": {"requests": [list(r) for r in case.cfg.requests],
                                               "dp_size": case.cfg.dp_size,
                                               "dp_sync_interval": case.cfg.dp_sync_interval},
            "actions": case.actions, "rank": rank, "difference": difference,
            "expected": [[asdict(e) for e in s.expected] for s in case.scripts],
            "seen": [[asdict(i) for i in r.seen] for r in runs], "errors": [r.error for r in runs]}
    try:
        write_atomically(path, json.dumps(data, indent=1) + "\n")
    except WriteError as exc:
        note_unsaved(exc)
        return False
    return True


def expected_of(iteration: Iteration) -> Expected:
    """A driver's iteration in the spec's terms (for a hand case)."""
    return Expected(iteration.kind, iteration.step_counter, iteration.current_wave, iteration.engines_running,
                    iteration.outputs)


def run_dp_cases(seed: int, examples: int, out_dir: Path, max_divergences: int,
                 stop_at_first: bool) -> tuple[DPPartRun, float]:
    """A finished ``DPPartRun`` and its seconds (the drivers' build included)."""
    import time

    start = time.monotonic()
    run = DPPartRun(seed, examples, out_dir, max_divergences, stop_at_first)
    run.run()
    return run, time.monotonic() - start
