"""Re-checking a replayed trace (``asyncspec replay``): every kind of violation replays as itself.

*Always* properties are checked at every step.  The *eventually* properties
(``checker/graph.py``) are decided on the whole state graph, so a trace of
one only leads to where the run goes wrong; the replay decides that state
again from the spec:

* ``no_deadlock``: the last state has no successor and unfinished work;
* ``no_livelock``: the last state lies on a cycle: the trace returns to it
  (a lasso), or a bounded search finds a path back to it (up to symmetry,
  as the checker's graph is built);
* ``deferred_frees_drained``: the last state parks frees and is a dead end
  or on a cycle.

A trace whose violation no longer shows (the spec changed) says so plainly.

Example:
    >>> from asyncspec.checker.configs import named_configs
    >>> from asyncspec.checker.trace import Trace
    >>> t = Trace(named_configs()["sync-d1"], (0, 0), [], violated="no_deadlock")
    >>> recheck(t, t.states()).reproduced
    False
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from asyncspec.spec import engine
from asyncspec.spec.config import SpecConfig
from asyncspec.spec.engine import Action
from asyncspec.spec.properties import ALL_ALWAYS, always_for
from asyncspec.spec.state import EngineState

from asyncspec.checker.graph import unfinished_work
from asyncspec.checker.loop_search import path_back
from asyncspec.checker.symmetry import canonical
from asyncspec.checker.trace import Trace

Row = tuple[Action | None, EngineState, frozenset[str]]
EVENTUALLY = ("no_deadlock", "no_livelock", "deferred_frees_drained")
LOOP_SEARCH_LIMIT = 50_000  # states searched for the way back to a livelock's state


@dataclass
class Failure:
    """One property that fails along the replayed trace."""

    property: str
    step: int
    message: str
    loop: Sequence[object] = field(default_factory=list)  # a livelock: the actions back to ``step``'s state
    loop_start: int | None = None  # a lasso in the trace itself: the step the last state equals

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"property": self.property, "step": self.step, "message": self.message}
        if self.loop or self.loop_start is not None:
            data["loop_start"] = self.loop_start
            data["loop"] = [str(a) for a in self.loop]
        return data


@dataclass
class Recheck:
    """What the replay found, and whether the trace's own violation is among it."""

    violated: str | None
    failures: list[Failure]

    @property
    def reproduced(self) -> bool:
        return self.violated is not None and any(f.property == self.violated for f in self.failures)

    @property
    def stale(self) -> bool:
        """The trace names a violation that this spec no longer shows along it."""
        return self.violated is not None and not self.reproduced


def recheck(trace: Trace, rows: list[Row]) -> Recheck:
    """Every always-property at every step, and the trace's eventually-property at its end."""
    cfg = trace.config
    failures: list[Failure] = []
    props = always_for(cfg) + tuple(ALL_ALWAYS[n] for n in [trace.violated or ""] if n in ALL_ALWAYS)
    for k, (_, s, _) in enumerate(rows):
        for prop in props:
            message = prop.check(cfg, s)
            if message is not None and prop.name not in {f.property for f in failures}:
                failures.append(Failure(prop.name, k, message))
    if trace.violated in EVENTUALLY:
        hit = eventually_at_end(cfg, rows, trace.violated)
        if hit is not None:
            failures.append(hit)
    return Recheck(trace.violated, failures)


def eventually_at_end(cfg: SpecConfig, rows: list[Row], name: str) -> Failure | None:
    """``name`` (an eventually-property) decided at the trace's last state, or None if it holds there."""
    last, k = rows[-1][1], len(rows) - 1
    successors = engine.next_states(cfg, last)
    if name == "no_deadlock":
        why = None if successors else unfinished_work(cfg, last)
        return Failure(name, k, f"deadlock: {why}") if why else None
    loop_start, loop = on_cycle(cfg, rows)
    if name == "no_livelock":
        if loop_start is None and loop is None:
            return None
        where = f"back to step {loop_start}" if loop_start is not None else f"{len(loop or [])} actions return to it"
        return Failure(name, k, f"livelock: from this state the engine can cycle forever ({where})",
                       loop or [], loop_start)
    parked = len(last.deferred_frees)
    if parked and (not successors or loop_start is not None or loop is not None):
        return Failure(name, k, f"{parked} parked free(s) never drained", loop or [], loop_start)
    return None


def on_cycle(cfg: SpecConfig, rows: list[Row]) -> tuple[int | None, list[Action] | None]:
    """(the earlier step the last state equals, or None; else the actions of a way back, or None)."""
    last = canonical(rows[-1][1])
    for k, (_, s, _) in enumerate(rows[:-1]):
        if canonical(s) == last:
            return k, None
    return None, find_loop(cfg, rows[-1][1])


def find_loop(cfg: SpecConfig, start: EngineState) -> list[Action] | None:
    """The shortest path of actions from ``start`` back to a state symmetric to it (bounded search)."""
    return path_back(start, lambda s: [(t.state, t.action) for t in engine.next_states(cfg, s)],
                     LOOP_SEARCH_LIMIT, key=canonical)
