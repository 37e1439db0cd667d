"""Checkpoint values checked against the model's shape before the explorer uses any of them.

A checkpoint's SHA-256 (``checker/checkpoint_format.py``) proves the file whole, not that it was
written by this tool: anyone can recompute it.  So every value a resumed run would hand to the spec
is checked first, and a value that does not fit is one line naming it (``ValueError``, which
``checker/checkpoint.py`` turns into "a malformed checkpoint"):

* its *type*, field by field, against the annotations of the ``NamedTuple`` classes of the spec
  (``spec/state.py``, ``spec/request.py``, ``spec/worker.py``) and of the checker's models: a
  request's counters are integers, a batch queue a tuple of ``Step``, and so on;
* for the scheduler spec (``checker/spec_model.py``, ``checker/packed.py``'s seven components):
  one entry per request where the spec keeps one, request ids below the number of requests, block
  ids below ``num_blocks``, each request's parameters those of one of the config's initial states,
  the actions the spec's ``Action`` over the config's requests;
* its *range*: no negative count (only the worker's token markers and slots, ``spec/worker.py``,
  go below zero, to -5), and no integer past what the config can reach (``value_bound``).
"""
from __future__ import annotations

import types
import typing
from collections.abc import Iterator
from functools import cache
from typing import Any, Literal, Union, get_args, get_origin

from asyncspec.spec.config import SpecConfig
from asyncspec.spec.engine import Action
from asyncspec.spec.state import NULL_BLOCK, EngineState, initial_states

from asyncspec.checker import packed

LOWEST_WORKER_INT = -5
"""The lowest integer a worker state holds: ``spec/worker.py``'s ``RESAMPLED`` marker (-1, -5)."""

REQUEST_INDEXED = ("params", "counters", "block_tables")
"""``EngineState`` fields with one entry per request."""
REQUEST_IDS = {"waiting", "running", "kv_holding", "kv_transfer", "StepEntry.req", "BlockHash.req",
               "StoreJob.req", "offload_finished"}
"""Fields (``EngineState`` fields, or ``Class.field`` inside one) whose integers name a request."""
BLOCK_IDS = {"free_blocks", "block_tables", "swa_block_tables", "StepEntry.written_blocks",
             "DeferredFree.evict_first", "DeferredFree.evict_last", "StoreJob.blocks", "offload_tables"}
"""Fields whose integers name a KV block (``swa_block_tables`` may hold ``NULL_BLOCK``)."""


class Limits(typing.NamedTuple):
    """What one model's integers may be: the lowest, the highest, and the id ranges."""

    lowest: int
    highest: int
    requests: int
    blocks: int


def value_bound(cfg: SpecConfig, depth: int) -> int:
    """The highest integer a state of ``cfg`` explored ``depth`` steps deep can hold: a token count is
    at most a prompt plus its outputs and the drafts ahead, a step number at most the depth (unshifted
    without symmetry), a block id below ``num_blocks``; four times their sum is a wide margin."""
    tokens = sum(p + m for p, m in cfg.requests) + cfg.batch_queue_depth * (cfg.num_speculative_tokens + 1)
    return 4 * (tokens + cfg.num_blocks + len(cfg.requests) + cfg.token_budget + cfg.forced_preemptions
                + (cfg.max_model_len or 0) + depth + 16)


def store_problem(parent: Any, level_start: Any, edge_start: Any, edge_target: Any, back_edges: int,
                  transitions: int) -> str | None:
    """What the store's arrays say twice and must say alike: each state's BFS level is its parent's plus
    one (``level_start`` the first state of each), one edge per transition, the back edges counted."""
    depth: list[int] = []
    for p in parent:
        depth.append(0 if p < 0 else depth[p] + 1)
    firsts = [i for i, d in enumerate(depth) if i == 0 or d != depth[i - 1]]
    if any(b < a for a, b in zip(depth, depth[1:])) or list(level_start) != firsts \
            or any(depth[i] != d for d, i in enumerate(firsts)):
        return "its BFS levels do not follow from its parents"
    if transitions != len(edge_target):
        return f"{transitions} transitions for {len(edge_target)} edges"
    back = sum(1 for i in range(len(edge_start) - 1) for j in range(edge_start[i], edge_start[i + 1])
               if edge_target[j] <= i)
    return None if back == back_edges else f"{back_edges} back edges counted, {back} in its edges"


