"""``asyncspec replay``: a saved trace re-executed on the spec, or a fuzz file on its engine.

Listed by ``cli/main.py``; what a replay needs beyond click is imported when it runs.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from asyncspec.cli.common import EXIT_OK, EXIT_VIOLATION, fail_usage, out
from asyncspec.cli.contract import Choice, ContractCommand


def fuzz_file_target(path: Path) -> str | None:
    """The target a fuzz replay file names (``replay FILE`` needs no ``--target``), or None."""
    from asyncspec.checker.schema import loads_json

    try:
        data = loads_json(path.read_text())
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    if isinstance(data, dict) and "asyncspec_torch_replay" in data:
        return "torch"
    if isinstance(data, dict) and "asyncspec_fuzz_replay" in data:
        named = data.get("target")
        return named if named in ("reference", "vllm", "vllm-engine", "sglang") else None
    return None


def _replay_on_engine(trace_file: Path, target: str, as_json: bool, allow_version: bool) -> int:
    """A fuzz file replayed on ``target`` beside the spec; the exit code."""
    if target == "vllm-engine":
        from asyncspec.cli.mrv2_reexec import reexec_for_mrv2, replay_runner

        if replay_runner(trace_file) == "mrv2":
            reexec_for_mrv2()
        from asyncspec.statemachine_tests.vllm_engine.engine_fuzz import engine_replay

        return engine_replay(trace_file, allow_version=allow_version, json_out=as_json)
    if target == "sglang":
        from asyncspec.statemachine_tests.sglang.sglang_fuzz import replay_main as replay_sglang

        return replay_sglang(trace_file, as_json)
    if target == "torch":
        from asyncspec.engine.torch.replay import replay_torch

        return replay_torch(trace_file, as_json)
    from asyncspec.statemachine_tests.scheduler.fuzz import replay as replay_fuzz

    return replay_fuzz(trace_file, target, allow_version=allow_version, json_out=as_json)


def _replay_on_spec(trace_file: Path, as_json: bool) -> int:
    """A checker trace re-executed on the spec, every property re-checked; the exit code."""
    from asyncspec.checker.dp_replay import is_dp_trace
    from asyncspec.checker.replay_check import recheck
    from asyncspec.checker.schema import JSON_SCHEMA_VERSION
    from asyncspec.checker.table import trace_table
    from asyncspec.checker.trace import Trace, TraceError, read_json_file
    from asyncspec.spec.config import ConfigError

    try:
        data = read_json_file(trace_file, TraceError)
        if is_dp_trace(data):
            return _replay_dp(trace_file, data, as_json)
        trace = Trace.from_json(data)
        rows = trace.states()
    except (TraceError, ConfigError) as exc:
        fail_usage(str(exc))
    found = recheck(trace, rows)
    if as_json:
        print(json.dumps({"schema_version": JSON_SCHEMA_VERSION, "trace": str(trace_file), "steps": len(rows) - 1,
                          "violated": trace.violated, "reproduced": found.reproduced,
                          "violations": [f.to_json() for f in found.failures]}, indent=2))
    else:
        out().print(trace_table(trace.config, rows, title=f"replay of {trace_file}"))
        for f in found.failures:
            loop = f" (loop: {', '.join(map(str, f.loop))})" if f.loop else ""
            out().print(f"  violated at step {f.step}: {f.property}: {f.message}{loop}", markup=False)
        if found.stale:
            out().print(f"  the trace no longer shows {trace.violated} on this spec: it does not reproduce",
                        markup=False)
        elif not found.failures:
            out().print("  no property is violated along this trace")
    return EXIT_VIOLATION if found.failures else EXIT_OK


def _replay_dp(trace_file: Path, data: object, as_json: bool) -> int:
    """A DP trace (``check -c dp``) re-executed on the DP spec, its mutant applied; the exit code."""
    from asyncspec.checker.dp_mutants import DP_MUTANT_ROWS
    from asyncspec.checker.dp_replay import dp_trace_from_json, replay_dp
    from asyncspec.checker.schema import JSON_SCHEMA_VERSION

    from asyncspec.cli.check_dp import dp_row_lines

    trace = dp_trace_from_json(data)  # a TraceError: exit 2, one line
    rows, found = replay_dp(trace)
    name = trace.dp_config.name if trace.dp_config else ""
    if as_json:
        print(json.dumps({"schema_version": JSON_SCHEMA_VERSION, "trace": str(trace_file), "kind": "dp",
                          "config": name, "mutant": trace.mutant, "steps": len(rows) - 1,
                          "violated": trace.violated, "reproduced": found.reproduced, "stale": found.stale,
                          "violations": [f.to_json() for f in found.failures]}, indent=2))
        return EXIT_VIOLATION if found.failures else EXIT_OK
    out().print(f"replay of {trace_file}: DP config {name}, {len(rows) - 1} actions", markup=False)
    if trace.mutant:
        what = next(row[3] for row in DP_MUTANT_ROWS if row[0] == trace.mutant)
        out().print(f"  with seeded bug {trace.mutant} applied (checker/dp_mutants.py): {what}", markup=False)
    for line in dp_row_lines(rows):
        out().print("    " + line, markup=False)
    for f in found.failures:
        loop = f" (loop: {', '.join(map(str, f.loop))})" if f.loop else ""
        out().print(f"  violated at step {f.step}: {f.property}: {f.message}{loop}", markup=False)
    if found.stale:
        on = f"the DP spec with {trace.mutant}" if trace.mutant else "the DP spec"
        out().print(f"  the trace no longer shows {trace.violated} on {on}: it does not reproduce", markup=False)
    elif not found.failures:
        out().print("  no property is violated along this trace")
    return EXIT_VIOLATION if found.failures else EXIT_OK


@click.command(cls=ContractCommand)
@click.argument("trace_file", type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@click.option("--target", type=Choice(["spec", "reference", "vllm", "vllm-engine", "torch", "sglang"]), default="spec",
              show_default=True,
              help="spec: re-execute a checker trace (a fuzz file replays on the target it names); "
                   "reference/vllm/vllm-engine/torch: re-run a fuzz divergence file.")
@click.option("--allow-version", is_flag=True, help="Drive a vLLM other than the pinned 0.33.0.")
@click.option("--vllm-path", type=click.Path(path_type=Path), default=None, metavar="DIR",
              help="vllm/vllm-engine: replay on the vllm package of this source tree (as fuzz --vllm-path).")
@click.option("--html", "html_out", type=click.Path(dir_okay=False, path_type=Path), default=None, metavar="OUT",
              help="Write the trace explorer page (one HTML file) of any trace to OUT: exit 0 written, 2 not.")
def replay(trace_file: Path, as_json: bool, target: str, allow_version: bool, vllm_path: Path | None,
           html_out: Path | None) -> None:
    """Re-execute a saved trace against the spec (or an engine) and re-check it.

    A checker trace (``asyncspec check``, a DP trace of ``check -c dp`` too)
    replays on the spec and re-checks every property; a fuzz divergence file (``asyncspec fuzz``) replays on
    its target beside the spec and shows where they differ.
    """
    if html_out is not None:
        from asyncspec.explorer.beside import html_main

        sys.exit(html_main(trace_file, html_out))
    if target == "spec":
        target = fuzz_file_target(trace_file) or target
    if vllm_path is not None:
        if target not in ("vllm", "vllm-engine"):
            fail_usage(f"--vllm-path is an option of replay --target vllm and vllm-engine (this file replays on "
                       f"{target}); leave it out")
        from asyncspec.cli.vllm_path import reexec_for_vllm_path

        reexec_for_vllm_path(vllm_path)  # before vLLM is imported
    if target != "spec":
        sys.exit(_replay_on_engine(trace_file, target, as_json, allow_version))
    from asyncspec.cli.monitor_commands import is_monitor_window, replay_monitor_window

    if is_monitor_window(trace_file):
        sys.exit(replay_monitor_window(trace_file, as_json))
    sys.exit(_replay_on_spec(trace_file, as_json))
