"""Sample traces of passing runs: the shortest run that exercises a witness (``spec/events.py``).

A reviewer who asks "what does a stale delivery look like?" gets a run that
shows one, in the explorer, with the step that exercises it marked.

>>> t = witness_trace(named_configs()["async-d2"], "stale_delivery")
>>> t is not None and t.violated is None and len(t.actions) > 0
True
"""
from __future__ import annotations

from collections import deque
from typing import Any

from asyncspec.checker.configs import named_configs  # noqa: F401 (the doctest)
from asyncspec.checker.trace import Trace
from asyncspec.spec import engine
from asyncspec.spec.config import SpecConfig
from asyncspec.spec.engine import Action
from asyncspec.spec.state import EngineState, initial_states

from asyncspec.explorer.checker_view import checker_view

SEARCH_LIMIT = 200_000  # states searched before giving up on a witness


def witness_trace(cfg: SpecConfig, event: str) -> Trace | None:
    """The shortest trace whose last action exercises ``event`` (``None`` if unreachable)."""
    parents: dict[EngineState, tuple[EngineState, Action] | None] = {}
    queue: deque[EngineState] = deque()
    for s in initial_states(cfg):
        parents.setdefault(s, None)
        queue.append(s)
    while queue and len(parents) < SEARCH_LIMIT:
        s = queue.popleft()
        for t in engine.next_states(cfg, s):
            if event in t.events:
                return _trace(cfg, parents, s, [t.action])
            if t.state not in parents:
                parents[t.state] = (s, t.action)
                queue.append(t.state)
    return None


def _trace(cfg: SpecConfig, parents: dict[EngineState, tuple[EngineState, Action] | None], s: EngineState,
           tail: list[Action]) -> Trace:
    actions = tail
    link = parents[s]
    while link is not None:
        s, action = link
        actions.append(action)
        link = parents[s]
    return Trace(cfg, tuple(p.eos_position for p in s.params), actions[::-1])


def witness_view(cfg: SpecConfig, event: str) -> dict[str, Any] | None:
    """The explorer view of ``witness_trace``, the witnessing step marked."""
    trace = witness_trace(cfg, event)
    if trace is None:
        return None
    view = checker_view(trace, f"{cfg.name}: a run that reaches '{event}'")
    view["violated"] = {"name": event, "kind": "witness", "step": len(trace.actions), "source": "spec/events.py",
                        "why": "a sample of a passing run: the shortest one that exercises this behaviour",
                        "message": f"the last step exercises '{event}'", "cites": []}
    return view
