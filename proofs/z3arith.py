"""``Arith`` over z3 terms: the spec's counter arithmetic, evaluated symbolically.

``spec/request.py`` is written once against ``spec/algebra.Arith``; passing
``Z3 = Z3Arith()`` instead of ``CONCRETE`` turns every function there into a
z3 term builder, so the prover never re-writes the counter arithmetic.

Example:
    >>> import z3
    >>> z3.simplify(Z3.max(Z3.lit(4), 7))
    7
    >>> z3.simplify(Z3.div(Z3.lit(7), 2) * 2)
    6
"""
from __future__ import annotations

from typing import Any

import z3


def _int(value: Any) -> Any:
    """A z3 integer term for ``value`` (an int or already a term)."""
    return z3.IntVal(value) if isinstance(value, int) and not isinstance(value, bool) else value


def _bool(value: Any) -> Any:
    """A z3 boolean term for ``value`` (a bool or already a term)."""
    return z3.BoolVal(value) if isinstance(value, bool) else value


class Z3Arith:
    """``Arith`` over z3 ``Int``/``Bool`` terms (``ite`` is ``z3.If``)."""

    def lit(self, value: int) -> Any:
        """An integer literal (a term is passed through, e.g. a symbolic block size)."""
        return _int(value)

    def true(self) -> Any:
        return z3.BoolVal(True)

    def false(self) -> Any:
        return z3.BoolVal(False)

    def ite(self, cond: Any, then: Any, other: Any) -> Any:
        if isinstance(then, bool) or isinstance(other, bool) or z3.is_bool(then) or z3.is_bool(other):
            return z3.If(_bool(cond), _bool(then), _bool(other))
        return z3.If(_bool(cond), _int(then), _int(other))

    def and_(self, *conds: Any) -> Any:
        return z3.And(*[_bool(c) for c in conds])

    def or_(self, *conds: Any) -> Any:
        return z3.Or(*[_bool(c) for c in conds])

    def not_(self, cond: Any) -> Any:
        return z3.Not(_bool(cond))

    def max(self, a: Any, b: Any) -> Any:
        a, b = _int(a), _int(b)
        return z3.If(a >= b, a, b)

    def min(self, a: Any, b: Any) -> Any:
        a, b = _int(a), _int(b)
        return z3.If(a <= b, a, b)

    def div(self, a: Any, b: Any) -> Any:
        """Floor division; z3's integer ``/`` is floor division for a positive divisor."""
        return _int(a) / _int(b)


Z3 = Z3Arith()
"""The one symbolic instance; pass it wherever a spec function takes ``A``."""
