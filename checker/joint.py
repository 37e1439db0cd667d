"""The scheduler spec composed with a worker model, and its breadth-first explorer.

A joint state is ``(EngineState, WorkerState)``.  The joint next-state relation:

* every engine transition of ``spec/engine.py``; a ``schedule`` also *executes*
  the new step on the worker (``execute_model`` + ``sample_tokens`` are
  submitted right after scheduling in ``step_with_batch_queue``), once per row
  order the runner may choose; a Neuron step whose main thread would wait for
  the output thread's lock is not enabled until the output thread is done (an
  empty step too: vllm-neuron's guard runs before its early return);
* ``update_from_output`` is enabled (Neuron) only once the output thread has
  delivered the oldest step's output (the engine core's ``future.result()``);
* Neuron only: the output thread's ``output_wait`` / ``output_done``.

The explorer is ``checker/bfs.py``'s: BFS (shortest traces), fixed successor
order (deterministic counts), engine part canonicalised by
``checker/symmetry.py`` (the worker names no block ids).  It checks the
engine's *always* properties, the worker properties W1-W4, the worker
witnesses, and no deadlock / no livelock on the joint graph.

Example:
    >>> from asyncspec.spec.config import SpecConfig
    >>> cfg = SpecConfig(name="tiny", requests=((2, 2),), num_blocks=2)
    >>> r = explore_joint(cfg, "neuron", required_witnesses=())
    >>> r.ok, r.distinct_states > 0
    (True, True)
"""
from __future__ import annotations

import gc
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable, NamedTuple, cast

from asyncspec.spec import engine
from asyncspec.spec import worker_neuron as neuron
from asyncspec.spec import worker_v1 as v1
from asyncspec.spec import worker_v2 as v2
from asyncspec.spec.config import SpecConfig
from asyncspec.spec.engine import Action
from asyncspec.spec.events import ALL_EVENTS
from asyncspec.spec.properties import always_for
from asyncspec.spec.state import EngineState, initial_states
from asyncspec.spec.worker import (
    REQUIRED_WITNESSES, STRATEGIES, WORKER_EVENTS, Row, Strategy, WorkerConfig, WorkerState,
    finished_requests, initial_worker_state, rows_of, worker_properties,
)

from asyncspec.checker.state_graph import StateGraph
from asyncspec.checker.configs import JointExpectation, worker_configs, worker_expectations
from asyncspec.checker.graph import cycle_nodes, unfinished_work
from asyncspec.checker.result import CheckResult, Violation
from asyncspec.checker.symmetry import canonical, identity
from asyncspec.checker.trace import Trace

Execute = Callable[[WorkerConfig, WorkerState, tuple[Row, ...], frozenset[int]],
                   list[tuple[WorkerState, frozenset[str]]]]
EXECUTE: dict[str, Execute] = {"v1": v1.execute, "v2": v2.execute, "neuron": neuron.execute}


class JointState(NamedTuple):
    """The scheduler and the worker."""

    engine: EngineState
    worker: WorkerState


class JointAction(NamedTuple):
    """An action label: an engine action (with the row order a step ran in) or a worker one."""

    name: str
    req: int | None = None
    order: tuple[int, ...] | None = None  # schedule: rows as executed; None = empty step

    def __str__(self) -> str:
        text = str(Action(self.name, self.req))
        if self.order is not None:
            text += " [" + " ".join(f"r{r}" for r in self.order) + "]"
        return text


class JointTransition(NamedTuple):
    """One edge of the joint graph."""

    action: JointAction
    state: JointState
    events: frozenset[str]


# ---------------------------------------------------------------- next-state relation


def _schedule(cfg: SpecConfig, wcfg: WorkerConfig, ws: WorkerState,
              t: engine.Transition) -> list[JointTransition]:
    """The engine's ``schedule`` and the worker executing the new step."""
    step = t.state.batch_queue[-1]
    if not step.entries:
        if wcfg.strategy != "neuron":
            return [JointTransition(JointAction(t.action.name), JointState(t.state, ws), t.events)]
        empty = neuron.execute_empty_step(ws, finished_requests(t.state))
        if empty is None:  # the guard's main thread waits for the output thread's lock
            return []
        return [JointTransition(JointAction(t.action.name), JointState(t.state, empty[0]), t.events | empty[1])]
    rows = rows_of(step, t.state)
    out = []
    for ws2, events in EXECUTE[wcfg.strategy](wcfg, ws, rows, finished_requests(t.state)):
        action = JointAction(t.action.name, None, ws2.slots)
        out.append(JointTransition(action, JointState(t.state, ws2), t.events | events))
    return out


