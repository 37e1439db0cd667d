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
The search is ``checker/bfs.py``'s over ``RefinementModel`` (a
``checker/model.py`` model whose states pair a harness with its
abstraction); a failing step leads to a ``Refuted`` state, where the search
stops.  The first failure is reported with the shortest action path, as a trace
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
from collections.abc import Callable, Collection, Hashable, Iterator
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from rich.console import Console
from rich.table import Table

from asyncspec.checker.bfs import Search
from asyncspec.checker.model import Edge, Found, Model
from asyncspec.checker.state_graph import StateGraph
from asyncspec.checker.symmetry import canonical, identity
from asyncspec.checker.table import trace_table
from asyncspec.checker.trace import Trace
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


class RefState(NamedTuple):
    """A reference harness, its abstraction to a spec state, and its EOS choice."""

    harness: ReferenceHarness
    abstraction: EngineState
    eos: tuple[int, ...]


@dataclass(eq=False)
class Refuted:
    """The state a non-refining step leads to: where the check stops (hashed by identity)."""

    kind: str
    message: str
    eos: tuple[int, ...]
    tail: list[Row]  # the rows shown after the replayed path
    action: Action | None = None  # the diverging action (None: the enabled sets or the initial states)


ENABLED_DIFFER = Action("enabled actions differ")
"""The label of the step to a ``Refuted`` state when the enabled sets differ (no action ran)."""

Ref = RefState | Refuted
Step = Edge[Ref, Action]


class RefinementModel(Model[Ref, Action]):
    """The reference harness beside its abstraction, as a ``checker/model.py`` model.

    Its one *always* property, ``refines_spec``, fails exactly in ``Refuted``
    states; a state is identified by the canonical form of its abstraction.
    """

    cyclic_states = True  # a harness's block pool links its free blocks both ways

    def __init__(self, cfg: SpecConfig, symmetry: bool = True) -> None:
        self.cfg = cfg
        self.name = cfg.name
        self.canon: Callable[[EngineState], EngineState] = canonical if symmetry else identity

    def initial_states(self) -> Iterator[Ref]:
        """One harness per EOS choice; the first whose abstraction is not the spec's initial state refutes."""
        for eos in itertools.product(*(eos_choices(self.cfg, i) for i in range(len(self.cfg.requests)))):
            h = ReferenceHarness.from_spec(self.cfg, eos)
            a, spec = abstract(h), initial_state(self.cfg, eos)
            if a != spec:
                yield Refuted("initial", "the initial abstraction differs from the spec's initial state", eos,
                              [(None, a, frozenset()), (None, spec, frozenset())])
                return
            yield RefState(h, a, eos)

    def next_states(self, s: Ref) -> list[Step]:
        """Each action run on a copy of the harness, compared with the spec's; up to the first refutation."""
        if isinstance(s, Refuted):
            return []
        h, a, eos = s
        actions, spec_actions = h.enabled_actions(), engine.enabled_actions(self.cfg, a)
        if actions != spec_actions:
            return [Step(ENABLED_DIFFER, Refuted("enabled", f"enabled actions: reference {[str(x) for x in actions]}, "
                                                 f"spec {[str(x) for x in spec_actions]}", eos, []), frozenset())]
        out: list[Step] = []
        for action in actions:
            h2 = h.copy()
            events = h2.apply(action)
            a2 = abstract(h2)
            refuted = self._compare(action, a2, events, engine.apply(self.cfg, a, action), h2, eos)
            out.append(Step(action, refuted or RefState(h2, a2, eos), events))
            if refuted is not None:
                break
        return out

    @staticmethod
    def _compare(action: Action, a2: EngineState, events: frozenset[str],
                 spec: tuple[EngineState, frozenset[str]], h2: ReferenceHarness,
                 eos: tuple[int, ...]) -> Refuted | None:
        """Whether the reference's successor (abstracted) refutes the spec's."""
        s2, spec_events = spec
        both: list[Row] = [(action, a2, events), (Action(f"{action} (spec)"), s2, spec_events)]
        if a2 != s2:
            return Refuted("state", f"after '{action}': {first_difference(a2, s2)}", eos, both, action)
        if events != spec_events:
            return Refuted("events", f"after '{action}': reference events {sorted(events)}, "
                           f"spec {sorted(spec_events)}", eos, both, action)
        problems = representation_problems(h2)
        if problems:
            return Refuted("representation", f"after '{action}': {problems[0]}", eos, both[:1], action)
        return None

    def fingerprint(self, s: Ref) -> Hashable:
        """The canonical form of the abstraction (a ``Refuted`` state is its own)."""
        return s if isinstance(s, Refuted) else self.canon(s.abstraction)

    def always(self, s: Ref, skip: Collection[str]) -> Found:
        """``refines_spec``: the state is not ``Refuted``."""
        return [("refines_spec", s.message)] if isinstance(s, Refuted) else []

    def trace(self, root: Ref, actions: list[Action], violated: str) -> Trace:
        """The actions from the root's EOS choice (the mismatch itself is built by the checker)."""
        return Trace(self.cfg, root.eos, [x for x in actions if x != ENABLED_DIFFER], violated=violated)


class RefinementChecker:
    """The breadth-first search (``checker/bfs.py``) over ``RefinementModel``; ``run()`` returns the result."""

    def __init__(self, cfg: SpecConfig, *, symmetry: bool = True, max_states: int | None = None) -> None:
        self.cfg = cfg
        self.search = Search(RefinementModel(cfg, symmetry), max_states, partial_on_interrupt=False)

    def run(self) -> RefinementResult:
        """Explore; a refuted state is the last one added (the search stops there) and is not counted."""
        r, g = self.search.run(), self.search.graph
        refuted = g.states[-1] if g.states and isinstance(g.states[-1], Refuted) else None
        n = len(g.states) - (refuted is not None)
        enabled = refuted is not None and refuted.kind == "enabled"  # no action ran: no transition
        return RefinementResult(self.cfg.name, n, r.transitions - enabled, max(g.depth[:n], default=0),
                                r.seconds, r.partial, self._mismatch(refuted, g),
                                {e for e, hit in r.witnesses.items() if hit})

    def _mismatch(self, refuted: Refuted | None, g: StateGraph[Hashable, Action]) -> Mismatch | None:
        """The mismatch shown for ``refuted``: the path replayed on a fresh harness, then its tail."""
        if refuted is None:
            return None
        parent = g.parent[-1]
        if parent < 0:
            return Mismatch(refuted.kind, refuted.message, self.cfg, refuted.eos, [], refuted.tail)
        path = g.path_to(parent)[1]
        rows = replay_abstract(self.cfg, refuted.eos, path)
        actions = path + ([refuted.action] if refuted.action else [])
        return Mismatch(refuted.kind, refuted.message, self.cfg, refuted.eos, actions, rows + refuted.tail)


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
