"""Exhaustive refinement checking: the reference, explored, against the spec.

For one spec config, breadth-first search over the *reference* harness's
states (one initial state per EOS choice, as the spec has).  At every
reached reference state ``h`` with abstraction ``a = abstract(h)``:

1. the reference's enabled actions equal the spec's in ``a`` (same labels,
   same order);
2. for each action, a deep copy of ``h`` runs it, and ``abstract`` of the
   result must *equal* the spec's successor ``engine.apply(cfg, a, action)``
   (concrete block ids included, no symmetry), with the same events;
3. the successor's derived data is consistent (``representation_problems``).

States are deduplicated by the canonical form of their abstraction
(``checker/symmetry.py``), which is sound because the representation check
makes every other reference field a function of the abstraction, and the
reference never looks at block ids except to tell them apart.  So when the
reference refines the spec the explored count equals the spec checker's.
The first failure is reported with the shortest action path, as a trace
table of abstracted states whose last two rows are the reference's and the
spec's successor (bold cells = where they differ).

Example:
    >>> from asyncspec.checker.configs import load_manifest, named_configs
    >>> r = check_refinement(named_configs()["async-d2"])
    >>> r.ok, r.distinct_states == load_manifest()["async-d2"]["distinct_states"]
    (True, True)
"""
from __future__ import annotations

import itertools
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from rich.console import Console
from rich.table import Table

from asyncspec.checker.symmetry import canonical, identity
from asyncspec.checker.table import trace_table
from asyncspec.spec import engine
from asyncspec.spec.config import SpecConfig
from asyncspec.spec.engine import Action
from asyncspec.spec.state import EngineState, eos_choices, initial_state

from asyncspec.reference.abstraction import abstract, representation_problems
from asyncspec.reference.reference_harness import ReferenceHarness

Row = tuple[Action | None, EngineState, frozenset[str]]


@dataclass
class Mismatch:
    """The first place where the reference does not refine the spec."""

    kind: str  # "initial", "enabled", "state", "events" or "representation"
    message: str
    config: SpecConfig
    eos_positions: tuple[int, ...]
    actions: list[Action]  # from the initial state; the last one diverged (if any)
    rows: list[Row] = field(default_factory=list)

    def table(self) -> Table:
        """The trace as a table of abstracted states (``checker/table.py``)."""
        title = f"{self.config.name}: reference != spec ({self.kind}) eos={list(self.eos_positions)}"
        table: Table = trace_table(self.config, self.rows, title=title)
        return table

    def render(self, width: int = 250) -> str:
        """The message and the table as plain text."""
        console = Console(width=width, record=True, color_system=None)
        with console.capture() as cap:
            console.print(self.message)
            console.print(self.table())
        return cap.get()


@dataclass
class RefinementResult:
    """Outcome of one exhaustive refinement check."""

    name: str
    distinct_states: int = 0
    transitions: int = 0
    depth: int = 0
    seconds: float = 0.0
    partial: bool = False
    mismatch: Mismatch | None = None
    events: set[str] = field(default_factory=set)

    @property
    def ok(self) -> bool:
        """Explored completely, no mismatch."""
        return self.mismatch is None and not self.partial


@dataclass
class _Node:
    parent: int
    action: Action | None
    depth: int
    eos: tuple[int, ...]


