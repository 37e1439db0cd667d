"""Checkpoints of the compiled explorer: its C store, saved between two parents and resumed.

The file is the fast explorer's format (``checker/checkpoint_format.py``: a
magic line, a SHA-256, a JSON header, raw arrays; never pickle) with the C
search's arrays as sections (``csrc/snapshot.h``): the state arena and its
offsets, parents, action ids, initial-state ordinals, the first state of each
depth, and the CSR edges of the expanded states.  The header names the
explorer (``"compiled"``), the spec, the C build and the config; a file written
by another explorer, spec, build or config is refused with one line naming the
file and what to do (``CheckpointError``).  Before the search takes a
snapshot over, ``restore`` checks every index against the arrays, decodes and
encodes every state again, and the violations it records are re-checked by the
spec itself (``CompiledExplorer._record_found``).  Written atomically.
"""
from __future__ import annotations

import hashlib
from array import array
from functools import lru_cache
from pathlib import Path
from typing import Any

from asyncspec.checker import checkpoint_format as fmt
from asyncspec.checker.checkpoint import WHAT_TO_DO, CheckpointError, config_fingerprint, spec_fingerprint, write_blob
from asyncspec.spec.config import SpecConfig

EXPLORER = "compiled"
ARRAYS = {"arena": "u1", "off": "u4", "parent": "i4", "via": "u1", "roots": "u2", "levels": "i8",
          "edge_start": "u4", "edge_target": "u4"}
"""The C store's arrays (``csrc/snapshot.h``) and their section kinds."""
COUNTS = ("head", "transitions", "back_edges", "witnesses")


@lru_cache(maxsize=4)
def build_fingerprint(extension: str | None) -> str:
    """A hash of the built C extension at ``extension`` (a rebuilt encoding may lay states out otherwise)."""
    return hashlib.sha256(Path(extension).read_bytes()).hexdigest()[:16] if extension else "none"


def written_by(path: Path) -> str | None:
    """The explorer that wrote the checkpoint at ``path``: ``"compiled"``, ``"fast"`` (any other readable
    checkpoint: the fast explorer's files name none), or None if it is no readable checkpoint."""
    try:
        header, _ = fmt.parse(path.read_bytes())
    except (OSError, fmt.FormatError):
        return None
    return EXPLORER if header.get("explorer") == EXPLORER else "fast"


def save(path: Path, cfg: SpecConfig, build: str, snapshot: dict[str, Any], found: list[tuple[int, int]]) -> None:
    """Write the C search's ``snapshot`` and its violations ``found`` (``build``: the extension's
    ``build_fingerprint``) to ``path`` atomically; a
    checkpoint that cannot be written costs the checkpoint, never the run (``checker/atomic.py``)."""
    sections: list[fmt.Section] = [(name, kind, _array(kind, snapshot[name])) for name, kind in ARRAYS.items()]
    data = {k: snapshot[k] for k in COUNTS} | {"found": [[k, node] for k, node in found]}
    header = {"explorer": EXPLORER, "spec": spec_fingerprint(), "build": build,
              "config": config_fingerprint(cfg, True, EXPLORER), "name": cfg.name}
    write_blob(path, fmt.dump(header, sections + [("data", "json", data)]))


def _array(kind: str, raw: bytes) -> array[int]:
    """``raw`` (native little-endian values, as the C search holds them) as an array of ``kind``."""
    values = array(fmt.KINDS[kind])
    values.frombytes(raw)
    return values


def load(path: Path, cfg: SpecConfig, build: str) -> tuple[dict[str, Any], list[tuple[int, int]]]:
    """The snapshot and violations at ``path`` for ``CompiledExplorer``'s ``restore``, if the file was
    written by this explorer, spec, ``build`` and config; ``CheckpointError`` (one line) otherwise."""
    try:
        header, sections = fmt.parse(path.read_bytes())
    except OSError as exc:
        raise CheckpointError(f"{path}: cannot read the checkpoint ({exc.strerror or type(exc).__name__}); "
                              f"{WHAT_TO_DO}") from None
    except fmt.FormatError as exc:
        raise CheckpointError(f"{path}: {exc}; {WHAT_TO_DO}") from None
    if header.get("explorer") != EXPLORER:
        raise CheckpointError(f"{path}: written by the fast explorer; resume it with --explorer fast, "
                              f"or {WHAT_TO_DO}")
    if header.get("spec") != spec_fingerprint() or header.get("build") != build:
        raise CheckpointError(f"{path}: written by another spec version or build of the compiled explorer; "
                              f"delete it to start afresh or choose another --checkpoint folder")
    if header.get("config") != config_fingerprint(cfg, True, EXPLORER) or header.get("name") != cfg.name:
        raise CheckpointError(f"{path}: a checkpoint of config '{str(header.get('name'))[:80]}' with other "
                              f"settings, not of '{cfg.name}'; use another --checkpoint path")
    try:
        return _body(sections)
    except (ValueError, TypeError, KeyError) as exc:
        reason = str(exc).splitlines()[0] if str(exc) and not isinstance(exc, KeyError) else f"no {exc}"
        raise CheckpointError(f"{path}: a malformed checkpoint ({reason[:200]}); {WHAT_TO_DO}") from None


def _body(sections: dict[str, Any]) -> tuple[dict[str, Any], list[tuple[int, int]]]:
    """The sections as ``restore`` takes them; ``ValueError`` where a kind or a count is not one written here."""
    data = sections["data"]
    if not isinstance(data, dict):
        raise ValueError("its data section is not an object")
    snapshot: dict[str, Any] = {}
    for name, kind in ARRAYS.items():
        values = sections[name]
        if not isinstance(values, array) or values.typecode != fmt.KINDS[kind]:
            raise ValueError(f"its {name} section is not of kind {kind}")
        snapshot[name] = values.tobytes()
    for key in COUNTS:
        if type(data[key]) is not int or not 0 <= data[key] < 2**63:
            raise ValueError(f"its {key} is not a count")
        snapshot[key] = data[key]
    found = data["found"]
    if not isinstance(found, list) or not all(isinstance(f, list) and len(f) == 2 and all(type(x) is int for x in f)
                                              for f in found):
        raise ValueError("its violations are not (property, state) pairs")
    return snapshot, [(k, node) for k, node in found]


def restore(c: Any, snapshot: dict[str, Any], found: list[tuple[int, int]], path: Path) -> None:
    """Take ``snapshot`` into the fresh C search ``c``; what its checks refuse is a ``CheckpointError``."""
    try:
        c.restore(snapshot, [tuple(f) for f in found])
    except (ValueError, OverflowError) as exc:
        raise CheckpointError(f"{path}: a malformed checkpoint ({str(exc)[:200]}); {WHAT_TO_DO}") from None
