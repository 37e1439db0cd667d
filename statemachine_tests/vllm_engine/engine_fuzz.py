"""``asyncspec fuzz --target vllm-engine`` and ``asyncspec replay FILE --target vllm-engine``.

A campaign keeps going after a divergence until ``max_divergences`` distinct
ones (buckets, ``core/buckets.py``), then writes a replay file and prints a
table per bucket; ``stop_at_first`` ends it at the first.

Exit codes: 0 no divergence, 1 divergence (a replay file per bucket), 2 usage (vLLM
missing, outside the supported range, or moved so that a stub cannot apply), 3 partial
(interrupted, or a part skipped: a runner and depth whose surface this vLLM lacks,
one line each on stderr and in ``skipped_parts``; the summary says how many examples ran).
"""
from __future__ import annotations

import json
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from rich.console import Console

from asyncspec.checker import interrupt
from asyncspec.checker.progress import ProgressLine, rate
from asyncspec.checker.schema import JSON_SCHEMA_VERSION
from asyncspec.checker.trace import run_save_hooks, write_atomically
from asyncspec.engine.vllm.vllm_environment import VllmUnavailable, check_vllm_version
from asyncspec.engine.vllm.runner_stubs import moved_symbol

from asyncspec.statemachine_tests.vllm_engine import engine_case as ec
from asyncspec.statemachine_tests.vllm_engine.engine_campaign import EngineCampaign, EngineTargets
from asyncspec.statemachine_tests.vllm_engine.engine_explained import EXPLANATIONS
from asyncspec.statemachine_tests.vllm_engine.engine_profile import DEFAULT_ENGINE_PROFILE, EngineProfile
from asyncspec.statemachine_tests.vllm_engine.engine_run import EngineRun, EngineRunResult
from asyncspec.statemachine_tests.scheduler.fuzz import replay_summary
from asyncspec.statemachine_tests.core.buckets import (
    DEFAULT_MAX_DIVERGENCES, Bucket, divergence_key, replay_path as bucket_replay_path,
)
from asyncspec.statemachine_tests.core.fuzz_end import Work, finish, fixed_work, result_word, saved
from asyncspec.statemachine_tests.core.skipped_parts import SkippedPart, engine_capabilities, first_missing, vllm_json
from asyncspec.statemachine_tests.core.replay_file import (
    REPLAY_VERSION, ReplayError, out_dir_problem, read_replay_json, replay_json, replay_problem,
)
from asyncspec.statemachine_tests.core.report import WIDTH, print_buckets, print_coverage, print_divergence

TARGET = "vllm-engine"
EXIT_OK, EXIT_DIVERGENCE, EXIT_USAGE, EXIT_PARTIAL = 0, 1, 2, 3


def usage_error(command: str, message: str) -> int:
    """One line on stderr (never wrapped), exit code 2."""
    print(f"{command}: {message}", file=sys.stderr)
    return EXIT_USAGE


def check_engine_available(allow_version: bool) -> str | None:
    """None if the engine target can run here, else one line saying why not."""
    try:
        check_vllm_version(allow_other=allow_version)
        return moved_symbol()
    except VllmUnavailable as exc:
        return str(exc)


