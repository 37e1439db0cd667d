"""Checkpoint values as plain JSON data, and back: only known types are ever built.

A checkpoint (``checker/checkpoint.py``) holds the explorer's interned component
values and actions: ``None``, booleans, integers, floats, strings, tuples, lists,
dicts, frozensets and the ``NamedTuple`` classes of the spec and of the checker's
models (``KNOWN_MODULES``, listed here in code).  A tuple is a JSON array; a
``NamedTuple`` is ``{"n": i, "v": [fields]}`` where ``i`` indexes the file's
list of type names; a list, a frozenset and a dict are ``{"l": ...}``,
``{"f": ...}`` and ``{"d": [[key, value], ...]}``.  Decoding builds only those
types, looked up in a table built from ``KNOWN_MODULES``; nothing in a file is
evaluated or imported.

Example:
    >>> from asyncspec.spec.engine import Action
    >>> enc = Encoder()
    >>> data = enc.encode((Action("abort", 1), None, frozenset({"x"})))
    >>> data, enc.types
    ([{'n': 0, 'v': ['abort', 1, [], None]}, None, {'f': ['x']}], ['spec.engine.Action'])
    >>> decode(data, enc.types) == (Action("abort", 1), None, frozenset({"x"}))
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

_SCALARS = (type(None), bool, int, float, str)


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
    """Turns values into JSON data, collecting the names of the ``NamedTuple`` types it met."""

    def __init__(self) -> None:
        self.types: list[str] = []
        self._index: dict[type, int] = {}
        self._names = {cls: name for name, cls in known_types().items()}

    def encode(self, value: Any) -> Any:
        """``value`` as JSON data; ``TypeError`` for a type a checkpoint cannot hold."""
        kind = type(value)
        if kind is tuple:
            return [self.encode(v) for v in value]
        if kind in _SCALARS:
            return value
        if kind is list:
            return {"l": [self.encode(v) for v in value]}
        if kind is frozenset:
            return {"f": [self.encode(v) for v in value]}
        if kind is dict:
            return {"d": [[self.encode(k), self.encode(v)] for k, v in value.items()]}
        return {"n": self._type_index(kind), "v": [self.encode(v) for v in value]}

    def _type_index(self, kind: type) -> int:
        i = self._index.get(kind)
        if i is None:
            name = self._names.get(kind)
            if name is None:
                raise TypeError(f"a checkpoint cannot hold a {kind.__module__}.{kind.__qualname__}")
            i = self._index[kind] = len(self.types)
            self.types.append(name)
        return i


def decode(data: Any, types: Any) -> Any:
    """The value ``Encoder.encode`` gave ``data`` for, ``types`` its list of type names;
    ``ValueFormatError`` for anything else."""
    if not isinstance(types, list) or not all(isinstance(t, str) for t in types):
        raise ValueFormatError("the type names are not a list of strings")
    table = known_types()
    unknown = [t for t in types if t not in table]
    if unknown:
        raise ValueFormatError(f"unknown type {unknown[0][:80]!r}")
    try:
        return _decode(data, [table[t] for t in types], 0)
    except TypeError as exc:  # an unhashable member of a frozenset or a dict key
        raise ValueFormatError(f"a value that cannot be built ({exc})".splitlines()[0]) from None


def _decode(data: Any, classes: list[type], depth: int) -> Any:
    if depth > MAX_DEPTH:
        raise ValueFormatError(f"values nested deeper than {MAX_DEPTH} levels")
    kind = type(data)
    if kind is list:
        return tuple([_decode(v, classes, depth + 1) for v in data])
    if kind in _SCALARS:
        return data
    if kind is not dict or len(data) not in (1, 2):
        raise ValueFormatError(f"a value of JSON type {kind.__name__} where a checkpoint value belongs")
    items = _items(data, depth)
    if "n" in data:
        i = data.get("n")
        if type(i) is not int or not 0 <= i < len(classes) or set(data) != {"n", "v"}:
            raise ValueFormatError("a malformed named tuple")
        cls = classes[i]
        fields = [_decode(v, classes, depth + 1) for v in items]
        if len(fields) != len(cls._fields):  # type: ignore[attr-defined]
            raise ValueFormatError(f"{cls.__qualname__} with {len(fields)} fields, not {len(cls._fields)}")  # type: ignore[attr-defined]
        return cls._make(fields)  # type: ignore[attr-defined]
    if "l" in data:
        return [_decode(v, classes, depth + 1) for v in items]
    if "f" in data:
        return frozenset(_decode(v, classes, depth + 1) for v in items)
    pairs = [_decode(v, classes, depth + 1) for v in items]
    if not all(type(p) is tuple and len(p) == 2 for p in pairs):
        raise ValueFormatError("a dict entry that is not a [key, value] pair")
    return dict(pairs)


def _items(data: dict[str, Any], depth: int) -> list[Any]:
    """The list a tagged object wraps (``v``, ``l``, ``f`` or ``d``)."""
    keys = set(data)
    if keys not in ({"n", "v"}, {"l"}, {"f"}, {"d"}):
        raise ValueFormatError(f"an object with keys {sorted(keys)[:4]} where a checkpoint value belongs")
    items = data.get("v", data.get("l", data.get("f", data.get("d"))))
    if type(items) is not list:
        raise ValueFormatError("a tagged value whose contents are not a list")
    return items
