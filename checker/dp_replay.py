"""Replaying a DP trace file (``asyncspec replay``): read it back, re-execute it, re-check it.

A DP trace (``DPTrace.to_json``, written by ``asyncspec check -c dp``) is read against the closed
``DP_TRACE_SCHEMA``: its config back into a ``DPConfig`` (``dp_config_from_dict``), each action back into
a ``DPAction`` (``parse_dp_action``); a trace found on a seeded bug names it (``mutant``, one of
``checker/dp_mutants.py``), and replays with that bug's patches installed.  The re-check mirrors
``checker/replay_check.py``: every *always* property of ``spec/dp_properties.py`` at every step, and the
trace's own *eventually* property decided at its last state from the spec:

* ``dp_wave_completes``: the last state has no successor and is not every wave's end
  (``unfinished_wave``), as the DP model finds it on its graph;
* ``no_livelock``: the last state lies on a cycle: the trace returns to it (a lasso), or a bounded search
  finds the actions back to it (the DP model has no symmetry: states compare as they are).

Every problem is a ``TraceError`` of one line (exit 2): what is wrong and what to change.

Example:
    >>> t = dp_trace_from_json({"asyncspec_dp_trace": 1, "violated": None, "mutant": None,
    ...     "config": {"name": "one", "requests": [[0, 1]]}, "actions": ["add_request r0"]})
    >>> [str(a) for a in t.dp_actions], replay_dp(t)[1].failures
    (['add_request r0'], [])
"""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from asyncspec.spec import dp
from asyncspec.spec.dp import DPAction, DPConfig, DPConfigError, DPState, parse_dp_action
from asyncspec.spec.dp_properties import DP_ALWAYS, DP_PROPERTIES, unfinished_wave

from asyncspec.checker.dp_model import DP_TRACE_VERSION, DPTrace, carrier, dp_config_from_dict
from asyncspec.checker.dp_mutants import DP_MUTANT_ROWS
from asyncspec.checker.loop_search import path_back
from asyncspec.checker.replay_check import Failure, Recheck
from asyncspec.checker.schema import nearest, schema_problem
from asyncspec.checker.trace import TraceError, read_json_file

DP_TRACE_KEY = "asyncspec_dp_trace"
DP_MUTANTS = {row[0]: row[4] for row in DP_MUTANT_ROWS}
"""Each DP mutant's patches, by name (``spec_mutants.applied`` installs them)."""
LOOP_SEARCH_LIMIT = 50_000  # states searched for the way back to a livelock's state

Row = tuple[DPAction | None, DPState, frozenset[str]]

DP_TRACE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": [DP_TRACE_KEY, "config", "actions"],
    "additionalProperties": False,
    "properties": {
        DP_TRACE_KEY: {"type": "integer", "const": DP_TRACE_VERSION},
        "violated": {"enum": [*DP_PROPERTIES, None], "x-hint": "a property of spec/dp_properties.py, or null"},
        "mutant": {"type": ["string", "null"]},
        "config": {"type": "object"},  # checked by dp_model.dp_config_schema()
        "actions": {"type": "array", "items": {"type": "string"}},
    },
}
"""A DP trace file (version 1), as ``DPTrace.to_json`` writes it."""


def is_dp_trace(data: Any) -> bool:
    """Whether parsed JSON ``data`` is (meant as) a DP trace file."""
    return isinstance(data, dict) and DP_TRACE_KEY in data


