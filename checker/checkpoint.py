"""Checkpoints of the fast explorer: resume an interrupted run where it stopped.

A checkpoint is written at a boundary between two expanded states (on Ctrl-C,
``--max-states``, ``--max-memory``, and every ``--checkpoint-every``
seconds) and holds the packed store, the component tables, the actions, the
next state to expand and what the run has found so far (each violation as its
property, message and state: its trace is rebuilt from the store).  It is data,
never pickle: ``checker/checkpoint_format.py`` (a checksum, a JSON header, raw
arrays) and ``checker/checkpoint_values.py`` (values as JSON, only known types
built).  Its header names the spec (a hash of the spec's source and of the
canonical form) and the config; a file that is no checkpoint, a damaged one,
one of another format version, spec version or config is refused with a
one-line ``CheckpointError`` naming the file and what to do.  Written
atomically (``checker/atomic.py``).
"""
from __future__ import annotations

import dataclasses
import hashlib
from pathlib import Path
from typing import Any

from asyncspec.checker import checkpoint_format as fmt, checkpoint_shape as shape
from asyncspec.checker.atomic import Sink, WriteError, note_unsaved, write_with
from asyncspec.checker.checkpoint_values import Decoder, Encoder, ValueFormatError
from asyncspec.checker.store import ARRAYS, PackedStore
from asyncspec.spec.config import SpecConfig

FORMAT = fmt.VERSION

WHAT_TO_DO = "delete it or choose another --checkpoint folder"


class CheckpointError(ValueError):
    """A checkpoint that cannot be resumed here; the message is one line."""


def spec_fingerprint() -> str:
    """A hash of the spec's sources and of the state encoding (changes with either)."""
    from asyncspec import spec

    from asyncspec.checker import packed, store, symmetry

    h = hashlib.sha256()
    spec_dir = Path(spec.__path__[0])
    for path in sorted(spec_dir.glob("*.py")) + [Path(m.__file__ or "") for m in (packed, store, symmetry)]:
        h.update(path.name.encode())
        h.update(path.read_bytes())
    return h.hexdigest()[:16]


def config_fingerprint(cfg: SpecConfig, symmetry: bool, model: str = "") -> str:
    """What the exploration of ``cfg`` depends on (its description and checker extras aside);
    ``model`` names a model other than the config's spec (e.g. ``CONFIG/STRATEGY``)."""
    fields = {f.name: getattr(cfg, f.name) for f in dataclasses.fields(cfg) if f.name not in ("description", "extra")}
    key = (sorted(fields.items()), symmetry) + ((model,) if model else ())
    return hashlib.sha256(repr(key).encode()).hexdigest()[:16]


def save(path: Path, cfg: SpecConfig, symmetry: bool, body: dict[str, Any], model: str = "") -> None:
    """Write ``body`` (``store``: a ``PackedStore.snapshot()``; ``values``, ``actions``, ``head``,
    ``transitions``, ``witnesses``, ``violations``: (property, message, state) triples) to ``path``
    atomically (``checker/atomic.py``).  A checkpoint that cannot be written (a full disk) costs the
    checkpoint, never the run: the failure is noted for the command to answer at its end (one line,
    exit 2 or 3), and the run goes on."""
    snapshot, enc = body["store"], Encoder()
    data = {"arity": snapshot["arity"], "wide": snapshot["wide"], "back_edges": snapshot["back_edges"],
            "head": body["head"], "transitions": body["transitions"], "witnesses": body["witnesses"],
            "violations": [[p, m, node] for p, m, node in body["violations"]],
            "values": [enc.encode(table) for table in body["values"]], "actions": enc.encode(body["actions"])}
    data["types"], data["pool"] = enc.types, enc.pool
    header = {"spec": spec_fingerprint(), "config": config_fingerprint(cfg, symmetry, model),
              "name": model or cfg.name}
    write_blob(path, fmt.dump(header, [(k, kind, snapshot[k]) for k, kind in _KINDS.items()] + [("data", "json", data)]))


def write_blob(path: Path, blob: bytes) -> None:
    """A checkpoint file's bytes, written atomically; a write that fails costs the checkpoint, never the
    run (the failure is noted for the command to answer at its end: ``checker/atomic.py``)."""
    def write(sink: Sink) -> None:
        sink.write(blob)
    try:
        write_with(path, write)
    except WriteError as exc:
        note_unsaved(exc)


_KINDS = {"keys": "u1", "parent": "i4", "via": "u2", "level_start": "i8", "edge_start": "u4", "edge_target": "i4"}
assert _KINDS.keys() == ARRAYS.keys() and all(fmt.KINDS[_KINDS[k]] == code for k, code in ARRAYS.items())


