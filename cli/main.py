"""The ``asyncspec`` command line.

Exit codes (every command; ``cli/contract.py``): 0 all good; 1 a property is
violated, a mutant survived, a witness was never reached, or a proof failed;
2 bad usage, a bad config or an unreadable trace (one-line error); 3 an
exploration stopped early (``--max-states`` or Ctrl-C) without finding a
violation: the report says what it covered and is marked partial; 70 an
internal error (one line, no traceback).
"""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from asyncspec.checker import configs as cfgs, interrupt
from asyncspec.checker.bfs import Progress, explore
from asyncspec.checker.progress import ProgressLine, rate
from asyncspec.checker.replay_check import recheck
from asyncspec.checker.result import CheckResult
from asyncspec.checker.schema import JSON_SCHEMA_VERSION, nearest
from asyncspec.checker.table import trace_table
from asyncspec.checker.trace import TraceError, folder_problem, load_trace, save_trace
from asyncspec.explorer.beside import html_main, install_html_hooks
from asyncspec.spec.config import ConfigError, SpecConfig

from asyncspec.cli.check_extras import saved_traces, show_witness_main, sweep_configs, update_manifest_from
from asyncspec.cli.contract import Choice, ContractGroup
from asyncspec.cli.common import EXIT_OK, EXIT_PARTIAL, EXIT_VIOLATION, fail_usage, out
from asyncspec.cli.engine_commands import explain_config, fuzz, mutate_vllm
from asyncspec.cli.monitor_commands import is_monitor_window, replay_monitor_window

if TYPE_CHECKING:
    from asyncspec.checker.check_run import Checked


@click.group(cls=ContractGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="asyncspec")
def main() -> None:
    """Model-check, prove and fuzz async scheduling of LLM inference engines."""
    interrupt.sigterm_as_sigint()  # a CI runner's SIGTERM ends a run like Ctrl-C: a partial report, exit 3
    install_html_hooks()  # check and fuzz write the explorer page beside each trace


for _command in (fuzz, mutate_vllm, explain_config):
    main.add_command(_command)


# ---------------------------------------------------------------- check


def _resolve_configs(names: tuple[str, ...]) -> list[SpecConfig]:
    try:
        found = [c for n in (names or ("default",)) for c in cfgs.resolve(n)]
    except ConfigError as exc:
        fail_usage(str(exc))
    if not found:
        fail_usage("no config selected")
    return found


def _progress_printer(line: ProgressLine) -> Progress | None:
    if line.mode == "off":
        return None

    def report(states: int, frontier: int, depth: int, elapsed: float) -> None:
        if frontier == 0:  # every state expanded: the graph phase starts
            line.update(f"{states:,} states, depth {depth}; deadlock/livelock analysis (SCCs)", force=True)
        else:
            line.update(f"{states:,} states ({rate(states, elapsed)}), queue {frontier:,}, depth {depth}")
    return report


def _interrupted(cfg: SpecConfig, explorer: str) -> Checked:
    """A config whose run an interrupt ended outside the explorers' own handling."""
    from asyncspec.checker.check_run import Checked

    return Checked(CheckResult(cfg.name, partial=True, partial_reason=interrupt.reason(),
                               expect_violation=cfg.expect_violation), explorer, 0.0, 0.0)


def _print_result(r: CheckResult, cfg: SpecConfig, trace_dir: Path) -> None:
    status = "ok" if r.ok else ("PARTIAL" if r.partial else "FAIL")
    out.print(f"[bold]{r.name}[/bold]: {status} — {r.distinct_states} distinct states, depth {r.depth}, "
              f"{r.transitions} transitions, {r.seconds:.2f}s")
    if r.partial:
        out.print(f"  partial: {r.partial_reason}; only {r.distinct_states} states were covered")
    for w in r.vacuous:
        out.print(f"  vacuous: witness '{w}' was never reached")
    for v in r.violations:
        expected = v.property == r.expect_violation
        label = "expected finding" if expected else "VIOLATION"
        out.print(f"  {label}: {v.property}: {v.message} (trace of {len(v.trace.actions)} actions)")
        path = trace_dir / f"{r.name}.{v.property}.trace.json"
        save_trace(v.trace, path)
        out.print(trace_table(cfg, v.trace.states(), title=f"{r.name}: {v.property}"))
        out.print(f"  replay with: asyncspec replay {path}")


