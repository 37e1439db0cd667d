"""Breadth-first exploration of every reachable state of a bounded config.

BFS order makes the first violation found for each property a shortest
trace.  States are stored once, as canonical forms (``checker/symmetry.py``),
with a parent pointer and the action that reached them; the graph's edges
are kept for the *eventually* properties (``checker/graph.py``).
Successors are generated in a fixed order, so the same config always gives
the same counts and the same traces.

Example:
    >>> from asyncspec.spec.config import SpecConfig
    >>> r = explore(SpecConfig(name="tiny", requests=((2, 1),), num_blocks=1, block_size=4))
    >>> r.ok, r.distinct_states > 0
    (True, True)
"""
from __future__ import annotations

import gc
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import cast

from asyncspec.spec import engine
from asyncspec.spec.config import SpecConfig
from asyncspec.spec.engine import Action
from asyncspec.spec.events import ALL_EVENTS
from asyncspec.spec.properties import always_for, eventually_for
from asyncspec.spec.state import EngineState, initial_states

from asyncspec.checker import graph, interrupt
from asyncspec.checker.result import CheckResult, Violation
from asyncspec.checker.state_graph import StateGraph
from asyncspec.checker.symmetry import canonical, identity
from asyncspec.checker.trace import Trace

Progress = Callable[[int, int, int, float], None]  # states, frontier, depth, elapsed seconds


@dataclass
class Explorer:
    """One exploration run; ``run()`` fills ``result``."""

    cfg: SpecConfig
    symmetry: bool = True
    max_states: int | None = None
    stop_on_first: bool = True
    progress: Progress | None = None
    graph: StateGraph[EngineState, Action] = field(default_factory=StateGraph)
    result: CheckResult = field(init=False)

    def __post_init__(self) -> None:
        self.canon = canonical if self.symmetry else identity
        self.always = always_for(self.cfg)
        self.result = CheckResult(
            name=self.cfg.name,
            witnesses={e: False for e in ALL_EVENTS},
            required_witnesses=tuple(cast("tuple[str, ...]", self.cfg.extra.get("witnesses", ()))),
            expect_violation=self.cfg.expect_violation,
        )
        self._initial: dict[int, EngineState] = {}

    def run(self) -> CheckResult:
        """Explore; Ctrl-C or ``max_states`` end it with a partial result."""
        start = time.perf_counter()
        gc_was_enabled = gc.isenabled()
        gc.disable()  # no reference cycles are created; the collector only costs time
        try:
            self._bfs(start)
        except KeyboardInterrupt:
            self._partial(interrupt.reason())
        finally:
            if gc_was_enabled:
                gc.enable()
        if not self.result.partial and not self._stopped:
            try:  # the graph phase (SCCs): an interrupt here leaves a partial result too
                for prop, node, message in graph.check_eventually(self.cfg, self.graph, eventually_for(self.cfg)):
                    self._record(prop, message, node)
            except KeyboardInterrupt:
                self._partial(f"{interrupt.reason()} in the graph phase (deadlock/livelock analysis)")
        self.result.seconds = time.perf_counter() - start
        self.result.distinct_states = len(self.graph.states)
        self.result.depth = max(self.graph.depth, default=0)
        return self.result

    _stopped: bool = False

    def _partial(self, reason: str) -> None:
        self.result.partial = True
        self.result.partial_reason = reason

    def _bfs(self, start: float) -> None:
        frontier: deque[int] = deque()
        for s in initial_states(self.cfg):
            i, new = self.graph.add(self.canon(s), -1, None, 0)
            if new:
                self._initial[i] = s
                frontier.append(i)
                self._check_state(i)
        last_report = start
        while frontier and not self._stopped:
            i = frontier.popleft()
            for t in engine.next_states(self.cfg, self.graph.states[i]):
                self.result.transitions += 1
                for e in t.events:
                    self.result.witnesses[e] = True
                j, new = self.graph.add(self.canon(t.state), i, t.action, self.graph.depth[i] + 1)
                self.graph.edges[i].append(j)
                if new:
                    frontier.append(j)
                    self._check_state(j)
            if self.max_states is not None and len(self.graph.states) >= self.max_states and frontier:
                self._partial(f"stopped at --max-states {self.max_states}")
                return
            now = time.perf_counter()
            if self.progress is not None and now - last_report >= 0.5:
                last_report = now
                self.progress(len(self.graph.states), len(frontier), self.graph.depth[i], now - start)

    def _check_state(self, i: int) -> None:
        s = self.graph.states[i]
        for prop in self.always:
            if any(v.property == prop.name for v in self.result.violations):
                continue
            message = prop.check(self.cfg, s)
            if message is not None:
                self._record(prop.name, message, i)

    def _record(self, prop: str, message: str, node: int) -> None:
        root, actions = self.graph.path_to(node)
        eos = tuple(p.eos_position for p in self.graph.states[root].params)
        trace = Trace(self.cfg, eos, actions, violated=prop)
        self.result.violations.append(Violation(prop, message, trace))
        if self.stop_on_first and prop != self.cfg.expect_violation:
            self._stopped = True


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