# ---------------------------------------------------------------- types, from the annotations


@cache
def _hints(cls: type) -> tuple[tuple[str, Any], ...]:
    return tuple(typing.get_type_hints(cls).items())


def type_problem(value: Any, hint: Any, where: str, limits: Limits) -> str | None:
    """Why ``value`` is not of type ``hint`` within ``limits`` (naming the place ``where``), or ``None``."""
    if isinstance(hint, typing.TypeVar):  # spec/algebra.py's Int and Bool: int and bool here
        hint = getattr(hint, "__default__", hint.__bound__)
    origin = get_origin(hint)
    if hint is int:
        if type(value) is not int:
            return f"{where} is {_kind(value)}, not an integer"
        if not limits.lowest <= value <= limits.highest:
            return f"{where} is {_number(value)}, outside {limits.lowest}..{limits.highest}"
        return None
    if hint in (bool, str, type(None)):
        return None if type(value) is hint else f"{where} is {_kind(value)}, not {_TYPE_WORDS[hint]}"
    if origin in (Union, types.UnionType):
        problems = [type_problem(value, h, where, limits) for h in get_args(hint)]
        return None if None in problems else next(p for p in problems if p)
    if origin is Literal:
        return None if value in get_args(hint) and type(value) is str else f"{where} is not one of {get_args(hint)}"
    if origin in (tuple, frozenset):
        return _items_problem(value, origin, get_args(hint), where, limits)
    if isinstance(hint, type) and issubclass(hint, tuple) and hasattr(hint, "_fields"):
        if type(value) is not hint:
            return f"{where} is {_kind(value)}, not a {hint.__name__}"
        cls: Any = hint
        return next((p for (name, h), v in zip(_hints(cls), value)
                     if (p := type_problem(v, h, f"{where}.{name}", limits))), None)
    return f"{where} is of a type a checkpoint does not hold"


def _items_problem(value: Any, origin: type, args: tuple[Any, ...], where: str, limits: Limits) -> str | None:
    if not _exactly(value, origin):
        return f"{where} is {_kind(value)}, not a {'tuple' if origin is tuple else 'set'}"
    if origin is tuple and args[-1:] != (Ellipsis,):
        if len(value) != len(args):
            return f"{where} has {len(value)} items, not {len(args)}"
        return next((p for i, (v, h) in enumerate(zip(value, args))
                     if (p := type_problem(v, h, f"{where}[{i}]", limits))), None)
    return next((p for i, v in enumerate(value) if (p := type_problem(v, args[0], f"{where}[{i}]", limits))), None)


def _exactly(value: Any, kind: type) -> bool:
    """``value`` is a ``kind`` itself, no subclass (a named tuple is no plain tuple here)."""
    return type(value) is kind


_TYPE_WORDS = {bool: "true or false", str: "a string", type(None): "null"}


def _kind(value: Any) -> str:
    return "a list" if type(value) is list else f"a {type(value).__name__}"


def _number(value: int) -> str:
    return str(value) if abs(value) < 10**12 else f"an integer of {len(str(abs(value)))} digits"


# ---------------------------------------------------------------- the scheduler spec's components


