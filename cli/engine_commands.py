"""The engine commands: ``fuzz`` (every target), ``mutate-vllm`` and ``explain-config``.

Registered on the ``asyncspec`` group by ``cli/main.py``.
"""
from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any, cast

import click

from asyncspec.checker.schema import JSON_SCHEMA_VERSION

from asyncspec.cli.common import EXIT_OK, EXIT_VIOLATION, fail_usage, out
from asyncspec.cli.contract import Choice, LazyChoice

# ---------------------------------------------------------------- fuzz


def replay_runner(path: Path) -> str:
    """The model runner a ``vllm-engine`` replay file's case ran on (``v1`` if it does not say)."""
    try:
        return str(json.loads(path.read_text(encoding="utf-8"))["case"]["engine"].get("runner", "v1"))
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return "v1"  # the replay itself reports what is wrong with the file


def reexec_for_mrv2() -> None:
    """Model Runner V2 needs its environment before vLLM is imported (``engine/vllm/mrv2_runner.py``):
    run this same command again in it, or say in one line what is missing."""
    import os

    from asyncspec.engine.vllm.mrv2_runner import mrv2_environment, mrv2_problem, triton_dir, triton_install_command

    problem = mrv2_problem()
    if problem is None:
        return
    folder = triton_dir()
    if not (folder / "triton").is_dir():
        fail_usage(f"Model Runner V2 needs Triton in {folder} (or $ASYNCSPEC_TRITON_DIR): "
                   f"{sys.executable} {' '.join(triton_install_command(folder))}")
    if os.environ.get("VLLM_USE_V2_MODEL_RUNNER") == "1":  # already run again: do not loop
        fail_usage(problem)
    sys.stdout.flush()
    os.execve(sys.executable, [sys.executable, "-m", "asyncspec", *sys.argv[1:]],
              mrv2_environment(dict(os.environ), folder))


ENGINE_PROFILE_NAMES = ("default", "spec-decode")
"""The profiles ``--target vllm-engine`` takes (``engine_profile.ENGINE_PROFILES``); its own
``default`` is what it runs without ``--profile``."""


def _profile_names() -> list[str]:
    from asyncspec.statemachine_tests.scheduler.profiles import PROFILES

    return list(PROFILES) + [n for n in ENGINE_PROFILE_NAMES if n not in PROFILES]


def default_profile(target: str) -> str:
    """What ``--profile`` is when left out: vllm-engine's own ``default``; else the campaign over the
    configuration space (``all``; on reference, the parts it models)."""
    from asyncspec.statemachine_tests.scheduler.profiles import DEFAULT_PROFILE_NAME

    return "default" if target == "vllm-engine" else DEFAULT_PROFILE_NAME


def default_budget(target: str, examples: int | None, seconds: float | None) -> tuple[int | None, float]:
    """``(examples, seconds)`` with what was left out filled in: on reference and vllm, neither given is
    the default campaign at the size that saturates it (fixed work, reproducible); otherwise 30 s
    without ``--examples``, and an outer limit of an hour with it."""
    from asyncspec.statemachine_tests.scheduler.profiles import DEFAULT_EXAMPLES

    if examples is None and seconds is None and target in ("reference", "vllm"):
        examples = DEFAULT_EXAMPLES
    return examples, (30.0 if examples is None else 3600.0) if seconds is None else seconds


@click.command()
@click.option("--target", type=Choice(["reference", "vllm", "vllm-engine", "torch", "sglang"]), required=True,
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
              type=Choice(["reset-with-deferral", "priority-undo-keeps-hash"]),
              help="Also draw cases that reach a documented vLLM bug (docs/findings_vllm.md: reset-with-deferral "
                   "V1, priority-undo-keeps-hash V4, vllm only); they are counted apart "
                   "(known_bug_divergences), not as divergences.")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object (target, events, examples, "
              "divergences, coverage, zero_coverage).")
@click.option("--allow-version", is_flag=True, help="Drive a vLLM other than the pinned 0.33.0.")
@click.option("--profile", type=LazyChoice(lambda: _profile_names()), default=None,
              help="Workload profile for reference/vllm (statemachine_tests/scheduler/profiles.py; docs/fuzzing.md); default "
                   "all, the mix of base, depth3, prefix-caching, priority, spec-decode, structured-output, hybrid, "
                   "connector and long-prompt (shard k draws from one part; on reference only the parts it "
                   "models); also large. vllm-engine: default (its default) or spec-decode (docs/vllm-engine.md).")
@click.option("--out-dir", type=click.Path(file_okay=False, path_type=Path),
              default=Path("asyncspec-traces"), show_default=True, help="Where a divergence's replay file goes.")
@click.option("--sglang-mutant", default=None, metavar="NAME",
              help="sglang: run SGLang with one of its one-line mutants (engine/sglang/sglang_mutants.py; the kill "
                   "table in docs/fuzzing.md).")
