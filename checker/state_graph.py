"""The explored state graph, shared by every search strategy and the graph checks.

States by index, how each was first reached (parent and action, so a path to
any state is a shortest trace under BFS), and the edges the *eventually*
properties need (``checker/graph.py``).
"""
from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

S = TypeVar("S", bound=Hashable)  # a state
A = TypeVar("A")  # an action label


@dataclass
class StateGraph(Generic[S, A]):
    """The explored graph: states by index, how each was first reached, edges.

    Generic over the state and action types: ``checker/bfs.py``'s search stores
    each model's fingerprints (``checker/model.py``): spec states for the
    scheduler spec, joint states for scheduler + worker, canonical
    abstractions for the refinement check.
    """

    states: list[S] = field(default_factory=list)
    index: dict[S, int] = field(default_factory=dict)
    parent: list[int] = field(default_factory=list)  # -1 for initial states
    via: list[A | None] = field(default_factory=list)
    depth: list[int] = field(default_factory=list)
    edges: list[list[int]] = field(default_factory=list)

    def add(self, s: S, parent: int, action: A | None, depth: int) -> tuple[int, bool]:
        """Index of ``s``, and whether it is new."""
        known = self.index.get(s)
        if known is not None:
            return known, False
        i = len(self.states)
        self.index[s] = i
        self.states.append(s)
        self.parent.append(parent)
        self.via.append(action)
        self.depth.append(depth)
        self.edges.append([])
        return i, True

    def path_to(self, i: int) -> tuple[int, list[A]]:
        """The initial state's index and the actions leading to state ``i``."""
        actions: list[A] = []
        while self.parent[i] >= 0:
            a = self.via[i]
            assert a is not None
            actions.append(a)
            i = self.parent[i]
        return i, actions[::-1]
