"""``asyncspec fuzz`` (every target) and ``mutate-vllm``: the engines under test against the spec.

Which options each target takes is ``cli/fuzz_options.py``'s table; here each
target's run is one function of ``RUNS``.  Listed by ``cli/main.py``; what a
run needs beyond click is imported when it runs.
"""
from __future__ import annotations

import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import click

from asyncspec.cli.common import fail_usage
from asyncspec.cli.contract import Choice, ContractCommand, LazyChoice
from asyncspec.cli.fuzz_options import (TARGETS, default_budget, default_profile, profile_names,
                                        target_option_problem)


@dataclass(frozen=True)
class FuzzRun:
    """One ``fuzz`` command line, checked, with what was left out filled in."""

    target: str
    seconds: float
    examples: int | None
    seed: int
    as_json: bool
    allow_version: bool
    out_dir: Path
    profile: str
    depth: int | None
    known_bugs: tuple[str, ...]
    jobs: int
    ray_address: str | None
    sglang_mutant: str | None
    runner: str
    max_divergences: int = 20
    stop_at_first: bool = False
    vllm_coverage: Path | None = None


def _fuzz_sglang(run: FuzzRun) -> int:
    from asyncspec.engine.sglang.sglang_mutants import BY_NAME
    from asyncspec.statemachine_tests.sglang.sglang_fuzz import fuzz_main as fuzz_sglang

    if run.sglang_mutant is not None and run.sglang_mutant not in BY_NAME:
        fail_usage(f"unknown SGLang mutant {run.sglang_mutant!r} (one of {', '.join(BY_NAME)})")
    return fuzz_sglang(run.seconds, run.seed, run.as_json, run.out_dir, run.examples, run.sglang_mutant)


def _fuzz_torch(run: FuzzRun) -> int:
    from asyncspec.engine.torch.torch_oracle import fuzz_torch

    return fuzz_torch(run.seconds, run.seed, run.as_json, out_dir=run.out_dir, examples=run.examples)


def _fuzz_vllm_engine(run: FuzzRun) -> int:
    if run.runner == "mrv2":
        from asyncspec.cli.mrv2_reexec import reexec_for_mrv2

        reexec_for_mrv2()  # before vLLM is imported
    _start_vllm_coverage(run)
    if run.profile == "all":  # the default campaign: its parts (engine_parts.ENGINE_PARTS), each fixed work
        from asyncspec.statemachine_tests.vllm_engine.engine_parts import engine_parts_main

        return engine_parts_main(run.seed, run.as_json, run.allow_version, run.out_dir, run.max_divergences,
                                 run.stop_at_first)
    from asyncspec.statemachine_tests.vllm_engine.engine_fuzz import engine_fuzz_main
    from asyncspec.statemachine_tests.vllm_engine.engine_profile import ENGINE_PROFILES, MRV2_PROFILES

    base = (MRV2_PROFILES if run.runner == "mrv2" else ENGINE_PROFILES)[run.profile]
    depths = (run.depth,) if run.depth is not None else base.depths
    chosen = replace(base, reset_with_deferral="reset-with-deferral" in run.known_bugs,
                     session_kv_deadlock="session-kv-deadlock" in run.known_bugs)
    if "prompt-logprobs-stale-drop" in run.known_bugs:  # finding V12: logprobs requests in drop-mode cases
        chosen = replace(chosen, stale_modes=("deliver", "drop"), resets=2)
    return engine_fuzz_main(run.seconds, run.seed, run.as_json, run.allow_version, run.out_dir, depths,
                            run.examples, chosen, run.max_divergences, run.stop_at_first)


def _engine_profile(profile: str | None, bare: bool, depth: int | None, runner: str,
                    known_bugs: tuple[str, ...]) -> str:
    """vllm-engine's profile: its default campaign ``all`` (the parts of ``engine_parts.ENGINE_PARTS``) when
    nothing narrows the run; its V1 profile ``default`` under a budget, a depth, a runner or a known bug."""
    narrowed = not bare or depth is not None or runner != "v1" or bool(known_bugs)
    if profile == "all" and narrowed:
        fail_usage("--profile all (the default campaign of vllm-engine) runs each part's fixed work: leave out "
                   "--examples, --seconds, --depth, --runner and --known-bug, or choose --profile default")
    return ("default" if narrowed else "all") if profile is None else profile


def _start_vllm_coverage(run: FuzzRun) -> None:
    """``--vllm-coverage``: measure from here on, in the process that imports vLLM (any re-execution done)."""
    from asyncspec.statemachine_tests.core.vllm_coverage import INTO, start, start_into

    if run.vllm_coverage is not None:
        start(run.vllm_coverage, counting=run.target == "vllm-engine")
    elif os.environ.get(INTO):  # a part of a measured campaign in a process of its own (mrv2-pp2)
        start_into(Path(os.environ[INTO]), counting=run.target == "vllm-engine")


def _vllm_coverage_problem(path: Path | None) -> str | None:
    if path is None:
        return None
    from asyncspec.checker.atomic import folder_problem
    from asyncspec.statemachine_tests.core.vllm_coverage import coverage_problem

    return coverage_problem() or folder_problem(path.parent, "--vllm-coverage")


