"""``asyncspec check`` (with ``--show-witness``), ``configs``, ``sweep`` and ``demo``: the model checker's commands.

Listed by ``cli/main.py``; what a command needs beyond click is imported when it runs.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import click

from asyncspec.cli.common import EXIT_OK, EXIT_PARTIAL, EXIT_VIOLATION, fail_usage, out
from asyncspec.cli.contract import Choice, ContractCommand

if TYPE_CHECKING:
    from asyncspec.checker.bfs import Progress
    from asyncspec.checker.check_run import Checked
    from asyncspec.checker.progress import ProgressLine
    from asyncspec.checker.result import CheckResult
    from asyncspec.spec.config import SpecConfig


def _resolve_configs(names: tuple[str, ...]) -> list[SpecConfig]:
    from asyncspec.checker import configs as cfgs
    from asyncspec.spec.config import ConfigError

    try:
        found = cfgs.resolve_all(names or ("default",))
    except ConfigError as exc:
        fail_usage(str(exc))
    if not found:
        fail_usage("no config selected")
    return found


def _dp_split(names: tuple[str, ...]) -> tuple[list[Any], tuple[str, ...]]:
    """The DP configs among ``names`` (``cli/check_dp.py``) and the rest; a bad DP file is one line."""
    from asyncspec.spec.dp import DPConfigError

    from asyncspec.cli.check_dp import split_dp

    try:
        return split_dp(names)
    except DPConfigError as exc:
        fail_usage(str(exc))


def _progress_printer(line: ProgressLine) -> Progress | None:
    from asyncspec.checker.progress import rate

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
    from asyncspec.checker import interrupt
    from asyncspec.checker.check_run import Checked
    from asyncspec.checker.result import CheckResult

    return Checked(CheckResult(cfg.name, partial=True, partial_reason=interrupt.reason(),
                               expect_violation=cfg.expect_violation), explorer, 0.0, 0.0)


def _print_result(r: CheckResult, cfg: SpecConfig, trace_dir: Path, saved: list[str]) -> None:
    """The text report of one config; ``saved``: the trace files written (``check_extras.saved_traces``)."""
    from asyncspec.checker.table import trace_table

    from asyncspec.cli.check_extras import trace_path

    status = "ok" if r.ok else ("PARTIAL" if r.partial else "FAIL")
    out().print(f"[bold]{r.name}[/bold]: {status} — {r.distinct_states} distinct states, depth {r.depth}, "
                f"{r.transitions} transitions, {r.seconds:.2f}s")
    if r.partial:
        out().print(f"  partial: {r.partial_reason}; only {r.distinct_states} states were covered")
    for w in r.vacuous:
        out().print(f"  vacuous: witness '{w}' was never reached")
    for v in r.violations:
        expected = v.property == r.expect_violation
        label = "expected finding" if expected else "VIOLATION"
        out().print(f"  {label}: {v.property}: {v.message} (trace of {len(v.trace.actions)} actions)")
        path = trace_path(trace_dir, r.name, v.property)
        out().print(trace_table(cfg, v.trace.states(), title=f"{r.name}: {v.property}"))
        if str(path) in saved:
            out().print(f"  replay with: asyncspec replay {path}")
        else:
            out().print(f"  not saved: {path} could not be written (see the last line)", markup=False)


@click.command(cls=ContractCommand)
@click.option("--config", "-c", "names", multiple=True, metavar="NAME|SET|FILE",
              help="A named config, a set (default, slow, finding; dp: the DP wave model) or a TOML file; repeatable.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of tables.")
@click.option("--max-states", type=click.IntRange(min=1), default=None, help="Stop a config after N states.")
@click.option("--no-symmetry", is_flag=True, help="Explore concrete states (no block-id reduction).")
@click.option("--trace-dir", type=click.Path(file_okay=False, path_type=Path),
              default=Path("asyncspec-traces"), show_default=True, help="Where violation traces are saved.")
@click.option("--update-manifest", is_flag=True, help="Pin the measured state counts in configs/manifest.json.")
@click.option("--explorer", type=Choice(["compiled", "fast", "plain"]), default="compiled", show_default=True,
              help="compiled: the spec's C encoding where it covers the config, else fast; fast: packed store, "
                   "memoized checks; plain: the original BFS (docs/explorer.md).")
@click.option("--jobs", "-j", type=int, default=1, show_default=True,
              help="Search on K threads (compiled explorer) or expand states in K processes (fast explorer).")
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
    from asyncspec.checker import interrupt
    from asyncspec.checker.check_run import RunError, check_config, settings
    from asyncspec.checker.progress import ProgressLine
    from asyncspec.checker.trace import folder_problem

    from asyncspec.cli.check_dp import check_dp, print_dp_result, save_dp_traces
    from asyncspec.cli.check_extras import saved_traces, show_witness_main, unsaved_messages

    unsaved_messages()  # a run starts with no failed write (an earlier run in this process answered its own)

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
    trace_files: list[list[str]] = []
    dp_configs, names = _dp_split(names)
    for dp_cfg in dp_configs:  # data parallelism's wave model (cli/check_dp.py)
        r, cost = check_dp(dp_cfg, max_states)
        results.append(r)
        costs.append(cost)
        trace_files.append(save_dp_traces(r, trace_dir))
        if not as_json:
            print_dp_result(r, trace_files[-1])
    for cfg in (_resolve_configs(names) if names or not dp_configs else []):
        with ProgressLine(f"check {cfg.name}", quiet=as_json) as line:
            try:
                checked = check_config(cfg, run, progress=_progress_printer(line))
            except RunError as exc:
                fail_usage(str(exc))
            except KeyboardInterrupt:
                checked = _interrupted(cfg, explorer)
        with interrupt.catching():  # a signal while the findings are saved: the flag; the files stay whole
            r = checked.result
            costs.append(checked.to_json())
            results.append(r)
            trace_files.append(saved_traces(r, trace_dir))  # saved as its config ends, in both modes
            if not as_json:
                _print_result(r, cfg, trace_dir, trace_files[-1])
        if (r.partial and r.partial_reason.startswith("interrupted")) or interrupt.requested():
            break
    with interrupt.catching():  # the report is printed whole whatever signal comes now
        _report(results, costs, trace_files, as_json, update_manifest)


def _report(results: list[CheckResult], costs: list[dict[str, Any]], trace_files: list[list[str]],
            as_json: bool, update_manifest: bool) -> NoReturn:
    """``check``'s report and exit; a signal that came after a config's search makes it partial."""
    from asyncspec.checker import interrupt
    from asyncspec.checker.schema import JSON_SCHEMA_VERSION

    from asyncspec.cli.check_extras import end_code, exit_code, result_json, update_manifest_from, \
        unsaved_messages

    code = exit_code(results)
    if code == EXIT_OK and interrupt.requested():
        code = EXIT_PARTIAL  # a signal after the last poll, or before every config ran
    if update_manifest:
        update_manifest_from(results, code)
    unsaved = unsaved_messages()  # traces, pages, checkpoints, the manifest: answered once the report is out
    if as_json:
        result = {EXIT_OK: "ok", EXIT_PARTIAL: "partial"}.get(code, "violation")
        configs = [result_json(r) | cost | {"trace_files": files}
                   for r, cost, files in zip(results, costs, trace_files)]
        stopped = any(r.partial_reason.startswith("interrupted") for r in results) or interrupt.requested()
        print(json.dumps({"schema_version": JSON_SCHEMA_VERSION, "result": result,
                          "trace_files": [f for c in configs for f in c["trace_files"]], "interrupted": stopped,
                          "configs": configs, **({"unsaved_files": unsaved} if unsaved else {})}, indent=2))
    else:
        out().print(f"{sum(r.ok for r in results)}/{len(results)} configs ok")
    sys.exit(end_code(code, unsaved))


@click.command(cls=ContractCommand)
def demo() -> None:
    """Replay the explainer's cases: the max_tokens guard, and EOS wasting D - 1 steps at depth 2 and 3."""
    from asyncspec.checker.demo import CASES, case_holds, run_case
    from asyncspec.checker.table import trace_table

    all_hold = True
    for case in CASES:
        trace, scheduled, wasted = run_case(case)
        out().print(trace_table(case.config, trace.states(), title=case.title))
        holds = case_holds(case, scheduled, wasted)
        all_hold &= holds
        expect = f"expected {case.expect_wasted} wasted"
        if case.expect_scheduled_tokens is not None:
            expect += f", {case.expect_scheduled_tokens} tokens"
        out().print(f"  scheduled tokens: {scheduled}; wasted forward passes: {wasted} "
                    f"({expect}: {'as claimed' if holds else 'NOT as claimed'})\n")
    sys.exit(EXIT_OK if all_hold else EXIT_VIOLATION)


