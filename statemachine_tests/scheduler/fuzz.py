"""The differential fuzz runner's entry points: ``asyncspec fuzz`` and ``asyncspec replay --target``.

A campaign (``campaign.py``, in shards: ``shards.py``) draws workloads from a
profile (``profiles.py``), runs each example (``fuzz_example.py``) through the
spec and a target (``registry.py``), keeps going after a divergence up to
``max_divergences`` distinct ones (``core/buckets.py``; ``stop_at_first``: the
first ends it), shrinks one representative per bucket, prints each
(``report.py``) and saves each as a replay file (``replay_file.py``) that
``replay(path, target)`` re-executes.
"""
from __future__ import annotations

import json
import math
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape

from asyncspec.checker import interrupt
from asyncspec.checker.progress import ProgressLine, rate
from asyncspec.checker.schema import JSON_SCHEMA_VERSION

from asyncspec.statemachine_tests.scheduler.campaign import coverage_counts
from asyncspec.statemachine_tests.core.buckets import DEFAULT_MAX_DIVERGENCES, Bucket, replay_path
from asyncspec.statemachine_tests.core.fuzz_end import Work, finish, result_word, saved
from asyncspec.statemachine_tests.core.harness import RunResult, run_one
from asyncspec.statemachine_tests.scheduler.profiles import (
    ALL_PROFILE, Profile, for_target, part_names, profile_name, reference_gaps, unreached_witnesses,
)
from asyncspec.statemachine_tests.scheduler.ray_shards import RayUnavailable, run_on_ray
from asyncspec.statemachine_tests.scheduler.registry import TargetUnavailable, load_target, make_target
from asyncspec.statemachine_tests.core.replay_file import (
    ReplayError, load_replay, out_dir_problem, replay_json, save_replay,
)
from asyncspec.statemachine_tests.core.report import WIDTH, print_buckets, print_coverage, print_divergence
from asyncspec.statemachine_tests.core.skipped_parts import SkippedPart, scheduler_capabilities, vllm_json
from asyncspec.statemachine_tests.scheduler.shards import Merged, Plan, run_plan, skipped_examples, skipped_for
from asyncspec.statemachine_tests.scheduler.spec_target import SpecTarget


EXIT_OK, EXIT_DIVERGENCE, EXIT_USAGE, EXIT_PARTIAL = 0, 1, 2, 3


def budget_problem(seconds: float, examples: int | None, jobs: int,
                   max_divergences: int = DEFAULT_MAX_DIVERGENCES) -> str | None:
    """Why the budget is unusable (one line naming the option), or None."""
    if max_divergences < 1:
        return (f"--max-divergences must be >= 1 (got {max_divergences}): the distinct divergences "
                "after which the campaign stops")
    if not math.isfinite(seconds) or seconds <= 0:
        return f"--seconds must be a number > 0 (got {seconds}); it bounds the campaign's time"
    if examples is not None and examples < 1:
        return f"--examples must be >= 1 (got {examples}); leave it out for a time-bounded run"
    if jobs < 1:
        return f"--jobs must be >= 1 (got {jobs}): processes (or Ray tasks) in flight"
    return None


def fuzz_main(target: str, seconds: float, seed: int, json_out: bool, allow_version: bool,
              out_dir: Path, profile: Profile = ALL_PROFILE, examples: int | None = None,
              jobs: int = 1, ray: str | None = None, max_divergences: int = DEFAULT_MAX_DIVERGENCES,
              stop_at_first: bool = False) -> int:
    """``asyncspec fuzz``: 0 no divergence, 1 divergence (a replay file per bucket written), 2 usage/load,
    3 partial: the time ran out before ``examples``, or a part was skipped (``--target vllm``: this
    vLLM lacks a surface it drives; one line each on stderr, ``skipped_parts`` in the JSON).  A mix
    on ``reference`` runs the parts the reference models (``profiles.for_target``)."""
    err = Console(stderr=True, soft_wrap=True, highlight=False)  # one line, however long
    profile = for_target(profile, target)
    problem = budget_problem(seconds, examples, jobs, max_divergences) or out_dir_problem(out_dir)
    gaps = reference_gaps(profile) if target == "reference" else []
    if gaps:
        problem = (f"this profile draws {', '.join(gaps)}, which the reference scheduler does not model; "
                   f"run it with --target vllm")
    if problem:
        err.print(f"fuzz: {escape(problem)}")
        return EXIT_USAGE
    try:
        load_target(target, allow_version)
    except TargetUnavailable as exc:
        err.print(f"fuzz: {escape(str(exc))}")
        return EXIT_USAGE
    plan = Plan(target, profile, seed, examples, seconds, jobs, ray, max_divergences, stop_at_first,
                skipped_for(target, profile))
    for part, reason in plan.skipped:
        err.print(escape(SkippedPart(part, reason).line()))
    start = time.monotonic()
    try:
        with interrupt.catching(), ProgressLine(f"fuzz {target}", quiet=json_out) as line:
            merged = run_on_ray(plan) if ray is not None else run_plan(plan, _reporter(line, plan, start))
    except RayUnavailable as exc:
        err.print(f"fuzz: {escape(str(exc))}")
        return EXIT_USAGE
    elapsed = time.monotonic() - start
    with interrupt.catching():  # a signal now: the flag; the files and the report stay whole
        save_buckets(merged.buckets, target, seed, out_dir)
        for part, reason in merged.missing.items():
            if part not in dict(plan.skipped):
                err.print(escape(SkippedPart(part, reason).line()))
        summary = _summary(plan, merged, elapsed)
        out = Console(stderr=json_out, highlight=False, width=WIDTH)
        return finish(summary, bool(merged.buckets), merged_work(merged, seconds, plan), json_out,
                      lambda: print_buckets(merged.buckets, target, out), lambda: _print_summary(summary, out))


