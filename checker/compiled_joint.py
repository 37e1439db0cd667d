"""The joint worker model on the compiled explorer: ``checker/joint.py``'s search, in C.

``csrc/worker.c`` (with ``csrc/worker_v1.c``, ``csrc/worker_v2.c``, ``csrc/worker_neuron.c``)
mirrors the worker half of ``spec/worker*.py`` and ``checker/joint.py``'s composition (the Neuron
output thread's actions, the ``can_deliver`` gate, the held-outputs deadlock included);
``csrc/joint_py.h`` runs the same
breadth-first search as ``checker/bfs.py``'s ``Search`` over it.  As for the scheduler alone
(``checker/compiled.py``), the C encoding decides *which* joint states exist and *whether* a
property fails; every message and trace comes from the spec, on the joint state replayed
through ``joint_next_states`` along the shortest path.  ``tests/test_compiled_joint.py`` holds
the two to each other: the same states at the same indices, the same edges, results and traces as
the interpreted joint explorer on every ``configs/worker/*.toml`` config and on random ones.

A seeded worker mutant (``checker/worker_mutants.py``) swaps a worker function the C encoding
cannot see: such a run is refused (``worker_not_covered``) and runs on the interpreted joint
explorer, as spec mutants do on the scheduler's.

This module does not import ``checker/joint.py`` (which dispatches to it): it is handed the
``JointModel`` and uses only its ``Model`` face and configuration (``JointLike``).
"""
from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any, Protocol

from asyncspec.spec import engine
from asyncspec.spec.config import SpecConfig
from asyncspec.spec.events import ALL_EVENTS
from asyncspec.spec.properties import Always, always_for
from asyncspec.spec.worker import WORKER_ALWAYS, WORKER_EVENTS, WorkerAlways, WorkerConfig
from asyncspec.spec.worker_neuron import OUTPUT_DONE, OUTPUT_WAIT

from asyncspec.checker import compiled
from asyncspec.checker.compiled import WORKER_MODULES, action_of
from asyncspec.checker.graph import unfinished_work
from asyncspec.checker.result import CheckResult, Violation
from asyncspec.checker.trace import Trace

STRATEGY_CODES = {"v1": 1, "v2": 2, "neuron": 3}
"""The strategies the C encoding has (``STRAT_*`` in ``csrc/worker.h``)."""
WORKER_PROPERTIES = tuple(w.name for w in WORKER_ALWAYS)
"""W1-W4 in the C encoding's order: property id ``NPROPS + i`` (``csrc/worker.h``)."""
MAX_ORDERS, MAX_BUCKET = 120, 8  # csrc/worker.h MAXORDERS, MAXTOK
UNDELIVERED = "the worker still holds undelivered outputs"
"""The deadlock reason of ``JointModel.eventually`` (``checker/joint.py``) for a terminal state's held outputs."""
CHUNK = 4096


class JointLike(Protocol):
    """What the compiled joint search reads of ``JointModel`` (``checker/joint.py``)."""

    cfg: SpecConfig
    wcfg: WorkerConfig
    engine_always: tuple[Always, ...]
    worker_always: tuple[WorkerAlways, ...]

    def initial_states(self) -> list[Any]: ...
    def next_states(self, s: Any) -> Sequence[Any]: ...
    def canonical(self, s: Any) -> Any: ...
    def trace(self, root: Any, actions: list[Any], violated: str) -> Trace: ...
    def stops_on(self, prop: str) -> bool: ...
    def new_result(self) -> CheckResult: ...


