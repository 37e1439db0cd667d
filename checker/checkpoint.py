"""Checkpoints of the fast explorer: resume an interrupted run where it stopped.

A checkpoint is written at a boundary between two expanded states (on Ctrl-C,
``--max-states``, ``--max-memory``, and every ``--checkpoint-every``
seconds) and holds the packed store, the component tables, the actions, the
next state to expand and what the run has found so far.  Its header names the
format, the spec (a hash of the spec's source and of the canonical form) and
the config; a checkpoint of another spec version or config is refused with a
one-line ``CheckpointError``.  Written atomically (``checker/atomic.py``).
"""
from __future__ import annotations

import dataclasses
import hashlib
import pickle
from pathlib import Path
from typing import Any

from asyncspec.checker.atomic import Sink, WriteError, note_unsaved, write_with
from asyncspec.spec.config import SpecConfig

FORMAT = 1


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
    """Write ``body`` with its header to ``path`` atomically (``checker/atomic.py``).  A checkpoint that
    cannot be written (a full disk) costs the checkpoint, never the run: the failure is noted for the
    command to answer at its end (one line, exit 2 or 3), and the run goes on."""
    header = {"format": FORMAT, "spec": spec_fingerprint(), "config": config_fingerprint(cfg, symmetry, model),
              "name": model or cfg.name}

    def write(sink: Sink) -> None:
        pickle.dump(header, sink, protocol=pickle.HIGHEST_PROTOCOL)
        pickle.dump(body, sink, protocol=pickle.HIGHEST_PROTOCOL)
    try:
        write_with(path, write)
    except WriteError as exc:
        note_unsaved(exc)


def load(path: Path, cfg: SpecConfig, symmetry: bool, model: str = "") -> dict[str, Any]:
    """The body of the checkpoint at ``path``, if it was written for this spec, ``cfg`` and ``model``."""
    try:
        with open(path, "rb") as f:
            header = pickle.load(f)
            if not isinstance(header, dict) or header.get("format") != FORMAT:
                raise CheckpointError(f"{path}: not an asyncspec checkpoint (or an older format); delete it")
            if header["spec"] != spec_fingerprint():
                raise CheckpointError(f"{path}: written by another spec version; delete it to start afresh")
            if header["config"] != config_fingerprint(cfg, symmetry, model):
                raise CheckpointError(f"{path}: a checkpoint of config '{header.get('name')}' with other "
                                      f"settings, not of '{model or cfg.name}'; use another --checkpoint path")
            body: dict[str, Any] = pickle.load(f)
            return body
    except (OSError, EOFError, pickle.UnpicklingError, AttributeError, KeyError, TypeError) as exc:
        raise CheckpointError(f"{path}: unreadable checkpoint ({type(exc).__name__}); delete it") from None
