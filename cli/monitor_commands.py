"""The live monitor's part of the CLI: ``asyncspec replay`` of a monitor window file.

``cli/replay_command.py``'s ``replay`` hands a window file to ``replay_monitor_window``;
a window (``checker/window_trace.py``) replays here: the spec re-executes the
window from its start state, every always-property is re-checked in every
state, and the final state is compared with the engine's recorded values.
Exit 0 when the spec agrees, 1 on the divergence, 2 on an unusable file.
"""
from __future__ import annotations

import json
from pathlib import Path

from asyncspec.checker.schema import JSON_SCHEMA_VERSION, loads_json
from asyncspec.checker.trace import TraceError
from asyncspec.checker.window_trace import is_window, load_window, replay_window
from asyncspec.spec.config import ConfigError

from asyncspec.cli.common import EXIT_OK, EXIT_VIOLATION, fail_usage, out


def is_monitor_window(path: Path) -> bool:
    """``path`` is a monitor window file (anything unreadable is left to the caller)."""
    try:
        return bool(is_window(loads_json(path.read_text())))
    except (OSError, ValueError):
        return False


def replay_monitor_window(path: Path, as_json: bool) -> int:
    """Re-check one monitor window; the exit code."""
    try:
        trace = load_window(path)
        failures = replay_window(trace)
    except (TraceError, ConfigError) as exc:
        fail_usage(str(exc))
    if as_json:
        print(json.dumps({"schema_version": JSON_SCHEMA_VERSION, "trace": str(path), "kind": "monitor-window",
                          "steps": len(trace.actions),
                          "recorded": trace.message, "failures": failures}, indent=2))
    else:
        out().print(f"replay of monitor window {path}: {len(trace.actions)} spec actions from the window start")
        out().print(f"  the monitor saw: {trace.message}")
        for line in failures:
            out().print(f"  {line}")
        if not failures:
            out().print("  the spec agrees with the engine's recorded values: no divergence")
    return EXIT_VIOLATION if failures else EXIT_OK