def engine_fuzz_main(seconds: float, seed: int, json_out: bool, allow_version: bool, out_dir: Path,
                     depths: tuple[int, ...] = (1, 2, 3), examples: int | None = None,
                     profile: EngineProfile = DEFAULT_ENGINE_PROFILE,
                     max_divergences: int = DEFAULT_MAX_DIVERGENCES, stop_at_first: bool = False) -> int:
    """Run a campaign; print the summary (``--json``: one object) and every bucket."""
    problem = out_dir_problem(out_dir) or check_engine_available(allow_version)
    if problem:
        return usage_error("fuzz", problem)
    chosen = replace(profile, depths=depths)
    batches = None if examples is None else max(1, -(-examples // 20))
    skipped = skipped_engine_parts(chosen)
    for part, reason in skipped.items():
        print(SkippedPart(part, reason).line(), file=sys.stderr)
    campaign = EngineCampaign(seconds=seconds, seed=seed, profile=chosen, max_batches=batches,
                              max_examples=examples, keep_going=not stop_at_first, max_divergences=max_divergences,
                              skipped=dict(skipped))
    start = time.monotonic()
    with interrupt.catching(), ProgressLine(f"fuzz {TARGET}", quiet=json_out) as line:
        campaign.on_example = lambda stats: line.update(
            f"{stats.examples}{'' if examples is None else f'/{examples}'} examples "
            f"({rate(stats.examples, time.monotonic() - start)}), {stats.steps} engine steps")
        found = campaign.run()
        interrupted = interrupt.requested()
        buckets = campaign.shrink_buckets() if found is None else [first_bucket(campaign, found)]
    elapsed = time.monotonic() - start
    for part, reason in campaign.skipped.items():
        if part not in skipped:  # found by a driver's MissingCapability, not by the probe
            print(SkippedPart(part, reason).line(), file=sys.stderr)
    for number, bucket in enumerate(buckets, 1):
        if isinstance(bucket.representative, EngineRunResult):
            path, representative = bucket_replay_path(out_dir, TARGET, seed, number), bucket.representative
            if saved(lambda: save_engine_replay(representative, path)):
                bucket.replay_file = path
    work = fixed_work(campaign.stats.examples, examples, seconds, interrupted, tuple(campaign.skipped),
                      campaign.stats.drawn())
    summary = engine_summary(campaign, buckets, elapsed, work)
    out = Console(stderr=json_out, highlight=False, width=WIDTH)
    return finish(summary, bool(buckets), work, json_out, lambda: print_buckets(buckets, TARGET, out),
                  lambda: print_engine_summary(summary, out))


def skipped_engine_parts(profile: EngineProfile) -> dict[str, str]:
    """Part (``EngineProfile.config_part``) -> one line, for each part of ``profile`` whose surfaces
    (``config_capabilities``) this vLLM lacks (the probe: ``core/skipped_parts.first_missing``)."""
    found: dict[str, str] = {}
    for config in profile.configs():
        part = profile.config_part(config)
        reason = found.get(part) or first_missing(profile.config_capabilities(config))
        if reason is not None:
            found[part] = reason
    return found


def engine_skipped(c: EngineCampaign) -> list[SkippedPart]:
    """The parts not run, in menu order, each with its one line and its cases drawn but not run."""
    order = {part: i for i, part in enumerate(c.profile.parts())}
    return [SkippedPart(part, reason, c.stats.skipped.get(part, 0))
            for part, reason in sorted(c.skipped.items(), key=lambda kv: order.get(kv[0], len(order)))]


def first_bucket(c: EngineCampaign, found: EngineRunResult) -> Bucket:
    """``--stop-at-first``: the one divergence, shrunk, as the campaign's only bucket."""
    example = (c.stats.first_divergence_example or 1) - 1
    return Bucket(divergence_key(found, c.part()), 1, example, example // c.batch, found)


def engine_summary(c: EngineCampaign, buckets: list[Bucket], elapsed: float, work: Work) -> dict[str, Any]:
    """The ``--json`` contract of the engine target."""
    coverage = c.coverage()
    vllm = vllm_json(engine_capabilities())
    loop = elapsed - c.targets.build_seconds
    return {
        "schema_version": JSON_SCHEMA_VERSION,
        "target": TARGET,
        "vllm_version": vllm["version"],  # the version driven (vllm_identity.driven_vllm)
        "vllm": vllm,
        "skipped_parts": [p.to_json() for p in engine_skipped(c)],
        "runner_class": c.targets.runner_class(),
        "runner": c.profile.runner,  # "v1" or "mrv2" (Model Runner V2: the same class name, vLLM's CPU one)
        "depths": sorted(c.stats.depths),
        "seed": c.seed,
        "examples": c.stats.examples,
        "divergences": sum(b.count for b in buckets),
        "buckets": [b.to_json() for b in buckets],
        "explained": dict(c.stats.explained),
        "coverage": coverage,
        "zero_coverage": [k for k in c.profile.categories() if coverage.get(k, 0) == 0],
        "result": result_word(bool(buckets), work),
        "interrupted": work.interrupted,
        "partial": not work.complete,
        "replay_file": next((str(b.replay_file) for b in buckets if b.replay_file), None),
        "timing": {
            "seconds": round(elapsed, 2),
            "engine_build_seconds": round(c.targets.build_seconds, 2),
            "cases_per_second": round(c.stats.examples / loop, 1) if loop > 0 else 0.0,
            "engine_events": c.stats.engine_events,
            "engine_steps": c.stats.steps,
        },
    }


def print_engine_summary(s: dict[str, Any], out: Console) -> None:
    t = s["timing"]
    runner = s["runner_class"] + (" (Model Runner V2)" if s.get("runner") == "mrv2" else "")
    out.print(f"fuzz {s['target']} (vLLM {s['vllm_version']}, {runner}, depths "
              f"{','.join(map(str, s['depths']))}): {s['examples']} examples, {t['engine_steps']} engine steps in "
              f"{t['seconds']} s ({t['cases_per_second']} cases/s after {t['engine_build_seconds']} s of start-up), "
              f"{s['divergences']} divergences in {len(s['buckets'])} buckets")
    print_coverage(s["coverage"], s["zero_coverage"], out)
    for name, count in s["explained"].items():
        out.print(f"  explained: {name} in {count} case(s) ({EXPLANATIONS[name]})")
    for p in s["skipped_parts"]:
        out.print(f"[bold yellow]SKIPPED[/bold yellow] part {p['part']} ({p['examples']} examples): {p['reason']}")
    if s["interrupted"]:
        out.print(f"[bold yellow]PARTIAL[/bold yellow]: interrupted after {s['examples']} examples")
    drawn = s["examples"] + sum(p["examples"] for p in s["skipped_parts"])
    out.print(f"reproduce with: --examples {drawn} --seed {s['seed']}")


# ---------------------------------------------------------------- replay files


def save_engine_replay(result: EngineRunResult, path: Path) -> None:
    """The scheduler targets' replay file plus the engine case, its events and the worker column."""
    data = replay_json(result, TARGET)
    data["case"] = result.case.to_json() if result.case is not None else None
    data["engine_events"] = [str(e) for e in result.engine_events]
    data["worker"] = {str(k): list(v) for k, v in result.fed.items()}
    write_atomically(path, json.dumps(data, indent=2) + "\n")
    run_save_hooks(path)  # the explorer page beside it (cli/)


def load_engine_replay(path: Path) -> tuple[ec.EngineCase, list[ec.EngineEvent]]:
    """The case and engine events of an engine replay file; ``ReplayError`` if unusable."""
    data = read_replay_json(path)
    if data.get("asyncspec_fuzz_replay") != REPLAY_VERSION or data.get("target") != TARGET:
        raise ReplayError(f"{path} is not a {TARGET} replay file (asyncspec fuzz --target {TARGET} writes them)")
    problem = replay_problem(data)
    if problem:
        raise ReplayError(f"corrupt replay file {path}: {problem}")
    try:
        case = ec.EngineCase.from_json(data["case"])
        events = [ec.parse_engine_event(str(e)) for e in data["engine_events"]]
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise ReplayError(f"corrupt replay file {path}: {exc}".splitlines()[0]) from exc
    problem = ec.case_problem(case) or ec.events_problem(case, events) or ec.device_problem(case)
    if problem:
        raise ReplayError(f"corrupt replay file {path}: {problem}")
    return case, events


def engine_replay(path: Path, allow_version: bool = False, console: Console | None = None,
                  json_out: bool = False) -> int:
    """Re-run an engine replay file: 1 if it still diverges, 0 if not, 2 if unusable."""
    out = console or Console(highlight=False, width=WIDTH)
    try:
        case, events = load_engine_replay(path)
    except ReplayError as exc:
        return usage_error("replay", str(exc))
    problem = check_engine_available(allow_version)
    if problem:
        return usage_error("replay", problem)
    run = EngineRun(case, EngineTargets().get(case.engine), {})
    diverged = not all(run.apply(event) for event in events)
    if json_out:
        sys.stdout.write(json.dumps(replay_summary(run.result, TARGET, path)) + "\n")
    elif diverged:
        print_divergence(run.result, TARGET, out)
    else:
        out.print(f"replay: {len(events)} engine events, spec and {TARGET} agree after every scheduler call "
                  "(the divergence no longer reproduces)")
    return EXIT_DIVERGENCE if diverged else EXIT_OK
