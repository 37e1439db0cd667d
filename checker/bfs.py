"""The plain breadth-first search, over any ``Model`` (``checker/model.py``).

BFS order makes the first violation found for each property a shortest
trace.  States are stored once, by the fingerprint of their canonical form
(``Model.canonical``, ``Model.fingerprint``), with a parent pointer and the
action that reached them; the graph's edges are kept for the *eventually*
properties (``Model.eventually``).  Successors are generated in the model's
fixed order, so the same model always gives the same counts and the same
traces.  ``Explorer`` is the search over the scheduler spec
(``checker/spec_model.py``); the joint worker model (``checker/joint.py``) and
the refinement check (``reference/refinement.py``) run ``Search`` on theirs.

Example:
    >>> from asyncspec.spec.config import SpecConfig
    >>> r = explore(SpecConfig(name="tiny", requests=((2, 1),), num_blocks=1, block_size=4))
    >>> r.ok, r.distinct_states > 0
    (True, True)
"""
from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Hashable
from typing import Generic

from asyncspec.spec.config import SpecConfig
from asyncspec.spec.engine import Action
from asyncspec.spec.state import EngineState

from asyncspec.checker import interrupt
from asyncspec.checker.model import A, Model, S
from asyncspec.checker.phases import run_phases
from asyncspec.checker.result import CheckResult, Violation
from asyncspec.checker.spec_model import SpecModel
from asyncspec.checker.state_graph import StateGraph

Progress = Callable[[int, int, int, float], None]  # states, frontier, depth, elapsed seconds


class Search(Generic[S, A]):
    """One breadth-first exploration of ``model``; ``run()`` fills ``result``."""

    def __init__(self, model: Model[S, A], max_states: int | None = None, stop_on_first: bool = True,
                 progress: Progress | None = None, partial_on_interrupt: bool = True) -> None:
        self.model = model
        self.partial_on_interrupt = partial_on_interrupt  # False: Ctrl-C goes on to the caller
        self.max_states = max_states
        self.stop_on_first = stop_on_first
        self.progress = progress
        self.graph: StateGraph[Hashable, A] = StateGraph()
        self.result: CheckResult = model.new_result()
        self._roots: dict[int, S] = {}  # the initial states (canonical), by index: where traces start
        self._stopped = False

    def run(self) -> CheckResult:
        """Explore; Ctrl-C or ``max_states`` end it with a partial result."""
        start = time.perf_counter()
        run_phases(lambda: self._bfs(start), self._check_graph,
                   self._partial if self.partial_on_interrupt else None,
                   lambda: not self.result.partial and not self._stopped, self.model.cyclic_states)
        self.result.seconds = time.perf_counter() - start
        self.result.distinct_states = len(self.graph.states)
        self.result.depth = max(self.graph.depth, default=0)
        return self.result

    def _check_graph(self) -> None:
        for prop, node, message in self.model.eventually(self.graph):
            self._record(prop, message, node)

    def _partial(self, reason: str) -> None:
        self.result.partial = True
        self.result.partial_reason = reason

    def _add(self, s: S, parent: int, action: A | None, depth: int, frontier: deque[tuple[int, S]]) -> int:
        """Index of ``s``'s canonical form; a new one is queued and checked."""
        c = self.model.canonical(s)
        i, new = self.graph.add(self.model.fingerprint(c), parent, action, depth)
        if new:
            frontier.append((i, c))
            self._check_state(i, c)
        return i

    def _bfs(self, start: float) -> None:
        frontier: deque[tuple[int, S]] = deque()
        for s in self.model.initial_states():
            i = self._add(s, -1, None, 0, frontier)
            self._roots.setdefault(i, self.model.canonical(s))
        g, witnesses, last_report = self.graph, self.result.witnesses, start
        while frontier and not self._stopped:
            i, s = frontier.popleft()
            depth = g.depth[i] + 1
            for t in self.model.next_states(s):
                self.result.transitions += 1
                for e in t.events:
                    witnesses[e] = True
                g.edges[i].append(self._add(t.state, i, t.action, depth, frontier))
            if self.max_states is not None and len(g.states) >= self.max_states and frontier:
                self._partial(f"stopped at --max-states {self.max_states}")
                return
            interrupt.pause_point("mid-run")  # a test signals here (checker/interrupt.py)
            now = time.perf_counter()
            if self.progress is not None and now - last_report >= 0.5:
                last_report = now
                self.progress(len(g.states), len(frontier), g.depth[i], now - start)

    def _check_state(self, i: int, s: S) -> None:
        for prop, message in self.model.always(s, {v.property for v in self.result.violations}):
            self._record(prop, message, i)

    def _record(self, prop: str, message: str, node: int) -> None:
        root, actions = self.graph.path_to(node)
        trace = self.model.trace(self._roots[root], actions, prop)
        self.result.violations.append(Violation(prop, message, trace))
        if self.stop_on_first and self.model.stops_on(prop):
            self._stopped = True


class Explorer(Search[EngineState, Action]):
    """The plain search over the scheduler spec of ``cfg`` (``asyncspec check --explorer plain``)."""

    def __init__(self, cfg: SpecConfig, symmetry: bool = True, max_states: int | None = None,
                 stop_on_first: bool = True, progress: Progress | None = None) -> None:
        super().__init__(SpecModel(cfg, symmetry), max_states, stop_on_first, progress)
        self.cfg = cfg


def explore(
    cfg: SpecConfig,
    *,
    symmetry: bool = True,
    max_states: int | None = None,
    stop_on_first: bool = True,
    progress: Progress | None = None,
) -> CheckResult:
    """Explore every reachable state of ``cfg`` and check its properties."""
    return Explorer(cfg, symmetry, max_states, stop_on_first, progress).run()