def worker_not_covered(cfg: SpecConfig, wcfg: WorkerConfig, symmetry: bool = True,
                       engine_properties: bool = True) -> str | None:
    """Why the compiled explorer cannot check ``cfg`` composed with ``wcfg`` (one line), or None."""
    why = compiled.not_covered(cfg, symmetry)
    if why is not None:
        return why
    orders = 1
    for i in range(2, len(cfg.requests) + 1):
        orders *= i if wcfg.reorder == "any" else 1
    props = len(always_for(cfg)) if engine_properties else 0
    refusals = (
        (wcfg.strategy not in STRATEGY_CODES, f"the {wcfg.strategy} worker strategy is not encoded in C yet"),
        (cfg.num_speculative_tokens > 0, "num_speculative_tokens: drafts in the worker's rows are not encoded"),
        (cfg.kv_connector or cfg.kv_offloading, "a KV connector beside the worker model is not encoded"),
        (bool(cfg.resumable), "streaming-input sessions beside the worker model are not encoded"),
        (cfg.pauses > 0, "pauses beside the worker model are not encoded"),
        (bool(cfg.images) or bool(cfg.mamba_cache_mode) or cfg.sliding_window > 0,
         "encoder inputs, a Mamba group or a sliding window beside the worker model are not encoded"),
        (bool(cfg.structured_output), "structured output (a deferred step) beside the worker model is not encoded"),
        (orders > MAX_ORDERS, f"more than {MAX_ORDERS} row orders per step (reorder 'any', over 5 requests)"),
        (any(not 1 <= b <= MAX_BUCKET for b in wcfg.decode_buckets) or len(wcfg.decode_buckets) > MAX_BUCKET,
         f"decode buckets outside 1..{MAX_BUCKET} rows"),
        (props + len(WORKER_PROPERTIES) > 32, "more than 32 properties with W1-W4"),
    )
    for refused, reason in refusals:
        if refused:
            return reason
    replaced = compiled.spec_replaced(WORKER_MODULES)
    return None if replaced is None else f"{replaced} is replaced (a seeded mutant): mutants run on the interpreted spec"


def _worker_settings(wcfg: WorkerConfig) -> list[int]:
    """``Wcfg`` as ``csrc/joint_py.h`` reads it: strategy, reorder, the buckets sorted."""
    buckets = sorted(wcfg.decode_buckets)
    return [STRATEGY_CODES[wcfg.strategy], int(wcfg.reorder == "any"), len(buckets), *buckets]