def spec_values_problem(tables: list[list[Any]], actions: list[Any], cfg: SpecConfig, depth: int) -> str | None:
    """Why the value tables and actions of a scheduler-spec checkpoint do not fit ``cfg``, or ``None``."""
    if len(tables) != len(packed.COMPONENTS):
        return f"{len(tables)} value tables, not the spec's {len(packed.COMPONENTS)}"
    limits = Limits(0, value_bound(cfg, depth), len(cfg.requests), cfg.num_blocks)
    hints = dict(_hints(EngineState))
    for c, table in enumerate(tables):
        fields = packed.COMPONENTS[c] if c != packed.MISC else "misc"
        for i, value in enumerate(table):
            where = f"value {i} of the {fields} table"
            group = packed._FIELDS[c]
            parts = (value,) if len(group) == 1 else value
            if len(group) > 1 and (type(value) is not tuple or len(value) != len(group)):
                return f"{where} is not a tuple of {len(group)} fields"
            for name, part in zip(group, parts):
                problem = _field_problem(name, part, hints[name], f"{where}: '{name}'", limits)
                if problem:
                    return problem
    if table_problem := _params_problem(tables[packed.PARAMS], cfg):
        return table_problem
    return actions_problem(actions, limits)


def _field_problem(name: str, value: Any, hint: Any, where: str, limits: Limits) -> str | None:
    """Type and range, then the ids and lengths of one ``EngineState`` field."""
    low = limits._replace(lowest=NULL_BLOCK) if name == "swa_block_tables" else limits
    problem = type_problem(value, hint, where, low)
    if problem:
        return problem
    if name in REQUEST_INDEXED and len(value) != limits.requests:
        return f"{where} has {len(value)} entries for {limits.requests} requests"
    if name == "block_hashes" and len(value) != limits.blocks:
        return f"{where} has {len(value)} entries for {limits.blocks} blocks"
    for key, n in _ids(name, value):
        if n >= (limits.requests if key in REQUEST_IDS else limits.blocks):
            return f"{where} names {'request' if key in REQUEST_IDS else 'block'} {n}, which the config has not"
    return None


def _ids(key: str, value: Any) -> Iterator[tuple[str, int]]:
    """(role, integer) of every request or block id inside ``value`` (the field ``key``, or within it)."""
    if type(value) is int:
        if key in REQUEST_IDS or key in BLOCK_IDS:
            yield key, value
    elif isinstance(value, tuple) and hasattr(value, "_fields"):
        for f, v in zip(value._fields, value):
            yield from _ids(f"{type(value).__name__}.{f}", v)
    elif isinstance(value, (tuple, frozenset)):
        for v in value:
            yield from _ids(key, v)


def _params_problem(table: list[Any], cfg: SpecConfig) -> str | None:
    """Each request's parameters are those of one of the config's initial states (they never change)."""
    known = {s.params for s in initial_states(cfg)}
    bad = next((i for i, v in enumerate(table) if v not in known), None)
    return None if bad is None else f"value {bad} of the params table is no initial state's parameters of the config"


def actions_problem(actions: list[Any], limits: Limits) -> str | None:
    """The spec's actions (``spec/engine.py`` ``Action``), the first the initial states' ``None``."""
    hint = Action
    for i, a in enumerate(actions[1:], 1):
        problem = type_problem(a, hint, f"action {i}", limits)
        if problem:
            return problem
        if a.req is not None and a.req >= limits.requests:
            return f"action {i} names request {a.req}, which the config has not"
    return None


def model_values_problem(tables: list[list[Any]], actions: list[Any], cfg: SpecConfig, depth: int) -> str | None:
    """Another model's checkpoint (``checker/whole.py``: one table of whole states): each value one
    ``NamedTuple`` class, well typed, its integers within range; each action one class too."""
    limits = Limits(LOWEST_WORKER_INT, value_bound(cfg, depth), len(cfg.requests), cfg.num_blocks)
    for what, values in (("state", [v for t in tables for v in t]), ("action", actions[1:])):
        classes = {type(v) for v in values}
        if len(classes) > 1 or not all(hasattr(c, "_fields") for c in classes):
            return f"its {what}s are not all of one model's type"
        for i, v in enumerate(values):
            problem = type_problem(v, type(v), f"{what} value {i}", limits)
            if problem:
                return problem
    return None
