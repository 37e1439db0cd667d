"""The explored graph as flat arrays: about 40 bytes per state, no per-state objects.

A state is its component ids (seven for a spec state: ``checker/packed.py``;
one for a model stored whole: ``checker/whole.py``) packed into two bytes
each of one ``bytearray`` (four once some component has more than 65,535
distinct values: every key is then re-packed once); an open-addressing hash
table of ``int32`` slots maps a key to its index; ``parent`` and ``via`` (an action id) give shortest traces;
depth is kept as the first index of each BFS level; the edges are in CSR
form (``edge_start[i]``.. ``edge_start[i + 1]`` into ``edge_target``), filled
as states are expanded, which under BFS is in index order.

Python's ``hash`` only places keys in the table; nothing observable depends on
it, and a checkpoint stores the keys, not the table, so it is rebuilt on load.

Example:
    >>> g = PackedStore()
    >>> g.add((1, 2, 3, 4, 5, 6, 7), -1, 0, 0), g.add((1, 2, 3, 4, 5, 6, 7), -1, 0, 0)
    ((0, True), (0, False))
    >>> g.ids(0)
    (1, 2, 3, 4, 5, 6, 7)
"""
from __future__ import annotations

import struct
import sys
from array import array
from bisect import bisect_right
from operator import le, lt
from typing import Any

COMPONENTS = 7  # a spec state's (``checker/packed.py``); a model stored whole has one


class PackedStore:
    """Distinct states by index, with how each was first reached and its edges."""

    def __init__(self, arity: int = COMPONENTS) -> None:
        self.arity = arity
        self._narrow, self._wide = struct.Struct(f"<{arity}H"), struct.Struct(f"<{arity}I")  # ids < 2**16, < 2**32
        self.keys = bytearray()
        self.parent = array("i")  # -1 for initial states
        self.via = array("H")  # action id (0 = none, an initial state)
        self.level_start: list[int] = []  # first index of each BFS depth
        self.edge_start = array("I", [0])  # CSR offsets, one per expanded state (+1); < 2**32 edges
        self.edge_target = array("i")
        self.back_edges = 0  # edges i -> j with j <= i: without one the graph has no cycle
        self._key = self._narrow  # widened (every key re-packed) when an id reaches 2**16
        self._table = array("i", [-1]) * 1024
        self._mask = 1023

    def __len__(self) -> int:
        return len(self.parent)

    @property
    def expanded(self) -> int:
        """How many states have their edges recorded (a prefix of the indices)."""
        return len(self.edge_start) - 1

    # ------------------------------------------------------------ states

    def add(self, ids: tuple[int, ...], parent: int, via: int, depth: int) -> tuple[int, bool]:
        """Index of the state ``ids``, and whether it is new."""
        try:
            key = self._key.pack(*ids)
        except struct.error:
            if self._key is self._wide:
                raise
            self._widen()
            key = self._key.pack(*ids)
        width = self._key.size
        keys, table, mask = self.keys, self._table, self._mask
        slot = hash(key) & mask
        while True:
            i = table[slot]
            if i < 0:
                break
            o = i * width
            if keys[o:o + width] == key:
                return i, False
            slot = (slot + 1) & mask
        i = len(self.parent)
        table[slot] = i
        keys += key
        self.parent.append(parent)
        self.via.append(via)
        if depth == len(self.level_start):
            self.level_start.append(i)
        if 3 * (i + 1) > 2 * len(table):
            self._rebuild(2 * len(table))
        return i, True

    def ids(self, i: int) -> tuple[int, ...]:
        """The component ids of state ``i``."""
        return self._key.unpack_from(self.keys, i * self._key.size)

    def depth(self, i: int) -> int:
        """BFS depth of state ``i`` (the length of its shortest trace)."""
        return bisect_right(self.level_start, i) - 1

    @property
    def max_depth(self) -> int:
        return len(self.level_start) - 1 if self.level_start else 0

    def path_to(self, i: int) -> tuple[int, list[int]]:
        """The initial state's index and the action ids leading to state ``i``."""
        actions: list[int] = []
        while self.parent[i] >= 0:
            actions.append(self.via[i])
            i = self.parent[i]
        return i, actions[::-1]

    def _widen(self) -> None:
        """Re-pack every key with 4-byte ids (once, when some component passes 65,535 values)."""
        old = self._key
        self.keys = bytearray(b"".join(self._wide.pack(*ids) for ids in old.iter_unpack(bytes(self.keys))))
        self._key = self._wide
        self._rebuild(len(self._table))

    def _rebuild(self, size: int) -> None:
        table = array("i", [-1]) * size
        mask = size - 1
        keys, width = self.keys, self._key.size
        for i in range(len(self.parent)):
            o = i * width
            slot = hash(bytes(keys[o:o + width])) & mask
            while table[slot] >= 0:
                slot = (slot + 1) & mask
            table[slot] = i
        self._table, self._mask = table, mask

    # ------------------------------------------------------------ edges

    def add_edge(self, source: int, target: int) -> None:
        """Record ``source -> target``; ``source`` is the state being expanded."""
        self.edge_target.append(target)
        if target <= source:
            self.back_edges += 1

    def end_expansion(self) -> None:
        """Close the edge list of the state being expanded."""
        self.edge_start.append(len(self.edge_target))

    def successors(self, i: int) -> array[int]:
        """The targets of ``i``'s edges, in the order they were generated."""
        return self.edge_target[self.edge_start[i]:self.edge_start[i + 1]]

    # ------------------------------------------------------------ size, checkpoints

    def snapshot(self) -> dict[str, Any]:
        """Everything but the hash table (which depends on the process's hash seed): copies of the
        arrays (``ARRAYS`` names them) and three integers (``checker/checkpoint.py`` writes them)."""
        return {"arity": self.arity, "wide": self._key is self._wide, "back_edges": self.back_edges,
                "keys": array("B", self.keys), "parent": array("i", self.parent), "via": array("H", self.via),
                "level_start": array("q", self.level_start), "edge_start": array("I", self.edge_start),
                "edge_target": array("i", self.edge_target)}

    @classmethod
    def restore(cls, data: dict[str, Any], widths: list[int] | None = None) -> PackedStore:
        """The store ``snapshot`` described, with its hash table rebuilt; ``ValueError`` (one line)
        if the arrays do not form a store (``widths``: how many values each component has)."""
        problem = snapshot_problem(data, widths)
        if problem:
            raise ValueError(problem)
        g = cls(data["arity"])
        g.keys = bytearray(data["keys"])
        g._key = g._wide if data["wide"] else g._narrow
        g.parent = array("i", data["parent"])
        g.via = array("H", data["via"])
        g.level_start = list(data["level_start"])
        g.edge_start = array("I", data["edge_start"])
        g.edge_target = array("i", data["edge_target"])
        g.back_edges = data["back_edges"]
        size = 1024
        while 3 * len(g.parent) > 2 * size:
            size *= 2
        g._rebuild(size)
        return g