def _result_json(r: CheckResult) -> dict[str, Any]:
    data: dict[str, Any] = r.to_json()  # (a partial run has no vacuous witnesses: it did not finish)
    data["violations"] += [
        {"property": f"witness:{w}", "message": "never reached: the config is vacuous for it"}
        for w in r.vacuous
    ]
    return data


@main.command()
@click.option("--config", "-c", "names", multiple=True, metavar="NAME|SET|FILE",
              help="A named config, a set (default, slow, finding) or a TOML file; repeatable.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of tables.")
@click.option("--max-states", type=click.IntRange(min=1), default=None, help="Stop a config after N states.")
@click.option("--no-symmetry", is_flag=True, help="Explore concrete states (no block-id reduction).")
@click.option("--trace-dir", type=click.Path(file_okay=False, path_type=Path),
              default=Path("asyncspec-traces"), show_default=True, help="Where violation traces are saved.")
@click.option("--update-manifest", is_flag=True, help="Pin the measured state counts in configs/manifest.json.")
@click.option("--explorer", type=Choice(["fast", "plain"]), default="fast", show_default=True,
              help="fast: packed store, memoized checks (docs/explorer.md); plain: the original BFS.")
@click.option("--jobs", "-j", type=int, default=1, show_default=True,
              help="Expand states in K processes of this machine (fast explorer).")
@click.option("--ray", "ray_address", default=None, metavar="ADDRESS",
              help="Expand states on Ray workers (--jobs of them) at ADDRESS, or 'local' (needs asyncspec[ray]).")
@click.option("--max-memory", default=None, metavar="SIZE",
              help="Stop cleanly (partial, exit 3) when resident memory passes SIZE, e.g. 8G.")
@click.option("--checkpoint", "checkpoint_dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Save progress to DIR/CONFIG.ckpt on a stop and every --checkpoint-every seconds.")
@click.option("--checkpoint-every", type=float, default=60.0, show_default=True, metavar="SECONDS")
@click.option("--resume", is_flag=True, help="Continue from the checkpoints in --checkpoint DIR.")
@click.option("--show-witness", "show_witness", default=None, metavar="EVENT",
              help="Instead of checking: print (and save) a shortest trace reaching witness EVENT in each config.")