@click.command(name="configs", cls=ContractCommand)
def list_configs() -> None:
    """List the named configs, their set and pinned state counts.

    The DP wave model's configs (set dp) come last."""
    from asyncspec.checker import configs as cfgs
    from asyncspec.checker.dp_model import DP_SET, dp_configs

    manifest = cfgs.load_manifest()
    rows = [(name, str(cfg.extra.get("set", "default")), cfg.description) for name, cfg in cfgs.named_configs().items()]
    rows += [(name, DP_SET, cfg.description) for name, cfg in dp_configs().items()]
    for name, config_set, description in rows:
        pin = manifest.get(name, {})
        out().print(f"{name:26s} {config_set:8s} "
                    f"{pin.get('distinct_states', '?'):>8} states  depth {pin.get('depth', '?'):>3}  "
                    f"{description}", markup=False)


@click.command(cls=ContractCommand)
@click.option("--requests", default="3x2,2x2", show_default=True, help="PROMPTxMAX_TOKENS, comma-separated.")
@click.option("--depth", default="1,2,3", show_default=True)
@click.option("--blocks", default="3,4", show_default=True)
@click.option("--defer", default="off,on", show_default=True)
@click.option("--stale", default="deliver,drop", show_default=True)
@click.option("--json", "as_json", is_flag=True)
def sweep(requests: str, depth: str, blocks: str, defer: str, stale: str, as_json: bool) -> None:
    """Check every combination of a few settings on one set of requests."""
    from asyncspec.checker import interrupt
    from asyncspec.checker.bfs import explore
    from asyncspec.checker.progress import ProgressLine, rate

    from asyncspec.cli.check_extras import sweep_configs

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
                interrupt.pause_point("mid-run")  # a test signals here (checker/interrupt.py)
            except KeyboardInterrupt:
                break
            if results[-1].partial_reason.startswith("interrupted"):
                break
    with interrupt.catching():  # the report is printed whole whatever signal comes now
        _sweep_report(configs, results, as_json)