def joint_next_states(cfg: SpecConfig, wcfg: WorkerConfig, s: JointState) -> list[JointTransition]:
    """Every successor of ``s``: engine actions (with the worker's share), then worker actions."""
    out: list[JointTransition] = []
    neuron_worker = wcfg.strategy == "neuron"
    for t in engine.next_states(cfg, s.engine):
        if t.action.name == engine.SCHEDULE:
            out += _schedule(cfg, wcfg, s.worker, t)
        elif t.action.name == engine.UPDATE_FROM_OUTPUT:
            if neuron_worker and not neuron.can_deliver(s.worker):
                continue
            ws = neuron.engine_processed(s.worker) if neuron_worker else s.worker
            out.append(JointTransition(JointAction(t.action.name), JointState(t.state, ws), t.events))
        else:
            out.append(JointTransition(JointAction(t.action.name, t.action.req),
                                       JointState(t.state, s.worker), t.events))
    if neuron_worker:
        for name in neuron.output_thread_actions(s.worker):
            ws, events = neuron.output_thread_step(s.worker, name)
            out.append(JointTransition(JointAction(name), JointState(s.engine, ws), events))
    return out


def initial_joint_states(cfg: SpecConfig) -> list[JointState]:
    """One per initial engine state (EOS choice), each with a fresh worker."""
    return [JointState(e, initial_worker_state(cfg)) for e in initial_states(cfg)]


# ---------------------------------------------------------------- traces


@dataclass
class JointTrace(Trace):
    """A joint counterexample: the engine trace plus the worker configuration.

    ``mutant`` names the seeded bug it was found on (``checker/worker_mutants.py``);
    such a trace replays only with that mutant applied.
    """

    worker: WorkerConfig | None = None
    joint_actions: list[JointAction] = field(default_factory=list)
    mutant: str | None = None

    def joint_states(self) -> list[tuple[JointAction | None, JointState, frozenset[str]]]:
        """Replay on the concrete joint relation (no symmetry); ``ValueError`` if it diverges."""
        assert self.worker is not None
        engine_state = next(e for e in initial_states(self.config)
                            if tuple(p.eos_position for p in e.params) == self.eos_positions)
        s = JointState(engine_state, initial_worker_state(self.config))
        rows: list[tuple[JointAction | None, JointState, frozenset[str]]] = [(None, s, frozenset())]
        for i, action in enumerate(self.joint_actions, start=1):
            nxt = [t for t in joint_next_states(self.config, self.worker, s) if t.action == action]
            if not nxt:
                raise ValueError(f"step {i}: action '{action}' is not enabled")
            s = nxt[0].state
            rows.append((action, s, nxt[0].events))
        return rows

    def to_json(self) -> dict[str, Any]:
        data = super().to_json()
        data["actions"] = [str(a) for a in self.joint_actions]
        if self.worker is not None:
            data["worker"] = {"strategy": self.worker.strategy, "mutant": self.mutant,
                              "decode_buckets": list(self.worker.decode_buckets),
                              "reorder": self.worker.reorder}
        return data


# ---------------------------------------------------------------- explorer


JointGraph = StateGraph[JointState, JointAction]
"""Explored joint states, how each was first reached, and the edges (``checker/bfs.py``)."""