def save_buckets(buckets: list[Bucket], target: str, seed: int, out_dir: Path) -> None:
    """Each shrunk representative as a replay file (``buckets.replay_path``), named in the bucket."""
    for number, bucket in enumerate(buckets, 1):
        representative = bucket.representative
        if representative is not None:
            path = replay_path(out_dir, target, seed, number)
            if saved(lambda: save_replay(representative, target, path)):
                bucket.replay_file = path


def merged_work(m: Merged, seconds: float, plan: Plan | None = None) -> Work:
    """The work a merged campaign did (``Merged.complete`` is False when interrupted or cut short;
    ``skipped``: the parts of ``plan`` not run)."""
    skipped = tuple(dict(plan.skipped) | m.missing) if plan is not None else ()
    return Work(m.examples, seconds, m.interrupted, cut_short=not m.complete and not m.interrupted, skipped=skipped)


def skipped_parts(plan: Plan, m: Merged) -> list[SkippedPart]:
    """The parts not run, in part order, each with its one line and its examples not run."""
    counts = skipped_examples(plan, m)
    return [SkippedPart(part, reason, counts.get(part, 0)) for part, reason in (dict(plan.skipped) | m.missing).items()]


def _reporter(line: ProgressLine, plan: Plan, start: float) -> Callable[[int, dict[str, int]], None]:
    """The progress line of a campaign: examples (of how many), rate, coverage categories reached."""
    categories = plan.profile.enabled_categories()

    def report(examples: int, spec_events: dict[str, int]) -> None:
        if not line.due():
            return
        covered = coverage_counts(spec_events, plan.profile)
        reached = sum(1 for k in categories if covered.get(k, 0))
        of = f"/{plan.examples}" if plan.examples is not None else ""
        line.update(f"{examples}{of} examples ({rate(examples, time.monotonic() - start)}), "
                    f"coverage {reached}/{len(categories)} categories")
    return report


def _summary(plan: Plan, m: Merged, elapsed: float) -> dict[str, Any]:
    coverage = coverage_counts(m.coverage, plan.profile)
    ran = parts_profile(plan, m)  # a skipped part's categories and witnesses are not expected
    zero = [k for k in ran.enabled_categories() if coverage[k] == 0] if ran is not None else []
    timing = {name: round(t, 3) for name, t in sorted(m.timing.items())}
    timing |= {"seconds": round(elapsed, 2),
               "events_per_s": round(m.events / elapsed, 1) if elapsed > 0 else 0.0,
               "examples_per_minute": round(60 * m.examples / elapsed, 1) if elapsed > 0 else 0.0}
    return {
        "result": result_word(bool(m.divergences), merged_work(m, plan.seconds, plan)),  # nothing checked: partial
        "interrupted": m.interrupted,
        "schema_version": JSON_SCHEMA_VERSION,
        "target": plan.target,
        "profile": profile_name(plan.profile),
        "seed": plan.seed,
        "examples": m.examples,
        "complete": m.complete,
        "events": m.events,
        "divergences": m.divergences,
        "buckets": [b.to_json() for b in m.buckets],
        "known_bug_divergences": dict(sorted(m.known.items())),
        "coverage": coverage,
        "zero_coverage": zero,
        "unreached_witnesses": unreached_witnesses(m.coverage, ran) if ran is not None else [],
        "spec_events": dict(sorted(m.coverage.items())),
        "parts": parts_run(plan.profile, m.shard_examples),
        "depths": {str(d): n for d, n in sorted(m.depths.items())},
        "replay_file": next((str(b.replay_file) for b in m.buckets if b.replay_file), None),
        "timing": timing,
        "skipped_parts": [p.to_json() for p in skipped_parts(plan, m)],
        **({"vllm": vllm_json(scheduler_capabilities())} if plan.target == "vllm" else {}),
    }