def _sweep_report(configs: list[SpecConfig], results: list[CheckResult], as_json: bool) -> NoReturn:
    """``sweep``'s report and exit; any signal during the sweep makes it partial."""
    from asyncspec.checker import interrupt
    from asyncspec.checker.schema import JSON_SCHEMA_VERSION

    from asyncspec.cli.check_extras import as_plain, exit_code, result_json

    stopped = len(results) < len(configs) or any(r.partial for r in results) or interrupt.requested()
    code = exit_code([as_plain(r) for r in results])
    code = EXIT_PARTIAL if stopped and code == EXIT_OK else code
    if as_json:
        print(json.dumps({"schema_version": JSON_SCHEMA_VERSION,
                          "result": {EXIT_OK: "ok", EXIT_PARTIAL: "partial"}.get(code, "violation"),
                          "interrupted": stopped, "not_checked": [c.name for c in configs[len(results):]],
                          "configs": [result_json(r) for r in results]}, indent=2))
    else:
        for r in results:
            bad = ", ".join(v.property for v in r.violations) or "-"
            out().print(f"{r.name:30s} {r.distinct_states:8d} states depth {r.depth:3d} {r.seconds:6.2f}s  "
                        f"violations: {bad}")
        if stopped:
            out().print(f"PARTIAL: interrupted; {len(configs) - len(results)} of {len(configs)} configs not checked "
                        "to the end")
    sys.exit(code)
