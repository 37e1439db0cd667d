"""Read any trace file the tool writes and turn it into the explorer's view.

A checker trace (``"asyncspec_trace"``), with or without a loop
(``"loop_start"``), or a fuzz divergence file (``"asyncspec_fuzz_replay"``);
a DP trace (``"asyncspec_dp_trace"``) has no view yet and is refused in one line;
anything else is an ``ExplorerError`` with one line saying what is wrong.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from asyncspec.checker.schema import InputLimitError, loads_json
from asyncspec.checker.trace import Trace, TraceError
from asyncspec.spec.config import ConfigError
from asyncspec.statemachine_tests.core.replay_file import replay_problem

from asyncspec.explorer.checker_view import checker_view
from asyncspec.explorer.fuzz_view import fuzz_view
from asyncspec.explorer.graph_view import graph_svg
from asyncspec.explorer.page import write_page


class ExplorerError(ValueError):
    """A file the explorer cannot show (one line)."""


def read_json(path: Path) -> dict[str, Any]:
    try:
        data = loads_json(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ExplorerError(f"cannot read {path}: {exc.strerror}") from exc
    except InputLimitError as exc:
        raise ExplorerError(f"{path}: {exc}; give a file asyncspec wrote") from exc
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ExplorerError(f"{path} is not valid JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise ExplorerError(f"{path} holds no trace: expected a JSON object")
    return data


def _loop_start(data: dict[str, Any]) -> int | None:
    value = data.get("loop_start", (data.get("lasso") or {}).get("loop_start") if isinstance(
        data.get("lasso"), dict) else None)
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool):
        raise ExplorerError(f"loop_start must be a step number, got {value!r}")
    return value


def view_of(data: dict[str, Any], title: str, with_graph: bool = True) -> dict[str, Any]:
    """The view of a parsed trace file of any kind."""
    if "asyncspec_dp_trace" in data:  # checker/dp_replay.py
        raise ExplorerError(f"{title} is a DP trace: DP traces have no HTML view yet; "
                            "replay it without --html for its table of ranks")
    try:
        if "asyncspec_trace" in data:
            trace = Trace.from_json(data)
            view = checker_view(trace, title, _loop_start(data))
            if with_graph:
                view["graph_svg"] = graph_svg(trace.config, trace.eos_positions, [s["action"] for s in view["steps"][1:]])
            return view
        if "asyncspec_fuzz_replay" in data:
            if data.get("target", "reference") in ("reference", "vllm", "vllm-engine"):  # the formats of replay_file.py
                problem = replay_problem(data)
                if problem:
                    raise ExplorerError(f"{title}: corrupt replay file: {problem}")
            return fuzz_view(data, title)
    except (TraceError, ConfigError, ValueError, TypeError, KeyError) as exc:
        raise ExplorerError(f"{title}: {exc}") from exc
    raise ExplorerError(f"{title} is neither a checker trace nor a fuzz replay file "
                        "(no 'asyncspec_trace' or 'asyncspec_fuzz_replay' key)")


def html_for(path: Path, out: Path) -> dict[str, Any]:
    """Write the explorer page of trace file ``path`` to ``out``; returns the view.  ``ExplorerError`` if the
    file cannot be shown, ``WriteError`` (``checker/atomic.py``) if the page cannot be written."""
    view = view_of(read_json(path), str(path))
    write_page(view, out)
    return view


def html_path(trace_path: Path) -> Path:
    """``x.trace.json`` -> ``x.trace.html`` (beside it)."""
    return trace_path.with_suffix(".html")
