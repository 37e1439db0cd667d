"""A shortest sample trace reaching a witness event (``asyncspec check --show-witness NAME``).

Breadth-first over the canonical states (as ``bfs.py``), stopping at the first
transition that emits the event; the trace names only actions, so it replays
on the concrete spec like any checker trace.

Example:
    >>> from asyncspec.spec.config import SpecConfig
    >>> cfg = SpecConfig(name="one", requests=((3, 2),), token_budget=2, num_blocks=3, block_size=2)
    >>> trace = witness_trace(cfg, "chunked_prefill")
    >>> trace is not None and "chunked_prefill" in trace.states()[-1][2]
    True
"""
from __future__ import annotations

from collections import deque

from asyncspec.spec import engine
from asyncspec.spec.config import SpecConfig
from asyncspec.spec.engine import Action
from asyncspec.spec.state import EngineState, initial_states

from asyncspec.checker.state_graph import StateGraph
from asyncspec.checker.symmetry import canonical
from asyncspec.checker.trace import Trace


def witness_trace(cfg: SpecConfig, event: str, max_states: int | None = None,
                  stopped: list[bool] | None = None) -> Trace | None:
    """A shortest trace whose last action emits ``event``, or None when no reachable step does
    (within ``max_states`` states, when given: then ``True`` is appended to ``stopped``)."""
    graph: StateGraph[EngineState, Action] = StateGraph()
    frontier: deque[int] = deque()
    for s in initial_states(cfg):
        i, new = graph.add(canonical(s), -1, None, 0)
        if new:
            frontier.append(i)
    while frontier:
        i = frontier.popleft()
        for t in engine.next_states(cfg, graph.states[i]):
            if event in t.events:
                root, actions = graph.path_to(i)
                eos = tuple(p.eos_position for p in graph.states[root].params)
                return Trace(cfg, eos, [*actions, t.action], violated=None)
            j, new = graph.add(canonical(t.state), i, t.action, graph.depth[i] + 1)
            if new:
                frontier.append(j)
        if max_states is not None and len(graph.states) >= max_states and frontier:
            if stopped is not None:
                stopped.append(True)
            return None
    return None