def dp_trace_from_json(data: Any) -> DPTrace:
    """The ``DPTrace`` of a DP trace file's parsed JSON; ``TraceError`` (one line) if it is unusable."""
    version = data.get(DP_TRACE_KEY) if isinstance(data, dict) else None
    if not isinstance(version, int) or isinstance(version, bool) or version != DP_TRACE_VERSION:
        raise TraceError(f"not a DP trace of version {DP_TRACE_VERSION} ('{DP_TRACE_KEY}' is {version!r}); "
                         f"write it again with this asyncspec's 'asyncspec check -c dp'")
    problem = schema_problem(data, DP_TRACE_SCHEMA)
    if problem:
        raise TraceError(f"corrupt DP trace: {problem}")
    try:
        cfg = dp_config_from_dict(data["config"], origin="DP trace config")
    except DPConfigError as exc:
        raise TraceError(f"corrupt DP trace: {exc}") from None
    actions = []
    for i, text in enumerate(data["actions"], start=1):
        try:
            actions.append(parse_dp_action(text))
        except ValueError as exc:
            raise TraceError(f"corrupt DP trace: action {i}: {exc}; a DP action is one of add_request rN, "
                             f"start_dp_wave rankI, step rankI, all_reduce, end_iteration rankI") from None
    mutant = data.get("mutant")
    if mutant is not None and mutant not in DP_MUTANTS:
        raise TraceError(f"corrupt DP trace: unknown DP mutant '{mutant}'{nearest(mutant, DP_MUTANTS)}; "
                         f"give one of {', '.join(DP_MUTANTS)}, or null to replay on the spec as it is")
    return DPTrace(carrier(cfg), (), [], violated=data.get("violated"), dp_config=cfg, dp_actions=actions,
                   mutant=mutant)


def load_dp_trace(path: Path) -> DPTrace:
    """Read a DP trace file; ``TraceError`` with one line if it is unusable."""
    return dp_trace_from_json(read_json_file(path, TraceError))


@contextmanager
def mutant_applied(name: str | None) -> Iterator[None]:
    """DP mutant ``name``'s patches installed (nothing for None), the originals restored afterwards."""
    from asyncspec.checker.spec_mutants import applied

    with applied(DP_MUTANTS[name] if name is not None else ()):
        yield


def replay_dp(trace: DPTrace) -> tuple[list[Row], Recheck]:
    """Re-execute ``trace`` (its mutant applied) and re-check it; ``TraceError`` where an action is not
    enabled at its step."""
    with mutant_applied(trace.mutant):
        try:
            rows = trace.dp_states()
        except ValueError as exc:
            hint = (f"in the DP spec with mutant {trace.mutant}: the trace does not replay on this asyncspec's "
                    f"spec; write it again" if trace.mutant else "in the DP spec: the trace does not replay; "
                    "a trace found on a seeded bug replays only with its 'mutant' named")
            raise TraceError(f"{exc} {hint}") from None
        return rows, recheck_dp(trace, rows)


def recheck_dp(trace: DPTrace, rows: list[Row]) -> Recheck:
    """Every DP always-property at every step, and the trace's eventually-property at its end."""
    assert trace.dp_config is not None
    cfg = trace.dp_config
    failures: list[Failure] = []
    for k, (_, s, _) in enumerate(rows):
        for prop in DP_ALWAYS:
            message = prop.check(cfg, s)
            if message is not None and prop.name not in {f.property for f in failures}:
                failures.append(Failure(prop.name, k, message))
    hit = eventually_at_end(cfg, rows, trace.violated) if trace.violated else None
    if hit is not None:
        failures.append(hit)
    return Recheck(trace.violated, failures)


def eventually_at_end(cfg: DPConfig, rows: list[Row], name: str) -> Failure | None:
    """DP eventually-property ``name`` decided at the trace's last state (None if it holds there, or if
    ``name`` is an always-property)."""
    last, k = rows[-1][1], len(rows) - 1
    if name == "dp_wave_completes":
        why = None if dp.next_states(cfg, last) else unfinished_wave(cfg, last)
        return Failure(name, k, f"the wave never completes: {why}") if why else None
    if name != "no_livelock":
        return None
    loop_start = next((j for j, (_, s, _) in enumerate(rows[:-1]) if s == last), None)
    loop = None if loop_start is not None else find_loop(cfg, last)
    if loop_start is None and loop is None:
        return None
    where = f"back to step {loop_start}" if loop_start is not None else f"{len(loop or [])} actions return to it"
    return Failure(name, k, f"livelock: from this state the ranks can step forever ({where})", loop or [],
                   loop_start)


def find_loop(cfg: DPConfig, start: DPState) -> list[DPAction] | None:
    """The shortest path of actions from ``start`` back to it (a bounded search), or None."""
    return path_back(start, lambda s: [(t.state, t.action) for t in dp.next_states(cfg, s)], LOOP_SEARCH_LIMIT)