ARRAYS = {"keys": "B", "parent": "i", "via": "H", "level_start": "q", "edge_start": "I", "edge_target": "i"}
"""The arrays of a snapshot and their ``array`` typecodes."""


def snapshot_problem(data: dict[str, Any], widths: list[int] | None = None) -> str | None:
    """What makes ``data`` no snapshot of a store (lengths, parents before children, indices in
    range, ids below ``widths``), or ``None``; a store that passes cannot index out of range."""
    arity, wide, back = data.get("arity"), data.get("wide"), data.get("back_edges")
    if type(arity) is not int or not 1 <= arity <= 64 or type(wide) is not bool or type(back) is not int:
        return "the store's arity, key width or back-edge count is malformed"
    if any(not isinstance(data.get(k), array) or data[k].typecode != code for k, code in ARRAYS.items()):
        return "a store array is missing or of the wrong type"
    parent, level, start, target = data["parent"], data["level_start"], data["edge_start"], data["edge_target"]
    n, width = len(parent), arity * (4 if wide else 2)
    if len(data["keys"]) != n * width or len(data["via"]) != n:
        return "the store's keys or actions do not match its number of states"
    if n and not all(map(lt, parent, range(n))) or min(parent, default=-1) < -1:
        return "a state whose parent is not an earlier state"
    if n and (not level or level[0] != 0) or not all(map(lt, level, level[1:])) or max(level, default=0) >= max(n, 1):
        return "the store's BFS levels are not increasing state indices"
    if not start or start[0] != 0 or start[-1] != len(target) or not all(map(le, start, start[1:])) \
            or len(start) - 1 > n or not 0 <= back <= len(target):
        return "the store's edge offsets do not match its edges"
    if min(target, default=0) < 0 or max(target, default=0) >= max(n, 1):
        return "an edge to a state that does not exist"
    if widths is not None:
        if len(widths) != arity:
            return f"{len(widths)} value tables for a store of {arity} components"
        ids = array("I" if wide else "H")
        ids.frombytes(data["keys"])
        if sys.byteorder == "big":
            ids.byteswap()
        for c in range(arity):
            if max(ids[c::arity], default=-1) >= widths[c]:
                return f"a state names a value of component {c} that its table does not hold"
    return None
