"""States as a few small integers: interned components, canonical form on ids.

An ``EngineState`` is cut into seven *components* (groups of fields that change
together); each distinct component value is stored once and named by a small
integer, so a state is seven integers (``PackedState``), packed into 14 bytes
by the store (``checker/store.py``).  On the largest configs only a few
hundred distinct values of each component occur, so everything computed from
a component alone is computed once.

The canonical form (``checker/symmetry.py``: block ids renamed by first use,
step fences shifted) is computed per component and memoized on (component
id, block renaming id, shift); ``decode(canonical_ids(t))`` equals
``symmetry.canonical(t)`` for every state (``tests/test_fast_explorer.py``).

Example:
    >>> from asyncspec.spec.config import SpecConfig
    >>> from asyncspec.spec.state import initial_states
    >>> from asyncspec.checker.symmetry import canonical
    >>> cfg = SpecConfig(name="x", requests=((4, 2),), num_blocks=2)
    >>> p = Packer(symmetry=True)
    >>> s = initial_states(cfg)[0]
    >>> p.decode(p.canonical_ids(s)) == canonical(s)
    True
"""
from __future__ import annotations

from operator import attrgetter
from types import SimpleNamespace
from typing import Any, cast

from asyncspec.spec.state import DeferredFree, EngineState

from asyncspec.checker.symmetry import _block_order, _rename_hashes, _rename_step, _rename_swa

PackedState = tuple[int, int, int, int, int, int, int]

COUNTERS, TABLES, QUEUES, BATCH, POOL, PARAMS, MISC = range(7)
COMPONENTS = ("counters", "block_tables", "queues", "batch", "pool", "params", "misc")

_GROUPED: tuple[tuple[str, ...], ...] = (
    ("counters",), ("block_tables", "swa_block_tables", "mamba_tables"), ("waiting", "running"),
    ("batch_queue", "deferred_step"),
    ("free_blocks", "block_hashes", "deferred_frees"), ("params",),
)
MISC_FIELDS = tuple(f for f in EngineState._fields if not any(f in g for g in _GROUPED))
"""Every other field (parameters, step fences, flags), in ``EngineState`` order."""
_FIELDS = (*_GROUPED, MISC_FIELDS)

FIELD_COMPONENT: dict[str, int] = {f: c for c, group in enumerate(_FIELDS) for f in group}
"""Which component holds each ``EngineState`` field (every field is listed)."""

_SEQ = MISC_FIELDS.index("sched_step_seq")
_PROCESSED = MISC_FIELDS.index("processed_step_seq")
_STORE_JOBS = MISC_FIELDS.index("store_jobs")  # kv_offloading: the misc fields that hold block ids
_OFFLOAD_TABLES = MISC_FIELDS.index("offload_tables")
_GETTERS = tuple(attrgetter(*group) for group in _FIELDS)  # one field: the value; several: a tuple
# where each EngineState field is found: (component, position in it, or -1 for a one-field component)
_PLAN = tuple((FIELD_COMPONENT[f], _FIELDS[FIELD_COMPONENT[f]].index(f) if len(_FIELDS[FIELD_COMPONENT[f]]) > 1
               else -1) for f in EngineState._fields)


def _make_decoder() -> Any:
    """``decode(values, ids)`` written out for ``EngineState``'s fields (generated from
    ``_PLAN``: a few times faster than a loop, and follows any field the spec adds)."""
    parts = ", ".join(f"v[{c}][ids[{c}]]" + ("" if k < 0 else f"[{k}]") for c, k in _PLAN)
    namespace: dict[str, Any] = {"new": tuple.__new__, "EngineState": EngineState}
    exec(f"def decode(v, ids):\n    return new(EngineState, ({parts},))\n", namespace)
    return namespace["decode"]


_decode = _make_decoder()