def check(names: tuple[str, ...], as_json: bool, max_states: int | None, no_symmetry: bool,
          trace_dir: Path, update_manifest: bool, explorer: str, jobs: int, ray_address: str | None,
          max_memory: str | None, checkpoint_dir: Path | None, checkpoint_every: float, resume: bool,
          show_witness: str | None) -> None:
    """Explore every reachable state of each config and check every property."""
    from asyncspec.checker.check_run import RunError, check_config, settings

    if show_witness is not None:
        others = [o for o, given in (("--update-manifest", update_manifest), ("--checkpoint", checkpoint_dir),
                                     ("--resume", resume), ("--ray", ray_address), ("--max-memory", max_memory),
                                     ("--jobs", jobs != 1), ("--no-symmetry", no_symmetry)) if given]
        if others:
            fail_usage(f"--show-witness searches on its own; leave out {others[0]}")
        sys.exit(show_witness_main(_resolve_configs(names), show_witness, as_json, trace_dir, max_states))

    problem = folder_problem(trace_dir, "--trace-dir") or (
        folder_problem(checkpoint_dir, "--checkpoint") if checkpoint_dir is not None else None)
    if problem:
        fail_usage(problem)
    try:
        run = settings(explorer, symmetry=not no_symmetry, max_states=max_states, jobs=jobs, ray=ray_address,
                       max_memory=max_memory, checkpoint_dir=checkpoint_dir,
                       checkpoint_seconds=checkpoint_every, resume=resume)
    except RunError as exc:
        fail_usage(str(exc))
    results: list[CheckResult] = []
    costs: list[dict[str, Any]] = []
    for cfg in _resolve_configs(names):
        with ProgressLine(f"check {cfg.name}", quiet=as_json) as line:
            try:
                checked = check_config(cfg, run, progress=_progress_printer(line))
            except RunError as exc:
                fail_usage(str(exc))
            except KeyboardInterrupt:
                checked = _interrupted(cfg, explorer)
        r = checked.result
        costs.append(checked.to_json())
        results.append(r)
        if not as_json:
            _print_result(r, cfg, trace_dir)
        if r.partial and r.partial_reason.startswith("interrupted"):
            break
    code = _exit_code(results)
    if update_manifest:
        update_manifest_from(results, code)
    if as_json:
        result = {EXIT_OK: "ok", EXIT_PARTIAL: "partial"}.get(code, "violation")
        configs = [_result_json(r) | cost | {"trace_files": saved_traces(r, trace_dir)}
                   for r, cost in zip(results, costs)]
        stopped = any(r.partial_reason.startswith("interrupted") for r in results)
        print(json.dumps({"schema_version": JSON_SCHEMA_VERSION, "result": result,
                          "trace_files": [f for c in configs for f in c["trace_files"]], "interrupted": stopped, "configs": configs}, indent=2))
    else:
        out.print(f"{sum(r.ok for r in results)}/{len(results)} configs ok")
    sys.exit(code)


def _exit_code(results: list[CheckResult]) -> int:
    if any(not r.ok and not r.partial for r in results):
        return EXIT_VIOLATION
    if any(r.partial for r in results):  # a finding config's expected violation is no finding
        unexpected = any(v.property != r.expect_violation for r in results for v in r.violations)
        return EXIT_VIOLATION if unexpected else EXIT_PARTIAL
    return EXIT_OK


# ---------------------------------------------------------------- mutants


@main.command()
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@click.option("--only", default=None, metavar="NAME", help="Check one mutant.")
@click.option("--explorer", type=Choice(["fast", "plain"]), default="fast", show_default=True,
              help="Which explorer checks the mutated spec (both report the same traces).")
def mutants(as_json: bool, only: str | None, explorer: str) -> None:
    """Check that every seeded spec bug is killed by the checker."""
    from asyncspec.checker.spec_mutants import MUTANTS, MUTANTS_BY_NAME, MutantResult, run_mutant

    chosen = MUTANTS
    if only is not None:
        if only not in MUTANTS_BY_NAME:
            fail_usage(f"no mutant named '{only}'{nearest(only, MUTANTS_BY_NAME)}; 'asyncspec mutants' lists them")
        chosen = (MUTANTS_BY_NAME[only],)
    results: list[MutantResult] = []
    with ProgressLine("mutants", quiet=as_json) as line:
        for i, m in enumerate(chosen):
            line.update(f"{i}/{len(chosen)} checked, {sum(r.killed for r in results)} killed; now {m.name}")
            try:
                r = run_mutant(m, explorer)
            except KeyboardInterrupt:
                break
            if r.interrupted and not r.killed:
                break  # not checked to the end: neither killed nor survived
            results.append(r)
            if r.interrupted or interrupt.requested():
                break
    stopped = len(results) < len(chosen)
    killed = sum(r.killed for r in results)
    code = EXIT_VIOLATION if killed < len(results) else EXIT_PARTIAL if stopped else EXIT_OK
    if as_json:
        print(json.dumps({"schema_version": JSON_SCHEMA_VERSION,
                          "result": {EXIT_OK: "ok", EXIT_PARTIAL: "partial"}.get(code, "violation"),
                          "interrupted": stopped, "total": len(results), "killed": killed,
                          "not_checked": [m.name for m in chosen[len(results):]],
                          "mutants": [r.to_json() for r in results]}, indent=2))
    else:
        for m, r in zip(chosen, results):
            mark = "killed" if r.killed else "SURVIVED"
            out.print(f"{mark:8s} {r.name:40s} {r.property:34s} on {m.config}  ({m.description})")
        out.print(f"{killed}/{len(results)} mutants killed")
        if stopped:
            out.print(f"PARTIAL: interrupted; {len(chosen) - len(results)} of {len(chosen)} mutants not checked")
    sys.exit(code)


