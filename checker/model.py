"""The one interface every search strategy explores: a ``Model``.

After Stateright's ``Model`` trait: a model says which states it starts in,
which actions each state enables and the state each leads to, a state's
canonical form, and its properties of three kinds: *always* (checked on every
reachable state), *sometimes* (witness events some transition must emit) and
*eventually* (decided on the explored graph: no deadlock, no livelock).  The
strategies are one file each over it: ``checker/bfs.py`` (the plain
breadth-first search), ``checker/fast_explorer.py`` (the same search on a
packed store); the models are ``checker/spec_model.py`` (the scheduler spec),
``checker/joint.py`` (scheduler + worker) and ``reference/refinement.py``
(the reference harness beside its abstraction).

Enabled actions and their next states come together from ``next_states``,
as the spec computes them (``spec.engine.next_states``): each step is an
(action, state, events) triple in a fixed order, so a search is
deterministic.  ``canonical`` gives the representative of a state's symmetry
class, the one explored; ``fingerprint`` what identifies it in the graph (by
default the canonical state itself; the refinement model explores a harness
but stores only its abstraction).
"""
from __future__ import annotations

from collections.abc import Collection, Hashable, Iterable, Iterator, Sequence
from typing import Any, Generic, NamedTuple, Protocol, TypeVar

from asyncspec.checker.result import CheckResult
from asyncspec.checker.state_graph import StateGraph
from asyncspec.checker.trace import Trace

S = TypeVar("S")  # a state
A = TypeVar("A")  # an action label
S_co = TypeVar("S_co", covariant=True)
A_co = TypeVar("A_co", covariant=True)

Found = list[tuple[str, str]]  # (property, message) of each property a state violates


class Step(Protocol[S_co, A_co]):
    """One enabled action and what it leads to (``spec.engine.Transition`` is one)."""

    @property
    def action(self) -> A_co: ...

    @property
    def state(self) -> S_co: ...

    @property
    def events(self) -> frozenset[str]: ...


class Edge(NamedTuple, Generic[S, A]):
    """A ``Step`` for models whose relation is not the spec's own (it returns ``Transition``s)."""

    action: A
    state: S
    events: frozenset[str]


class Model(Generic[S, A]):
    """A system to explore; subclasses give the first two methods, the rest have defaults."""

    name: str = ""
    witnesses: tuple[str, ...] = ()  # sometimes: every event reported (reached or not)
    required_witnesses: tuple[str, ...] = ()  # sometimes: those some transition must emit
    expect_violation: str | None = None  # a finding: the property expected to fail
    cyclic_states: bool = False  # its states hold reference cycles: the collector stays on in a search

    def initial_states(self) -> Iterable[S]:
        """The states a run starts in, in a fixed order."""
        raise NotImplementedError

    def next_states(self, s: S) -> Sequence[Step[S, A]]:
        """Every action enabled in ``s``, with its next state and events, in a fixed order."""
        raise NotImplementedError

    def canonical(self, s: S) -> S:
        """The representative of ``s``'s symmetry class (the one explored)."""
        return s

    def fingerprint(self, s: S) -> Hashable:
        """What identifies the canonical state ``s`` in the explored graph."""
        return s

    def always(self, s: S, skip: Collection[str]) -> Found:
        """The *always* properties ``s`` violates, in order, except those in ``skip``."""
        return []

    def eventually(self, g: StateGraph[Any, A]) -> Iterator[tuple[str, int, str]]:
        """(property, state index, message) of each graph property the explored ``g`` fails."""
        return iter(())

    def trace(self, root: S, actions: list[A], violated: str) -> Trace:
        """The replayable trace from the (canonical) initial state ``root`` through ``actions``."""
        raise NotImplementedError

    def stops_on(self, prop: str) -> bool:
        """Whether a violation of ``prop`` ends a run that stops on the first one."""
        return prop != self.expect_violation

    def new_result(self) -> CheckResult:
        """An empty result: every witness unreached, nothing found yet."""
        return CheckResult(name=self.name, witnesses={e: False for e in self.witnesses},
                           required_witnesses=self.required_witnesses,
                           expect_violation=self.expect_violation)
