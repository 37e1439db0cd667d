"""``asyncspec fuzz --target sglang`` and ``asyncspec replay FILE --target sglang``.

Exit codes: 0 no divergence, 1 divergence (shrunk, printed side by side, replay file
written), 2 usage (no SGLang venv: one line saying how to create it), 3 partial.
"""
from __future__ import annotations

import json
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from asyncspec.checker import interrupt
from asyncspec.checker.progress import ProgressLine, rate
from asyncspec.checker.schema import JSON_SCHEMA_VERSION
from asyncspec.checker.trace import write_atomically
from asyncspec.engine.sglang import case as cs
from asyncspec.engine.sglang.client import SGLangPool, SGLangUnavailable, sglang_python, venv_problem
from asyncspec.engine.sglang.environment_config import EngineConfig

from asyncspec.statemachine_tests.sglang import sglang_case as sc
from asyncspec.statemachine_tests.core.fuzz_end import Work, finish, fixed_work, result_word
from asyncspec.statemachine_tests.core.replay_file import REPLAY_VERSION, out_dir_problem
from asyncspec.statemachine_tests.sglang.sglang_replay import load_replay
from asyncspec.statemachine_tests.sglang.sglang_run import SGLangResult, check

TARGET = "sglang"
SGLANG_VERSION = "0.5.23"
EXIT_OK, EXIT_DIVERGENCE, EXIT_USAGE, EXIT_PARTIAL = 0, 1, 2, 3
CATEGORIES = ("arrival", "late_arrival", "chunked_prefill", "radix_hit", "retraction", "forced_retraction", "pressure_retraction",
              "retraction_in_flight", "stale_drop", "max_tokens_guard", "eos_waste", "finish_stop",
              "finish_length", "finish_abort", "abort_in_flight", "abort_delivers_in_flight", "abort_waste")


@dataclass
class Campaign:
    """A fixed-work (or timed) run of drawn cases against one pool of drivers."""

    seed: int
    examples: int | None
    seconds: float
    mutant: str | None = None
    configs: tuple[str, ...] = tuple(sc.CONFIGS)
    done: int = 0
    iterations: int = 0
    forwards: int = 0
    coverage: Counter[str] = field(default_factory=Counter)
    found: SGLangResult | None = None
    original: cs.Case | None = None

    def run(self, pool: SGLangPool, on_example: Any = None) -> SGLangResult | None:
        start = time.monotonic()
        index = 0
        # the budget is loop time: a driver's start-up (imports, Scheduler) is not charged to it
        while (self.examples is None or index < self.examples) and \
                time.monotonic() - start - pool.start_seconds < self.seconds:
            if interrupt.requested():
                break
            case = sc.draw_case(self.seed, index, self.configs)
            result = check(case, pool.run(case))
            index += 1
            self.done, self.iterations, self.forwards = index, self.iterations + result.iterations, \
                self.forwards + result.forwards
            self.coverage.update(result.coverage)
            if on_example is not None:
                on_example(self)
            if not result.diverged:
                interrupt.pause_point("mid-run")  # after the first example: a test signals here (checker/interrupt.py)
            if result.diverged:
                self.original = case
                if result.error is not None:  # a crash restarts the driver (tens of seconds): not shrunk
                    self.found = result
                    return result
                small = sc.shrink(case, lambda c: check(c, pool.run(c)).diverged)
                self.found = check(small, pool.run(small))
                return self.found
        return None


def fuzz_main(seconds: float, seed: int, json_out: bool, out_dir: Path, examples: int | None = None,
              mutant: str | None = None) -> int:
    """Run a campaign; print the summary (``--json``: one object) and any divergence."""
    problem = out_dir_problem(out_dir) or venv_problem()
    if problem:
        print(f"fuzz: {problem}", file=sys.stderr)
        return EXIT_USAGE
    campaign = Campaign(seed, examples, seconds, mutant)
    pool = SGLangPool(mutant)
    start = time.monotonic()
    try:
        with interrupt.catching(), ProgressLine(f"fuzz {TARGET}", quiet=json_out) as line:
            found = campaign.run(pool, lambda c: line.update(
                f"{c.done}{'' if examples is None else f'/{examples}'} examples "
                f"({rate(c.done, time.monotonic() - start - pool.start_seconds)}), {c.forwards} forwards"))
            interrupted = interrupt.requested()
    except SGLangUnavailable as exc:
        print(f"fuzz: {exc}", file=sys.stderr)
        return EXIT_USAGE
    finally:
        pool.close()
    elapsed = time.monotonic() - start
    replay_path = out_dir / f"fuzz-{TARGET}-seed{seed}.json" if found is not None else None
    if found is not None and replay_path is not None:
        save_replay(found, replay_path, mutant)
    work = fixed_work(campaign.done, examples, seconds, interrupted)
    summary = fuzz_summary(campaign, found, elapsed, pool.start_seconds, replay_path, work)
    out = sys.stderr if json_out else sys.stdout

    def show_divergence() -> None:
        assert found is not None
        print_divergence(found, out)
        print(f"replay with: asyncspec replay {replay_path} --target {TARGET}", file=out)
    return finish(summary, found is not None, work, json_out, show_divergence, lambda: print_summary(summary, out))