class Packer:
    """Interning tables for the seven components, and the canonical form on ids."""

    def __init__(self, symmetry: bool = True) -> None:
        self.symmetry = symmetry
        self.values: list[list[Any]] = [[] for _ in COMPONENTS]  # id -> value, per component
        self.ids: list[dict[Any, int]] = [{} for _ in COMPONENTS]  # value -> id, per component
        self._order: dict[tuple[int, int], tuple[int, dict[int, int]]] = {}  # (tables, pool) -> renaming
        self._renamings: dict[tuple[tuple[int, int], ...], int] = {}
        self._canon: dict[tuple[int, int, int, int], int] = {}  # (component, id, renaming, shift) -> id

    # ------------------------------------------------------------ interning

    def intern(self, component: int, value: Any) -> int:
        """The id of ``value`` in ``component``'s table (added if new)."""
        table = self.ids[component]
        i = table.get(value)
        if i is None:
            i = len(self.values[component])
            table[value] = i
            self.values[component].append(value)
        return i

    def pack(self, s: EngineState) -> PackedState:
        """The ids of ``s``'s components, as they are (no canonical form)."""
        g, intern = _GETTERS, self.intern
        return (intern(0, g[0](s)), intern(1, g[1](s)), intern(2, g[2](s)), intern(3, g[3](s)),
                intern(4, g[4](s)), intern(5, g[5](s)), intern(6, g[6](s)))

    def decode(self, ids: PackedState | tuple[int, ...]) -> EngineState:
        """The ``EngineState`` named by ``ids``."""
        return cast(EngineState, _decode(self.values, ids))

    def field(self, ids: PackedState | tuple[int, ...], name: str) -> Any:
        """One field of the state named by ``ids``, without decoding the rest."""
        c, k = _PLAN[EngineState._fields.index(name)]
        value = self.values[c][ids[c]]
        return value if k < 0 else value[k]

    def restore(self, values: list[list[Any]]) -> None:
        """Take over the tables of a checkpoint (``values``, as saved)."""
        self.values = [list(v) for v in values]
        self.ids = [{value: i for i, value in enumerate(v)} for v in self.values]

    # ------------------------------------------------------------ canonical form

    def canonical_ids(self, s: EngineState) -> PackedState:
        """The ids of ``symmetry.canonical(s)`` (of ``s`` itself without symmetry)."""
        raw = self.pack(s)
        if not self.symmetry:
            return raw
        renaming, m = self._renaming(raw[TABLES], raw[POOL])
        shift = self.values[MISC][raw[MISC]][_PROCESSED]
        return (
            self._canonical(COUNTERS, raw[COUNTERS], 0, shift, m),
            self._canonical(TABLES, raw[TABLES], renaming, 0, m),
            raw[QUEUES],
            self._canonical(BATCH, raw[BATCH], renaming, shift, m),
            self._canonical(POOL, raw[POOL], renaming, shift, m),
            raw[PARAMS],
            self._canonical(MISC, raw[MISC], renaming if _holds_blocks(self.values[MISC][raw[MISC]]) else 0, shift, m),
        )

    def _renaming(self, tables: int, pool: int) -> tuple[int, dict[int, int]]:
        key = (tables, pool)
        hit = self._order.get(key)
        if hit is None:
            free_blocks, _, deferred_frees = self.values[POOL][pool]
            block_tables, swa_block_tables, mamba_tables = self.values[TABLES][tables]
            view = SimpleNamespace(block_tables=block_tables, swa_block_tables=swa_block_tables,
                                   mamba_tables=mamba_tables,
                                   deferred_frees=deferred_frees, free_blocks=free_blocks)
            m = _block_order(cast(EngineState, view))
            as_tuple = tuple(sorted(m.items()))
            hit = self._renamings.setdefault(as_tuple, len(self._renamings)), m
            self._order[key] = hit
        return hit

    def _canonical(self, component: int, i: int, renaming: int, shift: int, m: dict[int, int]) -> int:
        key = (component, i, renaming, shift)
        hit = self._canon.get(key)
        if hit is None:
            hit = self.intern(component, _RENAME[component](self.values[component][i], m, shift))
            self._canon[key] = hit
        return hit


# Per-component halves of ``symmetry.canonical`` (the step and hash renamings are its own functions).

def _counters(counters: Any, m: dict[int, int], shift: int) -> Any:
    if not shift:
        return counters
    return tuple(c._replace(last_sched_seq=max(c.last_sched_seq - shift, 0)) for c in counters)


def _tables(value: Any, m: dict[int, int], shift: int) -> Any:
    tables, swa_tables, mamba_tables = value  # a second group's NULL_BLOCK entries keep their value
    return tuple(tuple(m[b] for b in t) for t in tables), _rename_swa(swa_tables, m), _rename_swa(mamba_tables, m)


def _batch(value: Any, m: dict[int, int], shift: int) -> Any:
    batch_queue, deferred_step = value
    return (tuple(_rename_step(step, m, shift) for step in batch_queue),
            None if deferred_step is None else _rename_step(deferred_step, m, shift))


def _pool(value: Any, m: dict[int, int], shift: int) -> Any:
    free_blocks, block_hashes, deferred_frees = value
    return (
        tuple(m[b] for b in free_blocks),
        _rename_hashes(block_hashes, m),
        tuple(DeferredFree(max(e.fence - shift, 0), tuple(m[b] for b in e.evict_first),
                           tuple(m[b] for b in e.evict_last)) for e in deferred_frees),
    )


def _holds_blocks(misc: Any) -> bool:
    """Whether a misc value names block ids (the offloading connector's store jobs and tables)."""
    return bool(misc[_STORE_JOBS]) or any(misc[_OFFLOAD_TABLES])


def _misc(value: Any, m: dict[int, int], shift: int) -> Any:
    out = list(value)
    out[_SEQ] -= shift
    out[_PROCESSED] = 0
    if _holds_blocks(value):
        out[_STORE_JOBS] = tuple(j._replace(blocks=tuple(m[b] for b in j.blocks)) for j in value[_STORE_JOBS])
        out[_OFFLOAD_TABLES] = tuple(tuple(m[b] for b in t) for t in value[_OFFLOAD_TABLES])
    return tuple(out)


def _unchanged(value: Any, m: dict[int, int], shift: int) -> Any:
    return value


_RENAME = (_counters, _tables, _unchanged, _batch, _pool, _unchanged, _misc)
