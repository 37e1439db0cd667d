"""The *eventually* properties, decided on the explored state graph.

In a finite graph, "eventually every request finishes" fails exactly when a
path can end in a state with unfinished work (a deadlock) or loop forever
(a livelock: a reachable cycle).  Cycles are found as strongly connected
components with networkx; a cycle through a state with parked frees also
fails ``deferred_frees_drained``.  The properties read the graph through a
``GraphView``, so the fast explorer decides them with the same function on
its packed arrays.
"""
from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Protocol

import networkx as nx

from asyncspec.spec import request as rq
from asyncspec.spec.algebra import CONCRETE as A
from asyncspec.spec.config import SpecConfig
from asyncspec.spec.properties import Eventually
from asyncspec.spec.state import EngineState, request_name

from asyncspec.checker.state_graph import StateGraph


def unfinished_work(cfg: SpecConfig, s: EngineState) -> str | None:
    """Why ``s`` is not a clean final state, or ``None`` if it is."""
    for i, c in enumerate(s.counters):
        if not rq.is_finished(A, c):
            return f"{request_name(i)} is {rq.STATUS_NAMES[c.status]}, not finished"
    if s.batch_queue:
        return f"{len(s.batch_queue)} step(s) still queued"
    if len(s.free_blocks) != cfg.num_blocks:
        return f"only {len(s.free_blocks)} of {cfg.num_blocks} blocks are free"
    return None


def cycle_nodes(g: StateGraph[Any, Any]) -> list[int]:
    """A representative node of every cycle, smallest index first (deterministic)."""
    dg = nx.DiGraph()
    dg.add_nodes_from(range(len(g.states)))
    for i, succ in enumerate(g.edges):
        dg.add_edges_from((i, j) for j in succ)
    reps = []
    for comp in nx.strongly_connected_components(dg):
        node = min(comp)
        if len(comp) > 1 or dg.has_edge(node, node):
            reps.append(node)
    return sorted(reps)


class GraphView(Protocol):
    """What the *eventually* properties read of an explored graph (a ``StateGraph``, or the
    fast explorer's CSR arrays: ``checker/fast_explorer.py``)."""

    def terminal(self) -> list[int]:
        """The states without successors, in index order."""

    def cycles(self) -> list[int]:
        """A representative of every cycle, in index order (``cycle_nodes``)."""

    def unfinished(self, i: int) -> str | None:
        """``unfinished_work`` of state ``i``."""

    def parked(self, i: int) -> int:
        """How many frees state ``i`` holds parked."""


class StateGraphView:
    """A ``GraphView`` of a ``StateGraph`` of spec states (cycles by networkx)."""

    def __init__(self, cfg: SpecConfig, g: StateGraph[EngineState, Any]) -> None:
        self.cfg, self.g = cfg, g

    def terminal(self) -> list[int]:
        """The states without successors, in index order."""
        return [i for i, succ in enumerate(self.g.edges) if not succ]

    def cycles(self) -> list[int]:
        """``cycle_nodes`` of the graph."""
        return cycle_nodes(self.g)

    def unfinished(self, i: int) -> str | None:
        """``unfinished_work`` of state ``i``."""
        return unfinished_work(self.cfg, self.g.states[i])

    def parked(self, i: int) -> int:
        """How many frees state ``i`` holds parked."""
        return len(self.g.states[i].deferred_frees)


def failures(props: tuple[Eventually, ...], view: GraphView) -> Iterator[tuple[str, int, str]]:
    """Yield (property, state index, message) for each of ``props`` the graph fails.

    Each failure names the smallest-index (so shallowest-first) state showing it.
    """
    names = {p.name for p in props}
    terminal = view.terminal()
    cycles = view.cycles() if names & {"no_livelock", "deferred_frees_drained"} else []
    if "no_deadlock" in names:
        hit = next(((i, why) for i in terminal if (why := view.unfinished(i)) is not None), None)
        if hit:
            yield "no_deadlock", hit[0], f"deadlock: {hit[1]}"
    if "no_livelock" in names and cycles:
        yield "no_livelock", cycles[0], "livelock: from this state the engine can cycle forever"
    if "deferred_frees_drained" in names:
        stuck = [i for i in terminal + cycles if view.parked(i)]
        if stuck:
            i = min(stuck)
            yield "deferred_frees_drained", i, f"{view.parked(i)} parked free(s) never drained"


def check_eventually(
    cfg: SpecConfig, g: StateGraph[EngineState, Any], props: tuple[Eventually, ...]
) -> Iterator[tuple[str, int, str]]:
    """``failures`` of ``props`` on the explored ``g``."""
    return failures(props, StateGraphView(cfg, g))
