"""The spec's own property checks, evaluated once per distinct combination of
the components they read.

An *always* property is a pure function of the state, read through its
fields.  Properties are grouped by the components (``checker/packed.py``)
they have been seen to read; a group's answers are stored under the ids of
those components, one dictionary look-up per group and state.  On a miss the
group's properties run on one view of the state: the fields of the group's
components are plain attributes, any other field read is noted.  A state
that agrees with an evaluated one on the group's components makes each
property read the same values in the same order, so it gets the same
answers.  A property that read outside its group moves to a wider group (the
answers stored for both groups are dropped).  A group whose look-ups mostly
miss (three in four: its components are nearly as varied as the states)
stops storing answers and evaluates directly, as the plain explorer does.
No property is rewritten: a spec mutant that changes what a property
computes changes the stored answers too.

Example:
    >>> from asyncspec.spec.config import SpecConfig
    >>> from asyncspec.spec.properties import always_for
    >>> from asyncspec.spec.state import initial_states
    >>> from asyncspec.checker.packed import Packer
    >>> cfg = SpecConfig(name="x", requests=((4, 2),), num_blocks=2)
    >>> p, memo = Packer(), PropertyMemo(cfg, always_for(cfg))
    >>> s = initial_states(cfg)[0]
    >>> memo.check(p.pack(s), p.decode, set()), memo.misses > 0
    ([], True)
    >>> before = memo.misses
    >>> memo.check(p.pack(s), p.decode, set()), memo.misses == before
    ([], True)
"""
from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from operator import itemgetter
from typing import Any, cast

from asyncspec.spec.config import SpecConfig
from asyncspec.spec.properties import Always
from asyncspec.spec.state import EngineState

from asyncspec.checker.packed import FIELD_COMPONENT

Decode = Callable[[tuple[int, ...]], EngineState]


ALL_COMPONENTS = frozenset(FIELD_COMPONENT.values())


class _NotAField(AttributeError):
    """A property used the state other than through its fields (e.g. ``_replace``)."""


class _View:
    """The fields of a state that a group may read, as plain attributes (read at full
    speed); reading any other field goes through ``__getattr__``, which notes its
    component in ``outside`` and answers from the state."""

    def __init__(self, state: EngineState, fields: tuple[str, ...]) -> None:
        d = self.__dict__
        for f in fields:
            d[f] = getattr(state, f)
        d["_state_"] = state
        d["_outside_"] = set()

    def __getattr__(self, name: str) -> Any:
        component = FIELD_COMPONENT.get(name)
        if component is None:
            raise _NotAField(name)
        self.__dict__["_outside_"].add(component)
        return getattr(self.__dict__["_state_"], name)

    @property
    def outside(self) -> set[int]:
        return cast("set[int]", self.__dict__["_outside_"])


def _no_components(ids: tuple[int, ...]) -> tuple[()]:
    return ()


def _key_function(reads: frozenset[int]) -> Callable[[tuple[int, ...]], Hashable]:
    """The ids of ``reads`` as one small key (an int where they fit: less memory than a tuple)."""
    r = sorted(reads)
    if not r:
        return _no_components
    if len(r) == 1:
        return itemgetter(r[0])
    if len(r) == 2:
        a, b = r
        return lambda ids: ids[a] << 32 | ids[b]
    if len(r) == 3:
        a, b, c = r
        return lambda ids: (ids[a] << 32 | ids[b]) << 32 | ids[c]
    return itemgetter(*r)


BYPASS_AFTER = 16384  # look-ups before a group that mostly misses stops storing answers


class _Group:
    """Properties keyed by the same components, and their stored answers."""

    def __init__(self, reads: frozenset[int]) -> None:
        self.reads = reads
        self.fields = tuple(f for f, c in FIELD_COMPONENT.items() if c in reads)
        self.key = _key_function(reads)
        self.members: list[int] = []  # property indices
        self.answers: dict[Hashable, tuple[str | None, ...]] = {}  # aligned with members
        self.lookups = self.hits = 0
        self.clean: tuple[str | None, ...] = ()  # the (shared) all-None answer tuple for members
        self.bypass = False  # answers are nearly all distinct: evaluate, store nothing

    def note(self, hit: bool) -> None:
        """Count a look-up; give up storing if, after enough of them, most missed."""
        self.lookups += 1
        self.hits += hit
        if self.lookups == BYPASS_AFTER and 4 * self.hits < self.lookups:
            self.bypass = True
            self.answers = {}