@click.option("--runner", type=Choice(["v1", "mrv2"]), default="v1", show_default=True,
              help="vllm-engine: the model runner; mrv2 is Model Runner V2 under Triton's interpreter (slow; "
                   "depth 3 with pipeline parallelism 2's decode stagger; Triton from a private folder, "
                   "docs/vllm-engine.md).")
def fuzz(target: str, seconds: float | None, depth: int | None, examples: int | None, jobs: int,
         ray_address: str | None, known_bugs: tuple[str, ...], seed: int, as_json: bool, allow_version: bool,
         profile: str | None, out_dir: Path, sglang_mutant: str | None, runner: str) -> None:
    """Differential fuzzing: the engine under test against the spec, event by event.

    Exit 0 with no divergence, 1 on a divergence (table printed, replay file
    written), 2 on bad usage or when the target cannot be loaded, 3 partial
    (the time ran out before --examples, or no example completed).
    """
    from asyncspec.statemachine_tests.scheduler.fuzz import budget_problem

    examples, seconds = default_budget(target, examples, seconds)
    problem = budget_problem(seconds, examples, jobs)
    if problem:
        fail_usage(problem)
    if (jobs != 1 or ray_address is not None) and target not in ("reference", "vllm"):
        fail_usage("--jobs and --ray are options of --target reference and --target vllm")
    engine_profile = target == "vllm-engine" and profile in ENGINE_PROFILE_NAMES
    if profile is not None and target not in ("reference", "vllm") and not engine_profile:
        fail_usage(f"--profile is an option of --target reference and vllm, and vllm-engine takes "
                   f"{' or '.join(ENGINE_PROFILE_NAMES)} (not {profile} with {target})")
    if profile is not None and runner == "mrv2":
        fail_usage("--runner mrv2 has its own profile (docs/vllm-engine.md); leave --profile out")
    profile = default_profile(target) if profile is None else profile
    if engine_profile and profile == "spec-decode" and depth == 3:
        fail_usage("--profile spec-decode runs depths 1 and 2 (depth 3 with drafts is not a V1 configuration "
                   "vLLM ships: docs/vllm-engine.md)")
    if sglang_mutant is not None and target != "sglang":
        fail_usage("--sglang-mutant is an option of --target sglang")
    if target == "sglang":
        from asyncspec.engine.sglang.sglang_mutants import BY_NAME
        from asyncspec.statemachine_tests.sglang.sglang_fuzz import fuzz_main as fuzz_sglang

        if depth is not None or known_bugs or runner != "v1":
            fail_usage("--depth, --known-bug and --runner are options of the vLLM targets, not sglang")
        if sglang_mutant is not None and sglang_mutant not in BY_NAME:
            fail_usage(f"unknown SGLang mutant {sglang_mutant!r} (one of {', '.join(BY_NAME)})")
        sys.exit(fuzz_sglang(seconds, seed, as_json, out_dir, examples, sglang_mutant))
    if target == "torch" and (depth is not None or known_bugs or runner != "v1"):
        fail_usage("--depth, --known-bug and --runner are options of the vLLM targets, not torch")
    if target == "torch":
        from asyncspec.engine.torch.torch_oracle import fuzz_torch

        sys.exit(fuzz_torch(seconds, seed, as_json, out_dir=out_dir, examples=examples))
    if depth is not None and target != "vllm-engine":
        fail_usage("--depth is an option of --target vllm-engine")
    if known_bugs and target not in ("vllm", "vllm-engine"):
        fail_usage("--known-bug is an option of --target vllm and vllm-engine (the bug is vLLM's)")
    if "priority-undo-keeps-hash" in known_bugs and target != "vllm":
        fail_usage("--known-bug priority-undo-keeps-hash is an option of --target vllm (the vllm-engine "
                   "profiles draw no priority policy)")
    if runner == "mrv2" and target != "vllm-engine":
        fail_usage("--runner is an option of --target vllm-engine")
    if runner == "mrv2":
        reexec_for_mrv2()  # before vLLM is imported
    if target == "vllm-engine":
        from asyncspec.statemachine_tests.vllm_engine.engine_fuzz import engine_fuzz_main
        from asyncspec.statemachine_tests.vllm_engine.engine_profile import ENGINE_PROFILES, MRV2_ENGINE_PROFILE

        base = MRV2_ENGINE_PROFILE if runner == "mrv2" else ENGINE_PROFILES[profile]
        depths = (depth,) if depth is not None else base.depths
        chosen = replace(base, reset_with_deferral="reset-with-deferral" in known_bugs)
        sys.exit(engine_fuzz_main(seconds, seed, as_json, allow_version, out_dir, depths, examples, chosen))
    from asyncspec.statemachine_tests.scheduler.fuzz import fuzz_main
    from asyncspec.statemachine_tests.scheduler.profiles import PROFILES, with_known_bugs

    if profile not in PROFILES:
        renamed = "; the former default of reference and vllm is now 'base'" if profile == "default" else ""
        fail_usage(f"unknown profile '{profile}' for --target {target} (one of {', '.join(sorted(PROFILES))})"
                   f"{renamed}")
    chosen_profile = with_known_bugs(PROFILES[profile], known_bugs)
    sys.exit(fuzz_main(target, seconds, seed, as_json, allow_version, out_dir, chosen_profile,
                       examples=examples, jobs=jobs, ray=ray_address))