# ---------------------------------------------------------------- replay


def fuzz_file_target(path: Path) -> str | None:
    """The target a fuzz replay file names (``replay FILE`` needs no ``--target``), or None."""
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    if isinstance(data, dict) and "asyncspec_torch_replay" in data:
        return "torch"
    if isinstance(data, dict) and "asyncspec_fuzz_replay" in data:
        named = data.get("target")
        return named if named in ("reference", "vllm", "vllm-engine", "sglang") else None
    return None


@main.command()
@click.argument("trace_file", type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@click.option("--target", type=Choice(["spec", "reference", "vllm", "vllm-engine", "torch", "sglang"]), default="spec",
              show_default=True,
              help="spec: re-execute a checker trace (a fuzz file replays on the target it names); "
                   "reference/vllm/vllm-engine/torch: re-run a fuzz divergence file.")
@click.option("--allow-version", is_flag=True, help="Drive a vLLM other than the pinned 0.33.0.")
@click.option("--html", "html_out", type=click.Path(dir_okay=False, path_type=Path), default=None, metavar="OUT",
              help="Write the trace explorer page (one HTML file) of any trace to OUT: exit 0 written, 2 not.")
def replay(trace_file: Path, as_json: bool, target: str, allow_version: bool, html_out: Path | None) -> None:
    """Re-execute a saved trace against the spec (or an engine) and re-check it.

    A checker trace (``asyncspec check``) replays on the spec and re-checks
    every property; a fuzz divergence file (``asyncspec fuzz``) replays on
    its target beside the spec and shows where they differ.
    """
    if html_out is not None:
        sys.exit(html_main(trace_file, html_out))
    if target == "spec":
        target = fuzz_file_target(trace_file) or target
    if target == "vllm-engine":
        from asyncspec.statemachine_tests.vllm_engine.engine_fuzz import engine_replay

        from asyncspec.cli.engine_commands import reexec_for_mrv2, replay_runner

        if replay_runner(trace_file) == "mrv2":
            reexec_for_mrv2()

        sys.exit(engine_replay(trace_file, allow_version=allow_version, json_out=as_json))
    if target == "sglang":
        from asyncspec.statemachine_tests.sglang.sglang_fuzz import replay_main as replay_sglang

        sys.exit(replay_sglang(trace_file, as_json))
    if target == "torch":
        from asyncspec.engine.torch.replay import replay_torch

        sys.exit(replay_torch(trace_file, as_json))
    if target == "spec" and is_monitor_window(trace_file):
        sys.exit(replay_monitor_window(trace_file, as_json))
    if target != "spec":
        from asyncspec.statemachine_tests.scheduler.fuzz import replay as replay_fuzz

        sys.exit(replay_fuzz(trace_file, target, allow_version=allow_version, json_out=as_json))
    try:
        trace = load_trace(trace_file)
        rows = trace.states()
    except (TraceError, ConfigError) as exc:
        fail_usage(str(exc))
    found = recheck(trace, rows)
    if as_json:
        print(json.dumps({"schema_version": JSON_SCHEMA_VERSION, "trace": str(trace_file), "steps": len(rows) - 1,
                          "violated": trace.violated, "reproduced": found.reproduced,
                          "violations": [f.to_json() for f in found.failures]}, indent=2))
    else:
        out.print(trace_table(trace.config, rows, title=f"replay of {trace_file}"))
        for f in found.failures:
            loop = f" (loop: {', '.join(map(str, f.loop))})" if f.loop else ""
            out.print(f"  violated at step {f.step}: {f.property}: {f.message}{loop}", markup=False)
        if found.stale:
            out.print(f"  the trace no longer shows {trace.violated} on this spec: it does not reproduce", markup=False)
        elif not found.failures:
            out.print("  no property is violated along this trace")
    sys.exit(EXIT_VIOLATION if found.failures else EXIT_OK)


# ---------------------------------------------------------------- prove


@main.command()
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@click.option("--timeout-ms", type=click.IntRange(min=1), default=10_000, show_default=True,
              help="Per-obligation z3 timeout; a timeout is 'unknown', which fails.")
@click.option("--only", default=None, metavar="TEXT", help="Only obligations whose action or invariant contains TEXT.")
def prove(as_json: bool, timeout_ms: int, only: str | None) -> None:
    """Prove the counter invariants inductive for unbounded parameters (z3)."""
    from asyncspec.proofs.prove_command import prove_main
    from asyncspec.proofs.request_abstraction import ACTIONS, VARIANTS
    from asyncspec.proofs.prover import obligations

    if only is not None:
        labels = [f"{v.name} {name} x {inv.name}" for v in VARIANTS for name, inv in obligations(v, ACTIONS)]
        if not any(only in label for label in labels):
            words = {w for label in labels for w in label.split() if w != "x"}
            fail_usage(f"--only '{only}' matches no obligation{nearest(only, words)}; it selects by a part of "
                       f"'VARIANT ACTION x INVARIANT' (see docs/proofs.md)")
    sys.exit(prove_main(as_json, timeout_ms, only))


@main.command()
@click.argument("other", type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True, help='Print {"base", "other", "items": [...]}.')
def drift(other: Path, as_json: bool) -> None:
    """Which vLLM functions the spec and drivers depend on changed in OTHER
    (a vLLM wheel, sdist or source folder) against the installed vLLM.
    Exit 0 nothing drifted, 1 drift found, 2 bad input."""
    from asyncspec.fidelity.drift_command import drift_main

    sys.exit(drift_main(other, as_json))


# ---------------------------------------------------------------- demo, configs, sweep


@main.command()
def demo() -> None:
    """Replay the explainer's cases: the max_tokens guard, and EOS wasting D - 1 steps at depth 2 and 3."""
    from asyncspec.checker.demo import CASES, case_holds, run_case

    all_hold = True
    for case in CASES:
        trace, scheduled, wasted = run_case(case)
        out.print(trace_table(case.config, trace.states(), title=case.title))
        holds = case_holds(case, scheduled, wasted)
        all_hold &= holds
        expect = f"expected {case.expect_wasted} wasted"
        if case.expect_scheduled_tokens is not None:
            expect += f", {case.expect_scheduled_tokens} tokens"
        out.print(f"  scheduled tokens: {scheduled}; wasted forward passes: {wasted} "
                  f"({expect}: {'as claimed' if holds else 'NOT as claimed'})\n")
    sys.exit(EXIT_OK if all_hold else EXIT_VIOLATION)


@main.command(name="configs")
def list_configs() -> None:
    """List the named configs, their set and pinned state counts."""
    manifest = cfgs.load_manifest()
    for name, cfg in cfgs.named_configs().items():
        pin = manifest.get(name, {})
        out.print(f"{name:26s} {cfg.extra.get('set', 'default'):8s} "
                  f"{pin.get('distinct_states', '?'):>8} states  depth {pin.get('depth', '?'):>3}  "
                  f"{cfg.description}", markup=False)


@main.command()
@click.option("--requests", default="3x2,2x2", show_default=True, help="PROMPTxMAX_TOKENS, comma-separated.")
@click.option("--depth", default="1,2,3", show_default=True)
@click.option("--blocks", default="3,4", show_default=True)
@click.option("--defer", default="off,on", show_default=True)
@click.option("--stale", default="deliver,drop", show_default=True)
@click.option("--json", "as_json", is_flag=True)
def sweep(requests: str, depth: str, blocks: str, defer: str, stale: str, as_json: bool) -> None:
    """Check every combination of a few settings on one set of requests."""
    configs = sweep_configs(requests, depth, blocks, defer, stale)
    results: list[CheckResult] = []
    with ProgressLine("sweep", quiet=as_json) as line:
        for i, c in enumerate(configs):
            def report(states: int, frontier: int, depth: int, elapsed: float) -> None:
                line.update(f"config {i + 1}/{len(configs)} {c.name}: {states:,} states "
                            f"({rate(states, elapsed)}), queue {frontier:,}, depth {depth}")
            line.update(f"config {i + 1}/{len(configs)} {c.name}")
            try:
                results.append(explore(c, progress=None if line.mode == "off" else report))
            except KeyboardInterrupt:
                break
            if results[-1].partial_reason.startswith("interrupted"):
                break
    stopped = len(results) < len(configs) or any(r.partial for r in results)
    code = _exit_code([_as_plain(r) for r in results])
    code = EXIT_PARTIAL if stopped and code == EXIT_OK else code
    if as_json:
        print(json.dumps({"schema_version": JSON_SCHEMA_VERSION,
                          "result": {EXIT_OK: "ok", EXIT_PARTIAL: "partial"}.get(code, "violation"),
                          "interrupted": stopped, "not_checked": [c.name for c in configs[len(results):]],
                          "configs": [_result_json(r) for r in results]}, indent=2))
    else:
        for r in results:
            bad = ", ".join(v.property for v in r.violations) or "-"
            out.print(f"{r.name:30s} {r.distinct_states:8d} states depth {r.depth:3d} {r.seconds:6.2f}s  violations: {bad}")
        if stopped:
            out.print(f"PARTIAL: interrupted; {len(configs) - len(results)} of {len(configs)} configs not checked "
                      "to the end")
    sys.exit(code)


@main.command()
@click.option("--strategy", type=Choice(["v1", "v2", "neuron", "all"]), default="all", show_default=True,
              help="Worker strategy: V1 GPU runner, Model Runner V2, or the Neuron runner.")
@click.option("--mutants", "with_mutants", is_flag=True, help="Also check that every worker mutant is killed.")
@click.option("--json", "as_json", is_flag=True)
def worker(strategy: str, with_mutants: bool, as_json: bool) -> None:
    """Check the worker side (token feedback) composed with the scheduler spec."""
    from asyncspec.checker import joint, worker_mutants

    rows = [e for e in joint.EXPECTATIONS if strategy in ("all", e.strategy)]
    results = [(e, joint.run_expectation(e)) for e in rows]
    mutants = [r for r in worker_mutants.check_worker_mutants()
               if strategy in ("all", worker_mutants.MUTANTS_BY_NAME[r.name].strategy)] if with_mutants else []
    ok = all(r.ok for _, r in results) and all(m.killed for m in mutants)
    if as_json:
        print(json.dumps({"schema_version": JSON_SCHEMA_VERSION, "result": "ok" if ok else "violation",
                          "configs": [_result_json(r) for _, r in results],
                          "mutants": [m.to_json() for m in mutants]}, indent=2))
    else:
        for e, r in results:
            note = f" (expected finding: {e.expect_violation})" if e.expect_violation else ""
            out.print(f"{r.name:32s} {'ok' if r.ok else 'FAIL':4s} {r.distinct_states:6d} states "
                      f"depth {r.depth:3d}{note}", markup=False)
            for v in r.violations:
                if v.property != e.expect_violation:
                    out.print(f"  VIOLATION: {v.property}: {v.message}", markup=False)
            for w in r.vacuous:
                out.print(f"  vacuous: witness '{w}' never reached", markup=False)
        for m in mutants:
            out.print(f"{'killed' if m.killed else 'SURVIVED':8s} {m.name:40s} {m.property}", markup=False)
    sys.exit(EXIT_OK if ok else EXIT_VIOLATION)


def _as_plain(r: CheckResult) -> CheckResult:
    r.required_witnesses = ()
    return r


if __name__ == "__main__":
    main()
