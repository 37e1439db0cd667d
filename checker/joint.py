"""The scheduler spec composed with a worker model: the joint relation as a ``Model``.

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

``JointModel`` is this relation as a ``checker/model.py`` model, explored by
``checker/bfs.py``'s search: BFS (shortest traces), fixed successor order
(deterministic counts), engine part canonicalised by ``checker/symmetry.py``
(the worker names no block ids).  It checks the engine's *always*
properties, the worker properties W1-W4, the worker witnesses, and no
deadlock / no livelock on the joint graph.

Example:
    >>> from asyncspec.spec.config import SpecConfig
    >>> cfg = SpecConfig(name="tiny", requests=((2, 2),), num_blocks=2)
    >>> r = explore_joint(cfg, "neuron", required_witnesses=())
    >>> r.ok, r.distinct_states > 0
    (True, True)
"""
from __future__ import annotations

import sys

from collections.abc import Collection, Iterator
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

from asyncspec.checker.bfs import Search
from asyncspec.checker.compiled import NOT_BUILT
from asyncspec.checker.compiled_joint import UNDELIVERED, CompiledJointExplorer, worker_not_covered
from asyncspec.checker.configs import JointExpectation, worker_configs, worker_expectations
from asyncspec.checker.graph import cycle_nodes, unfinished_work
from asyncspec.checker.model import Found, Model
from asyncspec.checker.state_graph import StateGraph
from asyncspec.checker.result import CheckResult
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


# ---------------------------------------------------------------- the model


class JointModel(Model[JointState, JointAction]):
    """The joint relation as a ``Model`` (``checker/model.py``), explored by ``checker/bfs.py``.

    The engine part is canonicalised (``checker/symmetry.py``; the worker names no
    block ids); the *always* properties are the engine's (unless turned off), then
    W1-W4; the graph properties no deadlock (a terminal state with work left, or
    outputs the worker never delivered) and no livelock (a reachable cycle).
    """

    def __init__(self, cfg: SpecConfig, wcfg: WorkerConfig, required_witnesses: tuple[str, ...],
                 engine_properties: bool = True, symmetry: bool = True) -> None:
        self.cfg, self.wcfg = cfg, wcfg
        self.name = f"{cfg.name}/{wcfg.strategy}"
        self.witnesses = ALL_EVENTS + WORKER_EVENTS
        self.required_witnesses = required_witnesses
        self._canon = canonical if symmetry else identity
        self.engine_always = always_for(cfg) if engine_properties else ()
        self.worker_always = worker_properties(wcfg.strategy)

    def initial_states(self) -> list[JointState]:
        """One per EOS choice, each with a fresh worker."""
        return initial_joint_states(self.cfg)

    def next_states(self, s: JointState) -> list[JointTransition]:
        """``joint_next_states``."""
        return joint_next_states(self.cfg, self.wcfg, s)

    def canonical(self, s: JointState) -> JointState:
        """The engine part in canonical form, the worker as it is."""
        return JointState(self._canon(s.engine), s.worker)

    def always(self, s: JointState, skip: Collection[str]) -> Found:
        """The engine's properties on the engine part, then the worker's on the worker."""
        found = [(p.name, m) for p in self.engine_always
                 if p.name not in skip and (m := p.check(self.cfg, s.engine)) is not None]
        return found + [(w.name, m) for w in self.worker_always
                        if w.name not in skip and (m := w.check(s.worker)) is not None]

    def eventually(self, g: StateGraph[Any, JointAction]) -> Iterator[tuple[str, int, str]]:
        """No deadlock (a terminal state has work left) and no livelock (a reachable cycle)."""
        for i, succ in enumerate(g.edges):
            if succ:
                continue
            why = unfinished_work(self.cfg, g.states[i].engine)
            if why is None and g.states[i].worker.outputs:
                why = UNDELIVERED
            if why is not None:
                yield "no_deadlock", i, f"deadlock: {why}"
                break
        cycles = cycle_nodes(g)
        if cycles:
            yield "no_livelock", cycles[0], "livelock: the joint model can cycle forever"

    def trace(self, root: JointState, actions: list[JointAction], violated: str) -> JointTrace:
        """The joint actions, and the engine actions among them (a replay of the engine part)."""
        eos = tuple(p.eos_position for p in root.engine.params)
        engine_actions = [Action(a.name, a.req) for a in actions
                          if a.name not in (neuron.OUTPUT_WAIT, neuron.OUTPUT_DONE)]
        return JointTrace(self.cfg, eos, engine_actions, violated=violated, worker=self.wcfg,
                          joint_actions=actions)


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
    explorer: str = "compiled",
) -> CheckResult:
    """Explore the scheduler spec composed with the ``strategy`` worker; check W1-W4.

    ``required_witnesses`` defaults to the strategy's (``REQUIRED_WITNESSES``);
    pass ``()`` for a config too small to reach them.  A seeded bug is
    explored by ``checker/worker_mutants.explore_mutant``.  ``explorer``:
    ``"compiled"`` (``checker/compiled_joint.py``) where the C encoding covers the
    config, else (one line on stderr says why) ``"plain"``, this module's search.
    """
    if strategy not in STRATEGIES:
        raise ValueError(f"unknown worker strategy '{strategy}' (one of {', '.join(STRATEGIES)})")
    if reorder not in ("none", "any"):
        raise ValueError("reorder must be 'none' or 'any'")
    wcfg = WorkerConfig(strategy, decode_buckets, cast(Any, reorder))
    required = REQUIRED_WITNESSES[strategy] if required_witnesses is None else required_witnesses
    model = JointModel(cfg, wcfg, required, engine_properties, symmetry)
    if explorer == "compiled":
        why = worker_not_covered(cfg, wcfg, symmetry, engine_properties)
        if why is None:
            return CompiledJointExplorer(model, max_states, stop_on_first).run()
        note_fallback(model.name, why)
    elif explorer != "plain":
        raise ValueError(f"explorer must be 'compiled' or 'plain', not '{explorer}'")
    return Search(model, max_states, stop_on_first, partial_on_interrupt=False).run()  # Ctrl-C stops the command


_NOTED: set[str] = set()


def note_fallback(name: str, why: str) -> None:
    """The one line (stderr) saying why a joint run goes on the interpreted explorer: once per
    process for the missing extension, once per config and reason otherwise; never for a seeded
    mutant (mutants run on the interpreted spec: ``checker/worker_mutants.py``)."""
    key = why if why == NOT_BUILT else f"{name}: {why}"
    if "(a seeded mutant)" in why or key in _NOTED:
        return
    _NOTED.add(key)
    print(f"asyncspec: {key}; using the interpreted joint explorer", file=sys.stderr)


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
