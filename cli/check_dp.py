"""``asyncspec check`` on data parallelism's wave model: the DP configs (``configs/dp/``) it names.

A DP config (``checker/dp_model.py``) is explored by the plain search over ``spec/dp.py``; its
report, its JSON entry and its trace files (``CONFIG.PROPERTY.trace.json``, the DP trace format:
``asyncspec_dp_trace``) follow the scheduler configs' shape.
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from asyncspec.cli.common import out

if TYPE_CHECKING:
    from asyncspec.checker.dp_model import DPTrace
    from asyncspec.checker.result import CheckResult
    from asyncspec.spec.dp import DPAction, DPConfig, DPState


def split_dp(names: tuple[str, ...]) -> tuple[list[DPConfig], tuple[str, ...]]:
    """The DP configs ``-c`` names (a DP config's name, or the set ``dp``) and the other names."""
    from asyncspec.checker.dp_model import resolve_dp

    found, rest = resolve_dp(names)
    return found, tuple(rest)


def check_dp(cfg: DPConfig, max_states: int | None) -> tuple[CheckResult, dict[str, Any]]:
    """Explore ``cfg``; its result and the cost fields of its JSON entry."""
    from asyncspec.checker.dp_model import explore_dp
    from asyncspec.checker.measure import measured

    m = measured(lambda: explore_dp(cfg, max_states=max_states), lambda _: None)
    return m.value, {"explorer": "plain (DP model)", "cpu_seconds": round(m.cpu_seconds, 3),
                     "bytes_per_state": round(m.bytes_held / max(m.value.distinct_states, 1), 1)}


def save_dp_traces(r: CheckResult, trace_dir: Path) -> list[str]:
    """Each violation's DP trace file; the paths written (a failed write is noted for the run's end)."""
    from asyncspec.checker.atomic import WriteError, note_unsaved, write_atomically
    from asyncspec.checker.dp_model import DPTrace, dp_trace_json

    from asyncspec.cli.check_extras import trace_path

    paths = []
    for v in r.violations:
        if not isinstance(v.trace, DPTrace):
            continue
        path = trace_path(trace_dir, r.name, v.property)
        try:
            write_atomically(path, dp_trace_json(v.trace))
        except WriteError as exc:
            note_unsaved(exc)
            continue
        paths.append(str(path))
    return paths


def print_dp_result(r: CheckResult, saved: list[str]) -> None:
    """The text report of one DP config, with each violation's trace as a table of the ranks."""
    from asyncspec.checker.dp_model import DPTrace

    status = "ok" if r.ok else ("PARTIAL" if r.partial else "FAIL")
    out().print(f"[bold]{r.name}[/bold]: {status} — {r.distinct_states} distinct states, depth {r.depth}, "
                f"{r.transitions} transitions, {r.seconds:.2f}s")
    for w in r.vacuous:
        out().print(f"  vacuous: witness '{w}' was never reached")
    for v in r.violations:
        out().print(f"  VIOLATION: {v.property}: {v.message} (trace of {len(getattr(v.trace, 'dp_actions', []))} "
                    f"actions)", markup=False)
        if isinstance(v.trace, DPTrace):
            for line in dp_trace_lines(v.trace):
                out().print("    " + line, markup=False)
    for path in saved:
        out().print(f"  trace saved: {path}", markup=False)


def dp_trace_lines(trace: DPTrace) -> list[str]:
    """One line per step: the action, then each rank's work / running / step counter / wave."""
    return dp_row_lines(trace.dp_states())


def dp_row_lines(rows: list[tuple[DPAction | None, DPState, frozenset[str]]]) -> list[str]:
    """``dp_trace_lines`` of rows already re-executed (``DPTrace.dp_states``)."""
    lines = []
    for action, s, _ in rows:
        ranks = "  ".join(f"rank{i}: work={r.work} {'run' if r.running else 'idle'}{' sync' if r.at_sync else ''} "
                          f"step={r.step_counter} wave={r.current_wave}" for i, r in enumerate(s.ranks))
        lines.append(f"{str(action) if action else 'init':<19} {ranks}")
    return lines