def _fuzz_scheduler(run: FuzzRun) -> int:
    from asyncspec.statemachine_tests.scheduler.fuzz import fuzz_main
    from asyncspec.statemachine_tests.scheduler.profiles import PROFILES, with_known_bugs

    if run.profile not in PROFILES:
        renamed = "; the former default of reference and vllm is now 'base'" if run.profile == "default" else ""
        fail_usage(f"unknown profile '{run.profile}' for --target {run.target} "
                   f"(one of {', '.join(sorted(PROFILES))}){renamed}")
    _start_vllm_coverage(run)
    chosen_profile = with_known_bugs(PROFILES[run.profile], run.known_bugs)
    return fuzz_main(run.target, run.seconds, run.seed, run.as_json, run.allow_version, run.out_dir,
                     chosen_profile, examples=run.examples, jobs=run.jobs, ray=run.ray_address,
                     max_divergences=run.max_divergences, stop_at_first=run.stop_at_first)


RUNS: dict[str, Callable[[FuzzRun], int]] = {
    "reference": _fuzz_scheduler, "vllm": _fuzz_scheduler, "vllm-engine": _fuzz_vllm_engine,
    "torch": _fuzz_torch, "sglang": _fuzz_sglang}
"""Each target's run; the exit code."""


@click.command(cls=ContractCommand)
@click.option("--target", type=Choice(list(TARGETS)), required=True,
              help="The engine under test: the reference scheduler, vLLM's real scheduler, vLLM's production "
                   "engine (EngineCore over the V1 model runner), the torch engine, or SGLang's scheduler "
                   "(overlap and non-overlap loops, in its own venv: .ci/install-sglang).")
@click.option("--seconds", type=float, default=None,
              help="Time budget (default 30 s; reference/vllm: none, --examples 1800); with --examples only an "
                   "outer limit (default an hour): reaching it exits 3.")
@click.option("--depth", type=click.IntRange(1, 3), default=None,
              help="vllm-engine: one batch-queue depth (default: 1, 2 and 3 in one run).")
@click.option("--examples", type=int, default=None,
              help="A fixed amount of work: example i is drawn from (seed, i) alone (vllm-engine: whole "
                   "batches of 20; torch: the first i draws of the seed); --seconds is then only an outer limit. "
                   "reference/vllm without --seconds: 1800 (the default campaign's saturating size).")
@click.option("--jobs", type=int, default=1, show_default=True,
              help="reference/vllm: processes sharing the examples (the merged result equals --jobs 1).")
@click.option("--ray", "ray_address", default=None, metavar="ADDRESS",
              help="reference/vllm: run the shards as Ray tasks (--jobs in flight) at ADDRESS, or 'local' "
                   "(needs asyncspec[ray]).")
@click.option("--known-bug", "known_bugs", multiple=True,
              type=Choice(["reset-with-deferral", "priority-undo-keeps-hash", "reset-with-session",
                           "session-kv-deadlock", "prompt-logprobs-stale-drop"]),
              help="Also draw cases that reach a documented vLLM bug (docs/findings_vllm.md: reset-with-deferral "
                   "V1, priority-undo-keeps-hash V4, reset-with-session V8, vllm only; session-kv-deadlock V10, "
                   "vllm-engine --profile streaming only; prompt-logprobs-stale-drop V12, vllm-engine --profile "
                   "logprobs only); on --target vllm they are counted apart (known_bug_divergences), not as "
                   "divergences; the vllm-engine ones widen the draw, and their cases diverge.")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object (target, events, examples, "
              "divergences, coverage, zero_coverage).")
@click.option("--allow-version", is_flag=True, help="Drive a vLLM other than the pinned 0.33.0.")
@click.option("--profile", type=LazyChoice(profile_names), default=None,
              help="Workload profile for reference/vllm (statemachine_tests/scheduler/profiles.py; docs/fuzzing.md); "
                   "default "
                   "all, the mix of base, depth3, prefix-caching, priority, spec-decode, structured-output, hybrid, "
                   "connector, long-prompt, reset, self-hit, reset-storm, pause, kv-recovery, streaming, encoder, offload, "
                   "mamba and stop (shard k draws from one part; on reference only the parts it models); also large "
                   "and sync-pp (pipeline parallelism 2 over the plain Scheduler). vllm-engine: all (its default "
                   "campaign without --examples, --seconds, --depth or --runner: the parts v1, structured+spec-decode, "
                   "pause, streaming, mrv2-pp2, sync+mrv2+spec-decode, sync-pp2, kv-recovery, encoder, mrv2-encoder, mamba (a Mamba group "
                   "in mode none) and dp (vLLM's data-parallel wave loop on two or three ranks), each fixed work), default "
                   "(the V1 runner at depths 1-3, what a budget runs), spec-decode, pause, streaming, "
                   "sync-pp, kv-recovery, encoder or mamba "
                   "(docs/vllm-engine.md); with --runner mrv2, spec-decode, encoder or its own profile.")
@click.option("--out-dir", type=click.Path(file_okay=False, path_type=Path),
              default=Path("asyncspec-traces"), show_default=True, help="Where a divergence's replay file goes.")