class CompiledJointExplorer:
    """One run of ``model`` (a ``JointModel``) on the C encoding; ``run()`` returns the result."""

    def __init__(self, model: JointLike, max_states: int | None = None, stop_on_first: bool = True) -> None:
        cfg, wcfg = model.cfg, model.wcfg
        why = worker_not_covered(cfg, wcfg, engine_properties=bool(model.engine_always))
        if why is not None:
            raise ValueError(f"{cfg.name}/{wcfg.strategy}: the compiled explorer cannot check it: {why}")
        C: Any = compiled._C
        self.model, self.cfg, self.max_states = model, cfg, max_states
        names = list(C.PROPERTIES)
        self.names = [p.name for p in model.engine_always] + [w.name for w in model.worker_always]
        ids = ([names.index(p.name) for p in model.engine_always]
               + [C.NPROPS + WORKER_PROPERTIES.index(w.name) for w in model.worker_always])
        stops = [stop_on_first and model.stops_on(n) for n in self.names]
        self.roots = model.initial_states()
        eos = [tuple(p.eos_position for p in s.engine.params) for s in self.roots]
        self.c: Any = C.Explorer(compiled._settings(cfg), [p for p, _ in cfg.requests], [m for _, m in cfg.requests],
                                 ids, stops, eos, max_states or 0, _worker_settings(wcfg))
        self.result = model.new_result()

    def run(self) -> CheckResult:
        """Explore, then (a complete run, nothing stopping it) the graph properties."""
        start = time.perf_counter()
        status = 0
        self._record_found()
        while status == 0:
            status = self.c.run(CHUNK)
            self._record_found()
        if status == 3:
            self.result.partial = True
            self.result.partial_reason = f"stopped at --max-states {self.max_states}"
        elif status == 1:
            self._graph_phase()
        stats, r = self.c.stats(), self.result
        r.distinct_states, r.transitions, r.depth = stats["states"], stats["transitions"], stats["depth"]
        reached = self.c.worker_witnesses()
        for i, name in enumerate(ALL_EVENTS):
            r.witnesses[name] = bool(stats["witnesses"] >> i & 1)
        for i, name in enumerate(WORKER_EVENTS):
            r.witnesses[name] = bool(reached >> i & 1)
        r.seconds = time.perf_counter() - start
        return r

    def _record_found(self) -> None:
        """The violations the C search found since the last look, each checked by the spec itself."""
        for k, node in self.c.found()[len(self.result.violations):]:
            name, s = self.names[k], self.state(node)
            message = self._message(name, s)
            if message is None:  # the C encoding and the spec disagree: never a silent answer
                raise RuntimeError(f"{self.model.cfg.name}: the compiled joint explorer found {name} failing "
                                   f"in state {node}, the spec does not: csrc/ disagrees with spec/")
            self._violation(name, message, node)

    def _message(self, name: str, s: Any) -> str | None:
        for p in self.model.engine_always:
            if p.name == name:
                found: str | None = p.check(self.cfg, s.engine)
                return found
        w = next(w for w in self.model.worker_always if w.name == name)
        return w.check(s.worker)

    def _violation(self, prop: str, message: str, node: int) -> None:
        root, actions, _ = self.path(node)
        self.result.violations.append(Violation(prop, message, self.model.trace(self.roots[root], actions, prop)))

    def _graph_phase(self) -> None:
        """``JointModel.eventually``: the first terminal state with work left, then a cycle."""
        for i in self.c.terminal():
            why = unfinished_work(self.cfg, self.state(i).engine) if self.c.unfinished(i) else None
            if why is None and self.c.worker_outputs(i):
                why = UNDELIVERED
            if why is not None:
                self._violation("no_deadlock", f"deadlock: {why}", i)
                break
        if self.c.stats()["back_edges"]:
            cycles = self.c.cycles()  # csrc/scc.h
            if cycles:
                self._violation("no_livelock", "livelock: the joint model can cycle forever", cycles[0])

    def transition(self, s: Any, a: int) -> Any:
        """The spec's joint transition from ``s`` for the C encoding's action id ``a`` (``csrc/worker.h``)."""
        C: Any = compiled._C
        steps = self.model.next_states(s)
        if a in (C.ACT_OUTPUT_WAIT, C.ACT_OUTPUT_DONE):  # the Neuron output thread
            name = OUTPUT_WAIT if a == C.ACT_OUTPUT_WAIT else OUTPUT_DONE
            return next(t for t in steps if t.action.name == name)
        if a == 0 or C.ACT_ORDER <= a < C.ACT_ORDER + MAX_ORDERS - 1:
            order = 0 if a == 0 else a - C.ACT_ORDER + 1
            return [t for t in steps if t.action.name == engine.SCHEDULE][order]
        taken = action_of(self.cfg, a, s.engine)
        return next(t for t in steps if (t.action.name, t.action.req) == (taken.name, taken.req))

    def path(self, i: int) -> tuple[int, list[Any], Any]:
        """The initial state's ordinal, the joint actions of the shortest path to state ``i``, and
        state ``i`` itself (canonical), replayed through the spec."""
        root, ids = self.c.path(i)
        s = self.model.canonical(self.roots[root])
        actions = []
        for a in ids:
            t = self.transition(s, a)
            actions.append(t.action)
            s = self.model.canonical(t.state)
        return root, actions, s

    def state(self, i: int) -> Any:
        """Joint state ``i``, replayed through the spec along its shortest path."""
        return self.path(i)[2]

    def all_states(self) -> list[Any]:
        """Every stored joint state in index order, each replayed from its parent's (tests)."""
        snap = self.c.snapshot()
        parent, roots, via = memoryview(snap["parent"]).cast("i"), memoryview(snap["roots"]).cast("H"), snap["via"]
        states: list[Any] = []
        for i, p in enumerate(parent):
            if p < 0:
                states.append(self.model.canonical(self.roots[roots[i]]))
            else:
                states.append(self.model.canonical(self.transition(states[p], via[i]).state))
        return states
