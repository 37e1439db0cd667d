"""Checkpoint values as plain JSON data, and back: only known types are ever built.

A checkpoint (``checker/checkpoint.py``) holds the explorer's interned component
values and actions: ``None``, booleans, integers, floats, strings, tuples, lists,
dicts, frozensets and the ``NamedTuple`` classes of the spec and of the checker's
models (``KNOWN_MODULES``, listed here in code).  A tuple is a JSON array; a list,
a frozenset and a dict are ``{"l": ...}``, ``{"f": ...}`` and ``{"d": [[key,
value], ...]}``; a ``NamedTuple`` is ``{"p": k}``, entry ``k`` of the *pool*:
``[i, [fields]]``, ``i`` indexing the list of type names.  A named tuple met
twice (the same object, as pickle's memo would see it) is pooled once and
shared again when read.  Decoding builds only those types, looked up in a table
built from ``KNOWN_MODULES``; nothing in a file is evaluated or imported.

Example:
    >>> from asyncspec.spec.engine import Action
    >>> enc, a = Encoder(), Action("abort", 1)
    >>> data = enc.encode((a, None, frozenset({"x"}), a))
    >>> data, enc.pool, enc.types
    ([{'p': 0}, None, {'f': ['x']}, {'p': 0}], [[0, ['abort', 1, [], None]]], ['spec.engine.Action'])
    >>> Decoder(enc.types, enc.pool).decode(data) == (a, None, frozenset({"x"}), a)
    True
"""
from __future__ import annotations

import importlib
from functools import cache
from typing import Any

KNOWN_MODULES = ("asyncspec.spec.state", "asyncspec.spec.request", "asyncspec.spec.engine",
                 "asyncspec.spec.worker", "asyncspec.checker.joint")
"""The modules whose ``NamedTuple`` classes a checkpoint may hold (fixed here, never read from a file)."""

MAX_DEPTH = 64
"""Deeper data is refused (a state nests a dozen levels at most)."""

_SCALARS = frozenset({type(None), bool, int, float, str})


class ValueFormatError(ValueError):
    """Data that does not decode to a known value (the message is one line)."""


@cache
def known_types() -> dict[str, type]:
    """Type name (``spec.state.Step``) -> ``NamedTuple`` class, for every one in ``KNOWN_MODULES``."""
    table: dict[str, type] = {}
    for name in KNOWN_MODULES:
        module = importlib.import_module(name)
        for obj in vars(module).values():
            if isinstance(obj, type) and issubclass(obj, tuple) and hasattr(obj, "_fields") \
                    and obj.__module__ == name:
                table[f"{name.removeprefix('asyncspec.')}.{obj.__qualname__}"] = obj
    return table


class Encoder:
    """Turns values into JSON data, collecting the pool of named tuples and their type names."""

    def __init__(self) -> None:
        self.types: list[str] = []
        self.pool: list[list[Any]] = []  # [type index, [fields]] per distinct named-tuple object
        self._index: dict[type, int] = {}
        self._names = {cls: name for name, cls in known_types().items()}
        self._memo: dict[int, int] = {}  # id(named tuple) -> pool index
        self._kept: list[Any] = []  # what the memo names stays alive, so no id is reused

    def encode(self, value: Any) -> Any:
        """``value`` as JSON data; ``TypeError`` for a type a checkpoint cannot hold."""
        kind = type(value)
        if kind is tuple:
            return [v if type(v) in _SCALARS else self.encode(v) for v in value]
        if kind in _SCALARS:
            return value
        if kind is list:
            return {"l": [self.encode(v) for v in value]}
        if kind is frozenset:
            return {"f": [self.encode(v) for v in value]}
        if kind is dict:
            return {"d": [[self.encode(k), self.encode(v)] for k, v in value.items()]}
        k = self._memo.get(id(value))
        if k is None:
            entry = [self._type_index(kind), [v if type(v) in _SCALARS else self.encode(v) for v in value]]
            k = self._memo[id(value)] = len(self.pool)
            self.pool.append(entry)
            self._kept.append(value)
        return {"p": k}

    def _type_index(self, kind: type) -> int:
        i = self._index.get(kind)
        if i is None:
            name = self._names.get(kind)
            if name is None:
                raise TypeError(f"a checkpoint cannot hold a {kind.__module__}.{kind.__qualname__}")
            i = self._index[kind] = len(self.types)
            self.types.append(name)
        return i


class Decoder:
    """Builds the values ``Encoder`` wrote, given its type names and pool; ``ValueFormatError``
    (one line) for anything else."""

    def __init__(self, types: Any, pool: Any) -> None:
        if not isinstance(types, list) or not all(isinstance(t, str) for t in types):
            raise ValueFormatError("the type names are not a list of strings")
        table = known_types()
        unknown = [t for t in types if t not in table]
        if unknown:
            raise ValueFormatError(f"unknown type {unknown[0][:80]!r}")
        if not isinstance(pool, list):
            raise ValueFormatError("the pool of named tuples is not a list")
        self.classes = [table[t] for t in types]
        self.built: list[Any] = []
        for entry in pool:
            if type(entry) is not list or len(entry) != 2 or type(entry[0]) is not int \
                    or not 0 <= entry[0] < len(self.classes) or type(entry[1]) is not list:
                raise ValueFormatError("a malformed entry in the pool of named tuples")
            cls: Any = self.classes[entry[0]]
            if len(entry[1]) != len(cls._fields):
                raise ValueFormatError(f"{cls.__qualname__} with {len(entry[1])} fields, not {len(cls._fields)}")
            self.built.append(cls._make(self.decode(entry[1])))

    def decode(self, data: Any) -> Any:
        """The value of ``data`` (named tuples: those of the pool built so far)."""
        try:
            return self._decode(data, 0)
        except TypeError as exc:  # an unhashable member of a frozenset or a dict key
            raise ValueFormatError(f"a value that cannot be built ({exc})".splitlines()[0]) from None

    def _decode(self, data: Any, depth: int) -> Any:
        if depth > MAX_DEPTH:
            raise ValueFormatError(f"values nested deeper than {MAX_DEPTH} levels")
        kind = type(data)
        if kind is list:
            return tuple([v if type(v) in _SCALARS else self._decode(v, depth + 1) for v in data])
        if kind in _SCALARS:
            return data
        if kind is not dict or len(data) != 1:
            raise ValueFormatError(f"a value of JSON type {kind.__name__} where a checkpoint value belongs")
        (tag, items), = data.items()
        if tag == "p":
            if type(items) is not int or not 0 <= items < len(self.built):
                raise ValueFormatError("a reference to a named tuple the pool does not hold (yet)")
            return self.built[items]
        if type(items) is not list or tag not in ("l", "f", "d"):
            raise ValueFormatError(f"an object tagged {str(tag)[:20]!r} where a checkpoint value belongs")
        values = [self._decode(v, depth + 1) for v in items]
        if tag == "l":
            return values
        if tag == "f":
            return frozenset(values)
        if not all(type(p) is tuple and len(p) == 2 for p in values):
            raise ValueFormatError("a dict entry that is not a [key, value] pair")
        return dict(values)
