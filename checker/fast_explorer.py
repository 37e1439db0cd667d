"""The fast explorer: the same breadth-first search as ``checker/bfs.py``, on a packed store.

What it shares with the plain explorer is everything that has a meaning, the
model (``checker/spec_model.py``): the initial states, the successors
(``spec.engine.next_states``, run on each distinct state once), the spec's
own ``Always`` checks, the traces; the canonical form is
``checker/symmetry.py``'s; the two phases are ``checker/phases.py``.  What
differs is bookkeeping: states are six interned component ids in a
``PackedStore`` (``checker/store.py``), properties are evaluated once per
distinct combination of the components they read (``checker/memo.py``), the
canonical form is computed per component (``checker/packed.py``), and the
graph properties run on CSR arrays (``checker/scc.py``).

Parents are expanded in index order and their successors integrated in the
order the spec generates them, so every index, count, verdict, stop point
(first violation, ``--max-states``) and trace is the plain explorer's;
``tests/test_fast_explorer.py`` compares the two directly.  Expansion of a
batch of known states may run in other processes (``--jobs``, ``--ray``,
``checker/fast_parallel.py``); integration stays in this one, in order.

It explores any ``checker/model.py`` model: the scheduler spec's
(``checker/spec_model.py``, the default) cut into seven components with
memoized properties and its graph properties on the CSR arrays; any other
(the joint worker model, ``checker/joint.py``) stored whole, one component
per state (``checker/whole.py``), with the model's own checks.

Example (the plain explorer's result, timing aside):
    >>> from asyncspec.checker.bfs import explore
    >>> from asyncspec.spec.config import SpecConfig
    >>> cfg = SpecConfig(name="tiny", requests=((2, 1),), num_blocks=1, block_size=4)
    >>> fast, plain = explore_fast(cfg).to_json(), explore(cfg).to_json()
    >>> fast.pop("seconds") >= 0 and plain.pop("seconds") >= 0 and fast == plain
    True
"""
from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from asyncspec.spec.config import SpecConfig
from asyncspec.spec.engine import Action
from asyncspec.spec.properties import Always, eventually_for

from asyncspec.checker import checkpoint as ckpt, interrupt
from asyncspec.checker.fast_parallel import Expander, LocalExpander, Successor, codec_for
from asyncspec.checker.graph import failures, unfinished_work
from asyncspec.checker.measure import rss_bytes
from asyncspec.checker.memo import PropertyMemo
from asyncspec.checker.packed import Packer
from asyncspec.checker.result import CheckResult, Violation
from asyncspec.checker.model import Model
from asyncspec.checker.phases import run_phases
from asyncspec.checker.scc import cycle_nodes
from asyncspec.checker.spec_model import SpecModel
from asyncspec.checker.state_graph import StateGraph
from asyncspec.checker.store import PackedStore

Progress = Callable[[int, int, int, float], None]  # states, frontier, depth, elapsed seconds

MEMORY_CHECK_EVERY = 256  # parents between two looks at the resident set size

_CLEAN_FINAL = Always("clean_final_state", unfinished_work, lambda cfg: True,
                      "a state without successors has finished every request and freed every block")
"""``graph.unfinished_work`` as a state property, so the memo evaluates it once per components."""


