"""Any model's states for the fast explorer: each canonical state whole, as one component.

The fast explorer (``checker/fast_explorer.py``) stores a state as the ids of
its components.  The scheduler spec's states are cut into seven
(``checker/packed.py``) and their properties memoized per component
(``checker/memo.py``); a model without such a cut (the joint worker model,
``checker/joint.py``) is stored here with one component, its canonical state,
interned by the model's fingerprint, and its *always* properties are the
model's own, evaluated once per distinct state.  ``Codec`` is what the
explorer and its expanders (``checker/fast_parallel.py``) ask of either.

Example:
    >>> from asyncspec.checker.spec_model import SpecModel
    >>> from asyncspec.spec.config import SpecConfig
    >>> m = SpecModel(SpecConfig(name="tiny", requests=((2, 1),), num_blocks=1, block_size=4))
    >>> w = WholePacker(m)
    >>> s = m.initial_states()[0]
    >>> w.canonical_ids(s), w.decode(w.canonical_ids(s)) == m.canonical(s)
    ((0,), True)
"""
from __future__ import annotations

from collections.abc import Callable, Collection, Hashable
from typing import Any, Protocol

from asyncspec.checker.model import Found, Model


class Codec(Protocol):
    """Interning tables per component, and the canonical form of a state as ids."""

    values: list[list[Any]]  # id -> value, per component

    def intern(self, component: int, value: Any) -> int:
        """The id of ``value`` in ``component``'s table (added if new)."""

    def canonical_ids(self, s: Any) -> tuple[int, ...]:
        """The ids of ``s``'s canonical form."""

    def decode(self, ids: tuple[int, ...]) -> Any:
        """The (canonical) state named by ``ids``."""

    def restore(self, values: list[list[Any]]) -> None:
        """Take over the tables of a checkpoint."""


class Checks(Protocol):
    """The *always* properties of the state named by some ids."""

    def check(self, ids: tuple[int, ...], decode: Callable[[tuple[int, ...]], Any],
              skip: set[str]) -> list[tuple[str, str]]:
        """(property, message) of each violated property not in ``skip``, in order."""


class WholePacker:
    """One component: the model's canonical states, told apart by their fingerprints."""

    def __init__(self, model: Model[Any, Any]) -> None:
        self.model = model
        self.values: list[list[Any]] = [[]]
        self._ids: dict[Hashable, int] = {}

    def intern(self, component: int, value: Any) -> int:
        """The id of the canonical state ``value`` (``component`` is 0)."""
        key = self.model.fingerprint(value)
        i = self._ids.get(key)
        if i is None:
            i = self._ids[key] = len(self.values[0])
            self.values[0].append(value)
        return i

    def canonical_ids(self, s: Any) -> tuple[int, ...]:
        """The id of ``model.canonical(s)``."""
        return (self.intern(0, self.model.canonical(s)),)

    def decode(self, ids: tuple[int, ...]) -> Any:
        """The canonical state with id ``ids[0]``."""
        return self.values[0][ids[0]]

    def restore(self, values: list[list[Any]]) -> None:
        """Take over the states of a checkpoint."""
        self.values, self._ids = [[]], {}
        for value in values[0]:
            self.intern(0, value)


class ModelChecks:
    """``model.always`` on the decoded state (each distinct state is checked once anyway)."""

    def __init__(self, model: Model[Any, Any]) -> None:
        self.model = model

    def check(self, ids: tuple[int, ...], decode: Callable[[tuple[int, ...]], Any],
              skip: Collection[str]) -> Found:
        """The model's violated properties in ``decode(ids)``, except those in ``skip``."""
        return self.model.always(decode(ids), skip)