class PropertyMemo:
    """Answers of a run's *always* properties."""

    def __init__(self, cfg: SpecConfig, props: Sequence[Always]) -> None:
        self.cfg = cfg
        self.props = tuple(props)
        self._groups: dict[frozenset[int], _Group] = {}
        self._order: list[_Group] = []
        self.misses = 0  # evaluations of a spec property (the rest are look-ups)
        self._tuples: dict[tuple[str | None, ...], tuple[str | None, ...]] = {}
        everything = self._group(frozenset())  # widened by the first evaluations
        everything.members = list(range(len(self.props)))
        everything.clean = self._shared((None,) * len(self.props))

    def _group(self, reads: frozenset[int]) -> _Group:
        g = self._groups.get(reads)
        if g is None:
            g = self._groups[reads] = _Group(reads)
            self._order.append(g)
        return g

    def check(self, ids: tuple[int, ...], decode: Decode, skip: set[str]) -> list[tuple[str, str]]:
        """(property, message) for each property violated in ``decode(ids)``, in ``props`` order,
        except those named in ``skip``; the state is decoded only if some answer is not stored."""
        found: dict[int, str] = {}  # property index -> message, for the violated ones
        state: list[EngineState] = []
        moves: list[tuple[int, _Group, frozenset[int]]] = []
        for g in self._order:
            members = g.members
            if not members:
                continue
            if g.bypass:
                if not state:
                    state.append(decode(ids))
                s, cfg = state[0], self.cfg
                for i in members:
                    if (m := self.props[i].check(cfg, s)) is not None:
                        found[i] = m
                continue
            stored = g.answers.get(g.key(ids))
            if g.lookups < BYPASS_AFTER:
                g.note(stored is not None)
            if stored is None:
                if not state:
                    state.append(decode(ids))
                stored = self._evaluate(g, ids, state[0], moves)
            if stored is not g.clean:
                for i, m in zip(members, stored):
                    if m is not None:
                        found[i] = m
        for prop, old, reads in moves:
            old.members.remove(prop)
            new = self._group(reads)
            new.members.append(prop)
            for g in (old, new):  # every property has its answer for this state: store those
                g.clean = self._shared((None,) * len(g.members))
                if not g.bypass:
                    g.answers = {g.key(ids): self._shared(tuple(found.get(m) for m in g.members))}
        if not found:
            return []
        return [(self.props[i].name, found[i]) for i in sorted(found) if self.props[i].name not in skip]

    def _evaluate(self, g: _Group, ids: tuple[int, ...], state: EngineState,
                  moves: list[tuple[int, _Group, frozenset[int]]]) -> tuple[str | None, ...]:
        """Every member on one view; if some read outside the group, find which, one by one."""
        self.misses += len(g.members)
        view = _View(state, g.fields)
        try:
            out = [self.props[i].check(self.cfg, cast(EngineState, view)) for i in g.members]
            whole = not view.outside
        except (TypeError, AttributeError):  # some member used the state other than by its fields
            out, whole = [], False
        if not whole:
            out = [self._evaluate_alone(i, g, state, moves) for i in g.members]
        answers = self._shared(tuple(out))
        if whole:
            g.answers[g.key(ids)] = answers
        return answers

    def _evaluate_alone(self, i: int, g: _Group, state: EngineState,
                        moves: list[tuple[int, _Group, frozenset[int]]]) -> str | None:
        view = _View(state, g.fields)
        answer: str | None
        try:
            answer = self.props[i].check(self.cfg, cast(EngineState, view))
            outside = frozenset(view.outside)
        except (TypeError, AttributeError):
            answer, outside = self.props[i].check(self.cfg, state), ALL_COMPONENTS
        if not outside <= g.reads:
            moves.append((i, g, g.reads | outside))
        return answer

    def _shared(self, answers: tuple[str | None, ...]) -> tuple[str | None, ...]:
        """One tuple object per distinct answer tuple (nearly all are all-None)."""
        return self._tuples.setdefault(answers, answers)
