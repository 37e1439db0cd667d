"""Checkpoints of the fast explorer: resume an interrupted run where it stopped.

A checkpoint is written at a boundary between two expanded states (on Ctrl-C,
``--max-states``, ``--max-memory``, and every ``--checkpoint-every``
seconds) and holds the packed store, the component tables, the actions, the
next state to expand and what the run has found so far.  Its header names the
format, the spec (a hash of the spec's source and of the canonical form) and
the config; a checkpoint of another spec version or config is refused with a
one-line ``CheckpointError``.  Written atomically (temporary file, rename).
"""
from __future__ import annotations

import dataclasses
import hashlib
import os
import pickle
import tempfile
from pathlib import Path
from typing import Any

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
    """Write ``body`` with its header to ``path`` atomically."""
    header = {"format": FORMAT, "spec": spec_fingerprint(), "config": config_fingerprint(cfg, symmetry, model),
              "name": model or cfg.name}
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            pickle.dump(header, f, protocol=pickle.HIGHEST_PROTOCOL)
            pickle.dump(body, f, protocol=pickle.HIGHEST_PROTOCOL)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


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
