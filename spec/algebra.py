"""The arithmetic the per-request counter functions are written against.

The spec's counter arithmetic (``spec/request.py``) is written once, against the
small interface below, so that the same function runs on Python ints in the
checker and on z3 terms in the prover (``proofs/z3arith.py`` supplies the
z3 implementation).  Nothing here knows about vLLM.

Example:
    >>> from asyncspec.spec.algebra import CONCRETE as A
    >>> A.ite(3 > 2, 10, 20)
    10
    >>> A.max(A.lit(4), 7)
    7
"""
from __future__ import annotations

from typing import Any, Protocol


class Arith(Protocol):
    """Operations on integer and boolean values, concrete or symbolic.

    ``Int`` and ``Bool`` are ``int``/``bool`` at run time and z3 terms at proof
    time; the functions in ``spec/request.py`` use only ``+``, ``-``,
    comparisons and the methods below, never a Python ``if`` on a value.
    """

    def lit(self, value: int) -> Any:
        """An integer literal."""

    def true(self) -> Any:
        """The boolean constant true."""

    def false(self) -> Any:
        """The boolean constant false."""

    def ite(self, cond: Any, then: Any, other: Any) -> Any:
        """``then`` if ``cond`` else ``other`` (ints or bools)."""

    def and_(self, *conds: Any) -> Any:
        """Conjunction."""

    def or_(self, *conds: Any) -> Any:
        """Disjunction."""

    def not_(self, cond: Any) -> Any:
        """Negation."""

    def max(self, a: Any, b: Any) -> Any:
        """The larger of two ints."""

    def min(self, a: Any, b: Any) -> Any:
        """The smaller of two ints."""

    def div(self, a: Any, b: Any) -> Any:
        """Floor division of a non-negative int by a positive int."""


class ConcreteArith:
    """``Arith`` over Python ``int`` and ``bool``: what the checker runs."""

    def lit(self, value: int) -> int:
        return value

    def true(self) -> bool:
        return True

    def false(self) -> bool:
        return False

    def ite(self, cond: Any, then: Any, other: Any) -> Any:
        return then if cond else other

    def and_(self, *conds: Any) -> bool:
        return all(conds)

    def or_(self, *conds: Any) -> bool:
        return any(conds)

    def not_(self, cond: Any) -> bool:
        return not cond

    def max(self, a: int, b: int) -> int:
        return a if a >= b else b

    def min(self, a: int, b: int) -> int:
        return a if a <= b else b

    def div(self, a: int, b: int) -> int:
        return a // b


CONCRETE = ConcreteArith()
"""The one concrete instance; pass it wherever a spec function takes ``A``."""