@dataclass
class FastExplorer:
    """One exploration run; ``run()`` fills ``result``."""

    cfg: SpecConfig
    symmetry: bool = True
    max_states: int | None = None
    stop_on_first: bool = True
    progress: Progress | None = None
    max_memory: int | None = None  # bytes of resident memory; stop cleanly above it
    checkpoint: Path | None = None  # where to save progress (on a stop, and every checkpoint_seconds)
    checkpoint_seconds: float = 60.0
    resume: bool = False  # start from ``checkpoint`` if it exists
    expander: Expander | None = None  # who runs next_states (default: this process)
    model: Model[Any, Any] | None = None  # what is explored (default: the spec of ``cfg``)
    result: CheckResult = field(init=False)

    def __post_init__(self) -> None:
        self.explored: Model[Any, Any] = self.model or SpecModel(self.cfg, self.symmetry)
        self._spec = isinstance(self.explored, SpecModel)
        self.always = self.explored.properties if isinstance(self.explored, SpecModel) else ()
        self.packer, self.memo = codec_for(self.explored)
        self.store = PackedStore(len(self.packer.values))
        self.result = self.explored.new_result()
        self.actions: list[Action | None] = [None]
        self._action_ids: dict[Action, int] = {}
        self._violated: set[str] = set()
        self._found: list[int] = []  # the state of each violation, as ``result.violations`` lists them
        self._head = 0  # the next state to expand; every state before it is expanded
        self._stopped = False
        self._interrupted = False

    # ------------------------------------------------------------ the run

    def run(self) -> CheckResult:
        """Explore; Ctrl-C, ``max_states`` or ``max_memory`` end it with a partial result."""
        start = time.perf_counter()
        run_phases(lambda: self._search(start), lambda: self._graph_phase(start),
                   lambda reason: self._partial(reason, save=False),
                   lambda: not self.result.partial and not self._stopped, self.explored.cyclic_states)
        self.result.seconds = time.perf_counter() - start
        self.result.distinct_states = len(self.store)
        self.result.depth = self.store.max_depth
        return self.result

    def _search(self, start: float) -> None:
        """From a checkpoint or the initial states, on the expander; interrupts seen between parents."""
        expander = self.expander or LocalExpander(self.cfg)
        expander.open(self.packer, self.explored)
        restore = self._catch_interrupts()
        try:
            if self.resume and self.checkpoint is not None and self.checkpoint.exists():
                self._load(ckpt.load(self.checkpoint, self.cfg, self.symmetry, self._model_name()))
            else:
                self._add_initial()
            self._bfs(expander, start)
        finally:
            restore()
            expander.close()
        if self._interrupted and not self.result.partial and not self._stopped:
            self._partial(interrupt.reason())  # it came after the last poll: still an interrupted run

    def _graph_phase(self, start: float) -> None:
        """The *eventually* properties; a complete run leaves no checkpoint to resume."""
        if self.progress is not None:
            self.progress(len(self.store), 0, self.store.max_depth, time.perf_counter() - start)
        self._check_eventually()
        if self.checkpoint is not None and self.checkpoint.exists():
            self.checkpoint.unlink()

    def _catch_interrupts(self) -> Callable[[], None]:
        """Ctrl-C or SIGTERM sets a flag seen between two parents, so the store stays whole."""
        stack = ExitStack()
        stack.enter_context(interrupt.catching(lambda: setattr(self, "_interrupted", True)))
        return stack.close

    def _add_initial(self) -> None:
        for s in self.explored.initial_states():
            ids = self.packer.canonical_ids(s)
            i, new = self.store.add(ids, -1, 0, 0)
            if new:
                self._check_state(i, ids)

    def _bfs(self, expander: Expander, start: float) -> None:
        store = self.store
        last_report = last_save = start
        while self._head < len(store) and not self._stopped:
            hi = min(len(store), self._head + expander.batch)
            for successors in expander.expand([store.ids(i) for i in range(self._head, hi)]):
                self._integrate(self._head, successors)
                self._head += 1
                if self._should_stop():
                    return
            interrupt.pause_point("mid-run")  # a test signals here (checker/interrupt.py)
            now = time.perf_counter()
            if self.progress is not None and now - last_report >= 0.5:
                last_report = now
                frontier = len(store) - self._head
                self.progress(len(store), frontier, store.depth(self._head - 1), now - start)
            if self.checkpoint is not None and now - last_save >= self.checkpoint_seconds:
                last_save = now
                self._save()

    def _integrate(self, i: int, successors: list[Successor]) -> None:
        store, witnesses = self.store, self.result.witnesses
        depth = store.depth(i) + 1
        for action, events, ids, answers in successors:
            self.result.transitions += 1
            for e in events:
                witnesses[e] = True
            j, new = store.add(ids, i, self._action_id(action), depth)
            store.add_edge(i, j)
            if not new:
                continue
            if answers is None:
                answers = self.memo.check(ids, self.packer.decode, self._violated)
            for prop, message in answers:
                if prop not in self._violated:
                    self._record(prop, message, j)
        store.end_expansion()

    def _should_stop(self) -> bool:
        """After each parent, in the plain explorer's order: state cap, violation, Ctrl-C, memory."""
        frontier = self._head < len(self.store)
        if self.max_states is not None and len(self.store) >= self.max_states and frontier:
            self._partial(f"stopped at --max-states {self.max_states}")
            return True
        if self._stopped:
            return True
        if self._interrupted:
            self._partial(interrupt.reason())
            return True
        if self.max_memory is not None and self._head % MEMORY_CHECK_EVERY == 0 and frontier:
            held = rss_bytes()
            if held > self.max_memory:
                self._partial(f"stopped at --max-memory {self.max_memory // 2**20} MiB "
                              f"(resident {held // 2**20} MiB)")
                return True
        return False

    def _action_id(self, action: Action) -> int:
        i = self._action_ids.get(action)
        if i is None:
            i = self._action_ids[action] = len(self.actions)
            self.actions.append(action)
        return i

    # ------------------------------------------------------------ properties

    def _check_state(self, i: int, ids: tuple[int, ...]) -> None:
        for prop, message in self.memo.check(ids, self.packer.decode, self._violated):
            self._record(prop, message, i)

    def _record(self, prop: str, message: str, node: int) -> None:
        self.result.violations.append(self._violation(prop, message, node))
        self._found.append(node)
        self._violated.add(prop)
        if self.stop_on_first and self.explored.stops_on(prop):
            self._stopped = True

    def _violation(self, prop: str, message: str, node: int) -> Violation:
        """``prop`` failing in state ``node``, with the shortest trace to it."""
        root, action_ids = self.store.path_to(node)
        actions = [cast(Action, self.actions[a]) for a in action_ids]
        return Violation(prop, message, self.explored.trace(self.state(root), actions, prop))

    def state(self, i: int) -> Any:
        """The (canonical) state with index ``i`` (an ``EngineState`` of the spec's model)."""
        return self.packer.decode(self.store.ids(i))

    def _check_eventually(self) -> None:
        """``checker/graph.failures`` on the CSR arrays (same states, same messages)."""
        found = (failures(eventually_for(self.cfg), PackedView(self)) if self._spec
                 else self.explored.eventually(self._graph()))
        for prop, node, message in found:
            self._record(prop, message, node)

    def _graph(self) -> StateGraph[Any, Any]:
        """The explored graph as a ``StateGraph`` of fingerprints (for a model's own ``eventually``)."""
        g: StateGraph[Any, Any] = StateGraph()
        g.states = [self.explored.fingerprint(self.state(i)) for i in range(len(self.store))]
        g.edges = [list(self.store.successors(i)) for i in range(len(self.store))]
        return g

    # ------------------------------------------------------------ partial runs, checkpoints

    def _partial(self, reason: str, save: bool = True) -> None:
        self.result.partial = True
        self.result.partial_reason = reason
        if save and self.checkpoint is not None and not self._stopped:  # a violation ended it: nothing to resume
            self._save()

    def _save(self) -> None:
        assert self.checkpoint is not None
        body = {
            "store": self.store.snapshot(),
            "values": self.packer.values,
            "actions": self.actions,
            "head": self._head,
            "transitions": self.result.transitions,
            "witnesses": self.result.witnesses,
            "violations": [(v.property, v.message, node) for v, node in zip(self.result.violations, self._found)],
        }
        ckpt.save(self.checkpoint, self.cfg, self.symmetry, body, self._model_name())

    def _model_name(self) -> str:
        """What a checkpoint names beside the config: the model, unless it is the config's spec."""
        return "" if self._spec else self.explored.name

    def _load(self, body: dict[str, Any]) -> None:
        """Take over a checkpoint's body (``checkpoint.load``: the store restored, everything checked);
        each violation's trace is rebuilt from its state, as ``_record`` built it."""
        self.store = body["store"]
        self.packer.restore(body["values"])
        self.actions = body["actions"]
        self._action_ids = {a: i for i, a in enumerate(self.actions) if a is not None}
        self._head = body["head"]
        self.result.transitions = body["transitions"]
        self.result.witnesses = body["witnesses"]
        self.result.violations = [self._violation(p, m, node) for p, m, node in body["violations"]]
        self._found = [node for _, _, node in body["violations"]]
        self._violated = {v.property for v in self.result.violations}