@dataclass
class JointExplorer:
    """One exploration of the joint model; ``run()`` returns the ``CheckResult``."""

    cfg: SpecConfig
    wcfg: WorkerConfig
    required_witnesses: tuple[str, ...]
    engine_properties: bool = True
    symmetry: bool = True
    max_states: int | None = None
    stop_on_first: bool = True
    graph: JointGraph = field(default_factory=JointGraph)

    def __post_init__(self) -> None:
        self.canon = canonical if self.symmetry else identity
        self.engine_always = always_for(self.cfg) if self.engine_properties else ()
        self.worker_always = worker_properties(self.wcfg.strategy)
        self.result = CheckResult(name=f"{self.cfg.name}/{self.wcfg.strategy}", witnesses={e: False for e in ALL_EVENTS + WORKER_EVENTS},
                                  required_witnesses=self.required_witnesses)
        self._stopped = False

    def _canon(self, s: JointState) -> JointState:
        return JointState(self.canon(s.engine), s.worker)

    def run(self) -> CheckResult:
        """Explore every reachable joint state (or up to ``max_states``)."""
        start = time.perf_counter()
        enabled = gc.isenabled()
        gc.disable()
        try:
            self._bfs()
        finally:
            if enabled:
                gc.enable()
        if not self.result.partial and not self._stopped:
            self._check_graph()
        self.result.seconds = time.perf_counter() - start
        self.result.distinct_states = len(self.graph.states)
        self.result.depth = max(self.graph.depth, default=0)
        return self.result

    def _bfs(self) -> None:
        frontier: deque[int] = deque()
        for s in initial_joint_states(self.cfg):
            i, new = self.graph.add(self._canon(s), -1, None, 0)
            if new:
                frontier.append(i)
                self._check_state(i)
        while frontier and not self._stopped:
            i = frontier.popleft()
            for t in joint_next_states(self.cfg, self.wcfg, self.graph.states[i]):
                self.result.transitions += 1
                for e in t.events:
                    self.result.witnesses[e] = True
                j, new = self.graph.add(self._canon(t.state), i, t.action, self.graph.depth[i] + 1)
                self.graph.edges[i].append(j)
                if new:
                    frontier.append(j)
                    self._check_state(j)
            if self.max_states is not None and len(self.graph.states) >= self.max_states and frontier:
                self.result.partial = True
                self.result.partial_reason = f"stopped at --max-states {self.max_states}"
                return

    def _check_state(self, i: int) -> None:
        s = self.graph.states[i]
        found = {v.property for v in self.result.violations}
        for prop in self.engine_always:
            if prop.name not in found and (message := prop.check(self.cfg, s.engine)) is not None:
                self._record(prop.name, message, i)
        for wprop in self.worker_always:
            if wprop.name not in found and (message := wprop.check(s.worker)) is not None:
                self._record(wprop.name, message, i)

    def _check_graph(self) -> None:
        """No deadlock (a terminal state has work left) and no livelock (a reachable cycle)."""
        for i, succ in enumerate(self.graph.edges):
            if succ:
                continue
            why = unfinished_work(self.cfg, self.graph.states[i].engine)
            if why is None and self.graph.states[i].worker.outputs:
                why = "the worker still holds undelivered outputs"
            if why is not None:
                self._record("no_deadlock", f"deadlock: {why}", i)
                break
        cycles = cycle_nodes(self.graph)
        if cycles:
            self._record("no_livelock", "livelock: the joint model can cycle forever", cycles[0])

    def _record(self, prop: str, message: str, node: int) -> None:
        root, actions = self.graph.path_to(node)
        eos = tuple(p.eos_position for p in self.graph.states[root].engine.params)
        engine_actions = [Action(a.name, a.req) for a in actions
                          if a.name not in (neuron.OUTPUT_WAIT, neuron.OUTPUT_DONE)]
        trace = JointTrace(self.cfg, eos, engine_actions, violated=prop, worker=self.wcfg,
                           joint_actions=actions)
        self.result.violations.append(Violation(prop, message, trace))
        if self.stop_on_first:
            self._stopped = True


def explore_joint(
    cfg: SpecConfig,
    strategy: Strategy,
    *,
    decode_buckets: tuple[int, ...] = (1, 4),
    reorder: str = "any",
    required_witnesses: tuple[str, ...] | None = None,
    engine_properties: bool = True,
    symmetry: bool = True,
    max_states: int | None = None,
    stop_on_first: bool = True,
) -> CheckResult:
    """Explore the scheduler spec composed with the ``strategy`` worker; check W1-W4.

    ``required_witnesses`` defaults to the strategy's (``REQUIRED_WITNESSES``);
    pass ``()`` for a config too small to reach them.  A seeded bug is
    explored by ``checker/worker_mutants.explore_mutant``.
    """
    if strategy not in STRATEGIES:
        raise ValueError(f"unknown worker strategy '{strategy}' (one of {', '.join(STRATEGIES)})")
    if reorder not in ("none", "any"):
        raise ValueError("reorder must be 'none' or 'any'")
    wcfg = WorkerConfig(strategy, decode_buckets, cast(Any, reorder))
    required = REQUIRED_WITNESSES[strategy] if required_witnesses is None else required_witnesses
    return JointExplorer(cfg, wcfg, required, engine_properties, symmetry, max_states,
                         stop_on_first).run()


# ---------------------------------------------------------------- configs and expectations


def small_configs() -> dict[str, SpecConfig]:
    """The joint configs of the fast tier (``configs/worker/*.toml``), by name, in report order."""
    return worker_configs()


EXPECTATIONS: tuple[JointExpectation, ...] = worker_expectations()
"""The fast-tier matrix, one row per ``[[worker]]`` table; ``docs/worker.md`` explains the findings.
Each row's pinned size is the manifest's ``CONFIG/STRATEGY`` entry (``configs/manifest.json``)."""


def run_expectation(e: JointExpectation) -> CheckResult:
    """Explore one row of ``EXPECTATIONS`` (the result's ``ok`` accounts for the finding)."""
    r = explore_joint(small_configs()[e.config], e.strategy, required_witnesses=e.required_witnesses,
                      engine_properties=e.engine_properties)
    r.expect_violation = e.expect_violation
    return r