def fuzz_summary(c: Campaign, found: SGLangResult | None, elapsed: float, build: float,
                 replay_path: Path | None, work: Work) -> dict[str, Any]:
    """The ``--json`` contract (the engine target's keys)."""
    loop = elapsed - build
    coverage = {k: c.coverage.get(k, 0) for k in CATEGORIES}
    return {
        "schema_version": JSON_SCHEMA_VERSION, "target": TARGET, "sglang_version": SGLANG_VERSION,
        "configs": list(c.configs), "mutant": c.mutant, "seed": c.seed, "examples": c.done,
        "divergences": int(found is not None), "explained": {},
        "coverage": coverage, "zero_coverage": [k for k in CATEGORIES if coverage[k] == 0],
        "result": result_word(found is not None, work),
        "interrupted": work.interrupted, "partial": not work.complete, "replay_file": str(replay_path) if replay_path else None,
        "timing": {"seconds": round(elapsed, 2), "engine_build_seconds": round(build, 2),
                   "cases_per_second": round(c.done / loop, 1) if loop > 0 else 0.0,
                   "engine_events": c.iterations, "engine_steps": c.forwards},
    }


def print_summary(s: dict[str, Any], out: TextIO) -> None:
    t = s["timing"]
    print(f"fuzz {TARGET} (SGLang {s['sglang_version']}, {', '.join(s['configs'])}): {s['examples']} examples, "
          f"{t['engine_events']} loop iterations, {t['engine_steps']} forwards in {t['seconds']} s "
          f"({t['cases_per_second']} cases/s after {t['engine_build_seconds']} s of start-up), "
          f"{s['divergences']} divergences", file=out)
    print("  coverage: " + ", ".join(f"{k} {v}" for k, v in s["coverage"].items()), file=out)
    if s["zero_coverage"]:
        print("  never reached: " + ", ".join(s["zero_coverage"]), file=out)
    print(f"reproduce with: --examples {s['examples']} --seed {s['seed']}", file=out)


def print_divergence(r: SGLangResult, out: TextIO, context: int = 3) -> None:
    """The last iterations of the shrunk case, the spec and SGLang side by side."""
    print(f"DIVERGENCE on {TARGET} ({sc.config_name(r.case.engine)}): case {json.dumps(r.case.to_json())}", file=out)
    for snap in r.snapshots[-context:]:
        print(f"-- iteration {snap.it}: " + "; ".join(snap.ops), file=out)
        print(f"   {'req':<4} {'spec':<58} sglang", file=out)
        for rid in sorted(set(snap.spec) | set(snap.sglang), key=cs.req_index):
            print(f"   {rid:<4} {snap.spec.get(rid, '-'):<58} {snap.sglang.get(rid, '-')}", file=out)
    for d in r.diffs:
        print(f"   DIFFERS {d.field}: spec {d.expected!r} | sglang {d.actual!r}", file=out)


# ---- replay files ------------------------------------------------------------------------


def save_replay(r: SGLangResult, path: Path, mutant: str | None) -> None:
    data = {"asyncspec_fuzz_replay": REPLAY_VERSION, "target": TARGET, "mutant": mutant,
            "case": r.case.to_json(),
            "differences": [{"field": d.field, "spec": d.expected, "sglang": d.actual} for d in r.diffs],
            "iterations": [{"it": s.it, "ops": s.ops, "spec": s.spec, "sglang": s.sglang} for s in r.snapshots]}
    write_atomically(path, json.dumps(data, indent=2) + "\n")


def replay_main(path: Path, json_out: bool) -> int:
    """Run a replay file's case again: exit 1 if it still diverges, 0 if not."""
    try:
        case, mutant = load_replay(path)
        sglang_python()
    except (ValueError, SGLangUnavailable) as exc:
        print(f"replay: {exc}", file=sys.stderr)
        return EXIT_USAGE
    pool = SGLangPool(mutant)
    try:
        result = check(case, pool.run(case))
    except SGLangUnavailable as exc:
        print(f"replay: {exc}", file=sys.stderr)
        return EXIT_USAGE
    finally:
        pool.close()
    out = sys.stderr if json_out else sys.stdout
    if result.diverged:
        print_divergence(result, out)
    if json_out:
        sys.stdout.write(json.dumps({"schema_version": JSON_SCHEMA_VERSION, "target": TARGET,
                                     "diverged": result.diverged, "iterations": result.iterations,
                                     "differences": [d.field for d in result.diffs]}) + "\n")
    elif not result.diverged:
        print(f"replay {TARGET}: {result.iterations} iterations, no divergence", file=out)
    return EXIT_DIVERGENCE if result.diverged else EXIT_OK


__all__ = ["fuzz_main", "replay_main", "EngineConfig"]