class PackedView:
    """A ``checker/graph.GraphView`` of the explorer's store: CSR arrays, memoized checks."""

    def __init__(self, e: FastExplorer) -> None:
        self.e = e
        self.finished = PropertyMemo(e.cfg, (_CLEAN_FINAL,))  # once per distinct component combination

    def terminal(self) -> list[int]:
        """The states whose edge range is empty."""
        start = self.e.store.edge_start
        return [i for i in range(len(self.e.store)) if start[i] == start[i + 1]]

    def cycles(self) -> list[int]:
        """Iterative Tarjan (``checker/scc.py``); none without an edge back."""
        store = self.e.store
        return cycle_nodes(store.edge_start, store.edge_target) if store.back_edges else []

    def unfinished(self, i: int) -> str | None:
        """``graph.unfinished_work`` through the memo."""
        why = self.finished.check(self.e.store.ids(i), self.e.packer.decode, set())
        return why[0][1] if why else None

    def parked(self, i: int) -> int:
        """The parked frees, read from one component."""
        return len(cast(Packer, self.e.packer).field(self.e.store.ids(i), "deferred_frees"))


def explore_fast(cfg: SpecConfig, **options: Any) -> CheckResult:
    """``checker.bfs.explore`` on the packed store (any ``FastExplorer`` option by keyword):
    the same result, in less time and memory."""
    return FastExplorer(cfg, **options).run()
