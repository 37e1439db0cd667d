"""The arithmetic the per-request counter functions are written against.

The spec's counter arithmetic (``spec/request.py``) is written once, against the
small interface below, so that the same function runs on Python ints in the
checker and on z3 terms in the prover (``proofs/z3arith.py`` supplies the
z3 implementation).  Nothing here knows about vLLM.

The two value types are type variables: ``Int`` (an integer counter) and
``Bool`` (a flag or a condition).  ``Arith[Int, Bool]`` is an arithmetic over
them; a counter function takes ``A: Arith[Int, Bool]`` and counters of the same
``Int`` and ``Bool``.  Both default to the concrete types, so a bare ``Arith``
or ``RequestCounters`` is the checker's ``int``/``bool`` one; z3 is untyped, so
the prover's values are ``Any``.

Example:
    >>> from asyncspec.spec.algebra import CONCRETE as A
    >>> A.ite(3 > 2, 10, 20)
    10
    >>> A.max(A.lit(4), 7)
    7
"""
from __future__ import annotations

from typing import Any, Protocol, Self

from typing_extensions import TypeVar


class IntTerm(Protocol):
    """What ``spec/request.py`` does to an integer value with Python operators:
    ``+``, ``-``, ``*`` with its own kind or an ``int`` literal, and comparisons.

    A comparison is a ``Bool`` of the same arithmetic (``bool`` for an ``int``, a z3
    ``BoolRef`` for a z3 term); a protocol cannot name that type, so it is ``Any``.
    """

    def __add__(self, other: Self | int, /) -> Self: ...
    def __radd__(self, other: int, /) -> Self: ...
    def __sub__(self, other: Self | int, /) -> Self: ...
    def __rsub__(self, other: int, /) -> Self: ...
    def __mul__(self, other: Self | int, /) -> Self: ...
    def __lt__(self, other: Self | int, /) -> Any: ...
    def __le__(self, other: Self | int, /) -> Any: ...
    def __gt__(self, other: Self | int, /) -> Any: ...
    def __ge__(self, other: Self | int, /) -> Any: ...
    def __eq__(self, other: object, /) -> Any: ...
    def __ne__(self, other: object, /) -> Any: ...


Int = TypeVar("Int", bound=IntTerm, default=int)
"""An integer value: ``int`` in the checker, a z3 ``ArithRef`` in the prover."""

Bool = TypeVar("Bool", default=bool)
"""A boolean value: ``bool`` in the checker, a z3 ``BoolRef`` in the prover."""

Value = TypeVar("Value")
"""Either kind, in ``Arith.ite``."""


ZERO: Any = 0
"""``0`` as the default of an ``Int`` field, in either arithmetic (mypy cannot type a literal as ``Int``)."""

FALSE: Any = False
"""``False`` as the default of a ``Bool`` field, in either arithmetic."""


class Arith(Protocol[Int, Bool]):
    """Operations on integer and boolean values, concrete or symbolic.

    ``Int`` and ``Bool`` are ``int``/``bool`` at run time and z3 terms at proof
    time; the functions in ``spec/request.py`` use only ``+``, ``-``,
    comparisons and the methods below, never a Python ``if`` on a value.
    """

    def lit(self, value: int) -> Int:
        """An integer literal."""

    def true(self) -> Bool:
        """The boolean constant true."""

    def false(self) -> Bool:
        """The boolean constant false."""

    def ite(self, cond: Bool, then: Value, other: Value) -> Value:
        """``then`` if ``cond`` else ``other`` (ints or bools)."""

    def and_(self, *conds: Bool) -> Bool:
        """Conjunction."""

    def or_(self, *conds: Bool) -> Bool:
        """Disjunction."""

    def not_(self, cond: Bool) -> Bool:
        """Negation."""

    def max(self, a: Int, b: Int) -> Int:
        """The larger of two ints."""

    def min(self, a: Int, b: Int) -> Int:
        """The smaller of two ints."""

    def div(self, a: Int, b: Int) -> Int:
        """Floor division of a non-negative int by a positive int."""


class ConcreteArith:
    """``Arith`` over Python ``int`` and ``bool``: what the checker runs."""

    def lit(self, value: int) -> int:
        return value

    def true(self) -> bool:
        return True

    def false(self) -> bool:
        return False

    def ite(self, cond: bool, then: Value, other: Value) -> Value:
        return then if cond else other

    def and_(self, *conds: bool) -> bool:
        return all(conds)

    def or_(self, *conds: bool) -> bool:
        return any(conds)

    def not_(self, cond: bool) -> bool:
        return not cond

    def max(self, a: int, b: int) -> int:
        return a if a >= b else b

    def min(self, a: int, b: int) -> int:
        return a if a <= b else b

    def div(self, a: int, b: int) -> int:
        return a // b


CONCRETE = ConcreteArith()
"""The one concrete instance; pass it wherever a spec function takes ``A``."""