def parts_profile(plan: Plan, m: Merged) -> Profile | None:
    """The campaign's profile without its skipped parts (None: every part skipped)."""
    skipped = dict(plan.skipped) | m.missing
    if not skipped:
        return plan.profile
    kept = tuple(p for p, name in zip(plan.profile.mix, part_names(plan.profile)) if name not in skipped)
    return replace(plan.profile, mix=kept) if kept else None


def parts_run(profile: Profile, shard_examples: dict[int, int]) -> dict[str, int]:
    """Examples run per part of the profile (shard k runs part k mod parts), every part listed."""
    names = part_names(profile)
    counts = dict.fromkeys(names, 0)
    for index, n in shard_examples.items():
        counts[names[index % len(names)]] += n
    return counts


def _print_summary(s: dict[str, Any], out: Console) -> None:
    t = s["timing"]
    out.print(f"fuzz {s['target']} (profile {s['profile']}, seed {s['seed']}): {s['examples']} examples, "
              f"{s['events']} events in {t['seconds']} s ({t['events_per_s']} events/s), "
              f"{s['divergences']} divergences in {len(s['buckets'])} buckets")
    if s["interrupted"]:
        out.print(f"[bold yellow]PARTIAL[/bold yellow]: interrupted after {s['examples']} examples")
    elif not s["complete"]:
        out.print("[bold yellow]PARTIAL[/bold yellow]: the time limit came before the examples asked for; "
                  f"{s['examples']} ran")
    if len(s["parts"]) > 1:
        out.print("examples per part: " + ", ".join(f"{name} {n}" for name, n in s["parts"].items()))
    out.print("examples per batch-queue depth: " + ", ".join(f"{d}: {n}" for d, n in s["depths"].items()))
    print_coverage(s["coverage"], s["zero_coverage"], out)
    if s["unreached_witnesses"]:
        out.print(f"unreached witnesses (reachable in this profile): {', '.join(s['unreached_witnesses'])}")
    for p in s["skipped_parts"]:
        out.print(f"[bold yellow]SKIPPED[/bold yellow] part {escape(p['part'])} ({p['examples']} examples): "
                  f"{escape(p['reason'])}")
    if "vllm" in s:
        out.print(f"vllm {s['vllm']['version']} at {s['vllm']['path']}")
    drawn = s["examples"] + sum(p["examples"] for p in s["skipped_parts"])
    out.print(f"reproduce with: --examples {drawn} --seed {s['seed']}")


def replay(trace_path: Path, target: str, allow_version: bool = False, console: Console | None = None,
           json_out: bool = False) -> int:
    """Re-run a replay file on the spec and ``target``: 1 if it still diverges, 0 if not, 2 if unusable
    (``json_out``: one JSON object on stdout, ``replay_summary``)."""
    out = console or Console(highlight=False, width=WIDTH)
    try:
        w, events = load_replay(trace_path)
        load_target(target, allow_version)
    except (ReplayError, TargetUnavailable) as exc:
        Console(stderr=True, soft_wrap=True, highlight=False).print(f"replay: {escape(str(exc))}")  # one line
        return EXIT_USAGE
    oracle, tgt = SpecTarget(w, target=target), make_target(target, w)
    result = RunResult(w, [], {})
    try:
        for event in events:
            if not run_one(w, oracle, tgt, event, result):
                break
    except ValueError as exc:
        Console(stderr=True, soft_wrap=True, highlight=False).print(f"replay: {escape(str(exc))}")  # one line
        return EXIT_USAGE
    if json_out:
        sys.stdout.write(json.dumps(replay_summary(result, target, trace_path)) + "\n")
    elif result.diverged:
        print_divergence(result, target, out)
    else:
        out.print(f"replay: {len(result.rows)} events, spec and {target} agree after every event "
                  "(the divergence no longer reproduces)")
    return EXIT_DIVERGENCE if result.diverged else EXIT_OK


def replay_summary(result: RunResult, target: str, path: Path) -> dict[str, Any]:
    """``replay --json`` of a fuzz replay file: whether it still diverges, and where."""
    return {"schema_version": JSON_SCHEMA_VERSION, "target": target, "replay_file": str(path),
            "result": "divergence" if result.diverged else "ok", "reproduces": result.diverged,
            "events": len(result.rows),
            "divergence": replay_json(result, target)["divergence"] if result.diverged else None}


def replay_vllm(trace_path: Path) -> int:
    """``asyncspec replay FILE --target vllm``."""
    return replay(trace_path, "vllm")