@click.option("--sglang-mutant", default=None, metavar="NAME",
              help="sglang: run SGLang with one of its one-line mutants (engine/sglang/sglang_mutants.py; the kill "
                   "table in docs/fuzzing.md).")
@click.option("--runner", type=Choice(["v1", "mrv2"]), default="v1", show_default=True,
              help="vllm-engine: the model runner; mrv2 is Model Runner V2 under Triton's interpreter (slow; "
                   "depth 3 with pipeline parallelism 2's decode stagger; Triton from a private folder, "
                   "docs/vllm-engine.md).")
@click.option("--vllm-path", type=click.Path(path_type=Path), default=None, metavar="DIR",
              help="vllm/vllm-engine: drive the vllm package of this source tree (a git checkout or an unpacked "
                   "sdist, unbuilt), imported instead of the installed one; outside 0.30.0-0.33.0 it needs "
                   "--allow-version (docs/fuzzing.md, \"Other vLLM releases\").")
@click.option("--max-divergences", type=int, default=20, show_default=True,
              help="reference/vllm/vllm-engine: keep going after a divergence until this many distinct ones "
                   "(buckets: docs/fuzzing.md); each bucket gets a shrunk representative, a table and a replay file.")
@click.option("--vllm-coverage", type=click.Path(dir_okay=False, path_type=Path), default=None, metavar="FILE",
              help="vllm/vllm-engine: line and arc coverage of vLLM's scheduler, KV, engine and runner files, per "
                   "function, with every --jobs worker (coverage.py; docs/coverage.md), written to FILE; the JSON "
                   "gains vllm_coverage.")
@click.option("--stop-at-first", is_flag=True,
              help="End the campaign at its first divergence, shrunk (for bisecting; the torch and sglang "
                   "targets always do); overrides --max-divergences.")
def fuzz(target: str, seconds: float | None, depth: int | None, examples: int | None, jobs: int,
         ray_address: str | None, known_bugs: tuple[str, ...], seed: int, as_json: bool, allow_version: bool,
         profile: str | None, out_dir: Path, sglang_mutant: str | None, runner: str, vllm_path: Path | None,
         max_divergences: int, stop_at_first: bool, vllm_coverage: Path | None) -> None:
    """Differential fuzzing: the engine under test against the spec, event by event.

    Exit 0 with no divergence, 1 on a divergence (a table printed and a replay
    file written per bucket), 2 on bad usage or when the target cannot be loaded, 3 partial
    (the time ran out before --examples, no example completed, or vllm/vllm-engine skipped a part
    whose surface this vLLM lacks: one line each, and skipped_parts in --json).
    """
    from asyncspec.statemachine_tests.scheduler.fuzz import budget_problem

    bare = examples is None and seconds is None
    examples, seconds = default_budget(target, examples, seconds)
    problem = budget_problem(seconds, examples, jobs, max_divergences) or target_option_problem(
        target, click.get_current_context().params) or _vllm_coverage_problem(vllm_coverage)
    if problem:
        fail_usage(problem)
    if vllm_path is not None and ray_address is not None:
        fail_usage("--vllm-path drives the checkout in this machine's processes, not in Ray's workers; "
                   "drop --ray (use --jobs), or install the checkout on every Ray node and drop --vllm-path")
    if vllm_path is not None:
        from asyncspec.cli.vllm_path import reexec_for_vllm_path

        reexec_for_vllm_path(vllm_path)  # before vLLM is imported
    if as_json and target in ("vllm", "vllm-engine"):  # older releases log INFO to stdout: keep it JSON
        os.environ.setdefault("VLLM_LOGGING_STREAM", "ext://sys.stderr")
    chosen = (_engine_profile(profile, bare, depth, runner, known_bugs) if target == "vllm-engine"
              else default_profile(target) if profile is None else profile)
    run = FuzzRun(target, seconds, examples, seed, as_json, allow_version, out_dir, chosen, depth, known_bugs, jobs,
                  ray_address,
                  sglang_mutant, runner, max_divergences, stop_at_first, vllm_coverage)
    sys.exit(RUNS[target](run))


@click.command(name="mutate-vllm", cls=ContractCommand)
@click.option("--target", default=None, metavar="vllm|vllm-engine", help="One target (default: both, one column each).")
@click.option("--only", default=None, metavar="ID", help="Run one mutant.")
@click.option("--list", "list_only", is_flag=True, help="List the corpus.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@click.option("--examples", type=int, default=None,
              help="Fixed work per mutant and target (default: vllm 1800, the default campaign of fuzz --target "
                   "vllm, its mix of parts; vllm-engine 300).")
@click.option("--seed", type=int, default=0, show_default=True)
def mutate_vllm(target: str | None, only: str | None, list_only: bool, as_json: bool, examples: int | None,
                seed: int) -> None:
    """Self-test: one-line vLLM bugs in a private import overlay, and which fuzz target kills each."""
    from asyncspec.statemachine_tests.mutation.mutate_vllm import mutate_main

    sys.exit(mutate_main(target, only, list_only, as_json, examples, seed))