# ---------------------------------------------------------------- mutate-vllm


@click.command(name="mutate-vllm")
@click.option("--target", default=None, metavar="vllm|vllm-engine", help="One target (default: both, one column each).")
@click.option("--only", default=None, metavar="ID", help="Run one mutant.")
@click.option("--list", "list_only", is_flag=True, help="List the corpus.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@click.option("--examples", type=int, default=300, show_default=True, help="Fixed work per mutant and target.")
@click.option("--seed", type=int, default=0, show_default=True)
def mutate_vllm(target: str | None, only: str | None, list_only: bool, as_json: bool, examples: int, seed: int) -> None:
    """Self-test: one-line vLLM bugs in a private import overlay, and which fuzz target kills each."""
    from asyncspec.statemachine_tests.mutation.mutate_vllm import mutate_main

    sys.exit(mutate_main(target, only, list_only, as_json, examples, seed))


# ---------------------------------------------------------------- explain-config


@click.command(name="explain-config")
@click.option("--async-scheduling", "flag", type=Choice(["auto", "on", "off"]), default="auto", show_default=True)
@click.option("--runner", type=Choice(["generate", "pooling"]), default="generate", show_default=True)
@click.option("--executor", type=Choice(["mp", "uni", "ray", "external_launcher", "custom"]),
              default="mp", show_default=True)
@click.option("--speculative-method", default=None, help="e.g. eagle3, ngram, ngram_gpu, draft_model, suffix, mtp")
@click.option("--disable-padded-drafter-batch", is_flag=True)
@click.option("--pipeline-parallel-size", "--pp", "pp", type=click.IntRange(min=1), default=1, show_default=True)
@click.option("--model-runner", type=Choice(["v1", "v2"]), default="v1", show_default=True)
@click.option("--platform", type=Choice(["cuda", "rocm", "cpu", "other"]), default="cuda", show_default=True)
@click.option("--rocm-deepep-dbo", is_flag=True, help="ROCm with DBO and the deepep_high_throughput all2all")
@click.option("--scheduler-cls", default=None)
@click.option("--json", "as_json", is_flag=True)
def explain_config(flag: str, runner: str, executor: str, speculative_method: str | None,
                   disable_padded_drafter_batch: bool, pp: int, model_runner: str, platform: str,
                   rocm_deepep_dbo: bool, scheduler_cls: str | None, as_json: bool) -> None:
    """Say whether vLLM 0.33.0 runs async scheduling for a setting, and which rule decided.

    Exit 0 with a decision; 1 when vLLM refuses the setting (an explicit
    --async-scheduling that a rule forbids).
    """
    from asyncspec.spec.enablement import RULES, AsyncSetting, decide

    setting = AsyncSetting(
        async_scheduling={"auto": None, "on": True, "off": False}[flag], runner=cast(Any, runner),
        executor=cast(Any, executor), speculative_method=speculative_method,
        disable_padded_drafter_batch=disable_padded_drafter_batch, pipeline_parallel_size=pp,
        v2_model_runner=model_runner == "v2", rocm_deepep_ht_dbo=rocm_deepep_dbo,
        platform=cast(Any, platform), custom_scheduler_cls=scheduler_cls)
    d = decide(setting)
    if as_json:
        print(json.dumps({"schema_version": JSON_SCHEMA_VERSION, "async_scheduling": d.enabled, "rule": d.rule, "reason": RULES[d.rule],
                          "error": d.error, "batch_queue_depth": d.batch_queue_depth,
                          "scheduler_class": d.scheduler_class}, indent=2))
    elif d.error is not None:
        out.print(f"vLLM refuses this setting: {d.error} (rule {d.rule})", markup=False)
    else:
        out.print(f"async scheduling: {'ON' if d.enabled else 'OFF'} — rule {d.rule}: {RULES[d.rule]}", markup=False)
        out.print(f"scheduler: {d.scheduler_class}; batch queue depth (max_concurrent_batches): "
                  f"{d.batch_queue_depth}", markup=False)
    sys.exit(EXIT_VIOLATION if d.error is not None else EXIT_OK)