class RefinementChecker:
    """One BFS over the reference; ``run()`` returns the result."""

    def __init__(self, cfg: SpecConfig, *, symmetry: bool = True, max_states: int | None = None) -> None:
        self.cfg = cfg
        self.canon: Callable[[EngineState], EngineState] = canonical if symmetry else identity
        self.max_states = max_states
        self.index: dict[EngineState, int] = {}
        self.nodes: list[_Node] = []
        self.result = RefinementResult(cfg.name)

    def run(self) -> RefinementResult:
        start = time.perf_counter()
        frontier: deque[tuple[int, ReferenceHarness, EngineState]] = deque()
        for eos in itertools.product(*(eos_choices(self.cfg, i) for i in range(len(self.cfg.requests)))):
            h = ReferenceHarness.from_spec(self.cfg, eos)
            a = abstract(h)
            if a != initial_state(self.cfg, eos):
                self._fail("initial", "the initial abstraction differs from the spec's initial state",
                           -1, None, eos, [(None, a, frozenset()), (None, initial_state(self.cfg, eos), frozenset())])
                break
            i = self._add(a, _Node(-1, None, 0, eos))
            if i is not None:
                frontier.append((i, h, a))
        while frontier and self.result.mismatch is None:
            i, h, a = frontier.popleft()
            self._expand(i, h, a, frontier)
            if self.max_states is not None and len(self.nodes) >= self.max_states and frontier:
                self.result.partial = True
                break
        self.result.distinct_states = len(self.nodes)
        self.result.depth = max((n.depth for n in self.nodes), default=0)
        self.result.seconds = time.perf_counter() - start
        return self.result

    def _add(self, a: EngineState, node: _Node) -> int | None:
        key = self.canon(a)
        if key in self.index:
            return None
        self.index[key] = len(self.nodes)
        self.nodes.append(node)
        return len(self.nodes) - 1

    def _expand(self, i: int, h: ReferenceHarness, a: EngineState,
                frontier: deque[tuple[int, ReferenceHarness, EngineState]]) -> None:
        node = self.nodes[i]
        actions = h.enabled_actions()
        spec_actions = engine.enabled_actions(self.cfg, a)
        if actions != spec_actions:
            self._fail("enabled", f"enabled actions: reference {[str(x) for x in actions]}, "
                       f"spec {[str(x) for x in spec_actions]}", i, None, node.eos, [])
            return
        for action in actions:
            self.result.transitions += 1
            h2 = h.copy()
            events = h2.apply(action)
            a2 = abstract(h2)
            s2, spec_events = engine.apply(self.cfg, a, action)
            self.result.events |= events
            if a2 != s2:
                self._fail("state", f"after '{action}': {first_difference(a2, s2)}", i, action, node.eos,
                           [(action, a2, events), (Action(f"{action} (spec)"), s2, spec_events)])
                return
            if events != spec_events:
                self._fail("events", f"after '{action}': reference events {sorted(events)}, "
                           f"spec {sorted(spec_events)}", i, action, node.eos,
                           [(action, a2, events), (Action(f"{action} (spec)"), s2, spec_events)])
                return
            problems = representation_problems(h2)
            if problems:
                self._fail("representation", f"after '{action}': {problems[0]}", i, action, node.eos,
                           [(action, a2, events)])
                return
            j = self._add(a2, _Node(i, action, node.depth + 1, node.eos))
            if j is not None:
                frontier.append((j, h2, a2))

    def _path(self, i: int) -> list[Action]:
        actions: list[Action] = []
        while i >= 0 and self.nodes[i].parent >= 0:
            a = self.nodes[i].action
            assert a is not None
            actions.append(a)
            i = self.nodes[i].parent
        return actions[::-1]

    def _fail(self, kind: str, message: str, i: int, action: Action | None,
              eos: tuple[int, ...], tail: list[Row]) -> None:
        path = self._path(i) if i >= 0 else []
        rows = replay_abstract(self.cfg, eos, path) if i >= 0 else []
        self.result.mismatch = Mismatch(kind, message, self.cfg, eos,
                                        path + ([action] if action else []), rows + tail)


def replay_abstract(cfg: SpecConfig, eos: tuple[int, ...], actions: list[Action]) -> list[Row]:
    """Run ``actions`` on a fresh reference harness; the abstracted state after each."""
    h = ReferenceHarness.from_spec(cfg, eos)
    rows: list[Row] = [(None, abstract(h), frozenset())]
    for action in actions:
        events = h.apply(action)
        rows.append((action, abstract(h), events))
    return rows


def first_difference(ref: EngineState, spec: EngineState) -> str:
    """A one-line description of the first field where two states differ."""
    for name in ref._fields:
        x, y = getattr(ref, name), getattr(spec, name)
        if x == y:
            continue
        if name == "counters":
            for i, (cx, cy) in enumerate(zip(x, y)):
                for f in cx._fields:
                    if getattr(cx, f) != getattr(cy, f):
                        return f"r{i}.{f}: reference {getattr(cx, f)!r}, spec {getattr(cy, f)!r}"
        return f"{name}: reference {x!r}, spec {y!r}"
    return "no difference"


def check_refinement(cfg: SpecConfig, *, symmetry: bool = True, max_states: int | None = None) -> RefinementResult:
    """Explore the reference for ``cfg`` and check it refines the spec at every state."""
    return RefinementChecker(cfg, symmetry=symmetry, max_states=max_states).run()