def load(path: Path, cfg: SpecConfig, symmetry: bool, model: str = "") -> dict[str, Any]:
    """The body of the checkpoint at ``path`` (``store`` restored as a ``PackedStore``), if it was
    written for this spec, ``cfg`` and ``model``; ``CheckpointError`` (one line) otherwise."""
    try:
        blob = path.read_bytes()
    except OSError as exc:
        raise CheckpointError(f"{path}: cannot read the checkpoint ({exc.strerror or type(exc).__name__}); "
                              f"{WHAT_TO_DO}") from None
    try:
        header, sections = fmt.parse(blob)
    except fmt.FormatError as exc:
        raise CheckpointError(f"{path}: {exc}; {WHAT_TO_DO}") from None
    if header.get("spec") != spec_fingerprint():
        raise CheckpointError(f"{path}: written by another spec version; delete it to start afresh "
                              "or choose another --checkpoint folder")
    if header.get("config") != config_fingerprint(cfg, symmetry, model) or header.get("name") != (model or cfg.name):
        raise CheckpointError(f"{path}: a checkpoint of config '{str(header.get('name'))[:80]}' with other "
                              f"settings, not of '{model or cfg.name}'; use another --checkpoint path")
    try:
        return _body(sections, cfg, symmetry, model)
    except (ValueFormatError, ValueError, TypeError, KeyError) as exc:
        reason = str(exc).splitlines()[0] if str(exc) and not isinstance(exc, KeyError) else f"no {exc}"
        raise CheckpointError(f"{path}: a malformed checkpoint ({reason[:200]}); {WHAT_TO_DO}") from None


def _body(sections: dict[str, Any], cfg: SpecConfig, symmetry: bool, model: str) -> dict[str, Any]:
    """The explorer's state from the checked sections, each value checked against the model's shape
    (``checker/checkpoint_shape.py``); ``ValueError`` or ``TypeError`` if it does not fit."""
    data = sections["data"]
    if not isinstance(data, dict):
        raise ValueError("its data section is not an object")
    dec = Decoder(data["types"], data["pool"])
    values, actions = dec.decode(data["values"]), dec.decode(data["actions"])
    if type(values) is not tuple or not all(type(t) is list for t in values) or type(actions) is not list:
        raise ValueError("its value tables or actions are not lists")
    for table in values:
        for v in table:
            hash(v)  # a table's values are dict keys: TypeError if one is not hashable
    snapshot = {k: sections[k] for k in _KINDS} | {k: data[k] for k in ("arity", "wide", "back_edges")}
    store = PackedStore.restore(snapshot, [len(t) for t in values])
    head, transitions, witnesses, violations = data["head"], data["transitions"], data["witnesses"], data["violations"]
    if type(head) is not int or head != store.expanded or type(transitions) is not int or transitions < 0:
        raise ValueError("its next state or transition count does not match its store")
    if not actions or actions[0] is not None or max(store.via, default=0) >= len(actions):
        raise ValueError("its actions do not cover its store")
    if not isinstance(witnesses, dict) or not all(type(v) is bool for v in witnesses.values()):
        raise ValueError("its witnesses are not event -> true/false")
    if not isinstance(violations, list) or not all(
            isinstance(v, list) and len(v) == 3 and isinstance(v[0], str) and isinstance(v[1], str)
            and type(v[2]) is int and 0 <= v[2] < len(store) for v in violations):
        raise ValueError("its violations are not (property, message, state) triples")
    problem = shape.store_problem(store.parent, store.level_start, store.edge_start, store.edge_target,
                                  store.back_edges, transitions) \
        or _values_problem(list(values), actions, witnesses, cfg, symmetry, model, store.max_depth) \
        or (None if model else _unrecorded_violation(store, list(values), cfg, symmetry, violations))
    if problem:
        raise ValueError(problem)
    return {"store": store, "values": list(values), "actions": actions, "head": head,
            "transitions": transitions, "witnesses": witnesses,
            "violations": [(p, m, node) for p, m, node in violations]}


def _values_problem(tables: list[list[Any]], actions: list[Any], witnesses: dict[str, bool], cfg: SpecConfig,
                    symmetry: bool, model: str, depth: int) -> str | None:
    """Why the values do not fit the model the checkpoint names (the spec of ``cfg`` unless ``model``)."""
    if model:
        return shape.model_values_problem(tables, actions, cfg, depth)
    from asyncspec.checker.spec_model import SpecModel

    spec = SpecModel(cfg, symmetry)
    events = set(spec.new_result().witnesses)
    if set(witnesses) != events:
        odd = sorted(set(witnesses) ^ events)[0]
        return f"its witnesses {'name' if odd in witnesses else 'lack'} the event {odd[:60]!r}"
    return shape.spec_values_problem(tables, actions, cfg, depth)


def _unrecorded_violation(store: PackedStore, tables: list[list[Any]], cfg: SpecConfig, symmetry: bool,
                          violations: list[Any]) -> str | None:
    """A stored state that breaks an *always* property its checkpoint does not record (the explorer checked
    each as it was added, ``fast_explorer._integrate``: a run only goes on past a violation it records), or
    one the properties cannot even be evaluated on: values of the right types that no run wrote."""
    from asyncspec.checker.memo import PropertyMemo
    from asyncspec.checker.packed import Packer
    from asyncspec.checker.spec_model import SpecModel

    packer, memo = Packer(symmetry), PropertyMemo(cfg, SpecModel(cfg, symmetry).properties)
    packer.restore(tables)
    recorded = {v[0] for v in violations}
    for i in range(len(store)):
        try:
            answers = memo.check(store.ids(i), packer.decode, recorded)
        except (ArithmeticError, LookupError, ValueError, TypeError, AssertionError) as exc:
            return f"state {i} is no state of the spec (its properties fail on it: {type(exc).__name__})"
        if answers:
            return f"state {i} breaks '{answers[0][0]}', which it does not record as a violation"
    return None
