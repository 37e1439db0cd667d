"""ARCHITECTURE.md read as data: the layers' stated imports, the module list, the change table.

``tests/test_layers.py`` holds the document to the code with these readers:

* every "## Layers" item ends with ``Imports: `a/`, `b/`.`` (or ``Imports: nothing.``), the
  layers whose modules it imports; the import graph must give exactly that set;
* "## Modules" has one ``### `folder/``` heading per layer folder and under it one bullet
  ``- `file.py` — purpose`` per module (``__init__.py`` files, docstrings only, are not listed):
  every module is named exactly once, with a purpose;
* "## Where a change goes" is a table whose last column names the folders (or files) a change
  goes to; every one of them exists.
"""
from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from pathlib import Path

from tests.layering import LAYERS, layer_of


def section(architecture: str, heading: str) -> str:
    """The text under ``## heading`` up to the next ``## `` heading ('' when absent)."""
    parts = architecture.split(f"\n## {heading}\n", 1)
    return parts[1].split("\n## ", 1)[0] if len(parts) == 2 else ""


def stated_layer_imports(architecture: str) -> dict[str, set[str]]:
    """Layer folder -> the layer folders its "Imports:" clause names (``nothing`` is the empty set)."""
    out: dict[str, set[str]] = {}
    for line in section(architecture, "Layers").splitlines():
        item = re.match(r"^\d+\. `([^`]+)/`", line)
        if item is None:
            continue
        clause = re.search(r"Imports: (.*?)\.?\s*$", line)
        names = set() if clause is None else set(re.findall(r"`([^`]+)/`", clause.group(1)))
        out[item.group(1)] = names if clause is not None else {"<no Imports: clause>"}
    return out


def actual_layer_imports(graph: Mapping[str, Iterable[str]]) -> dict[str, set[str]]:
    """Layer folder -> the other layer folders its modules import, from the import graph."""
    out: dict[str, set[str]] = {folder: set() for folder, _ in LAYERS}
    for importer, imported in graph.items():
        here = LAYERS[layer_of(importer)][0]
        out[here].update(LAYERS[layer_of(m)][0] for m in imported)
    for folder in out:
        out[folder].discard(folder)
    return out


def layer_import_errors(stated: Mapping[str, set[str]], actual: Mapping[str, set[str]]) -> list[str]:
    """One line per layer whose stated imports differ from the code's."""
    errors = []
    for folder in sorted(actual):
        said = stated.get(folder)
        if said is None:
            errors.append(f"`{folder}/` is not in ARCHITECTURE.md's Layers")
        elif said != actual[folder]:
            errors.append(f"`{folder}/` says it imports {sorted(said) or 'nothing'}; "
                          f"the code imports {sorted(actual[folder]) or 'nothing'}")
    return errors


def documented_modules(architecture: str) -> list[tuple[str, str]]:
    """(path from the repository root, purpose) for every module bullet of "## Modules"."""
    out: list[tuple[str, str]] = []
    folder = ""
    for line in section(architecture, "Modules").splitlines():
        heading = re.match(r"^### `([^`]+)/`", line)
        if heading is not None:
            folder = heading.group(1)
            continue
        bullet = re.match(r"^- `([\w/]+\.py)`(?: — (.*))?$", line)
        if bullet is not None and folder:
            out.append((f"{folder}/{bullet.group(1)}", (bullet.group(2) or "").strip()))
    return out


def module_list_errors(documented: list[tuple[str, str]], files: Iterable[str]) -> list[str]:
    """Modules missing from, named twice in, unknown to, or without a purpose in the list."""
    wanted = {f for f in files if not f.endswith("__init__.py")}
    named = [path for path, _ in documented]
    errors = [f"{f} is not named in ARCHITECTURE.md's Modules" for f in sorted(wanted - set(named))]
    errors += [f"{f} is named {named.count(f)} times" for f in sorted(set(named)) if named.count(f) > 1]
    errors += [f"{f} is named but does not exist" for f in sorted(set(named) - wanted)]
    errors += [f"{path} has no one-line purpose" for path, purpose in documented if not purpose]
    return errors


def change_table_paths(architecture: str) -> list[str]:
    """The backticked paths of the last column of the "## Where a change goes" table."""
    out: list[str] = []
    for line in section(architecture, "Where a change goes").splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 2 or set(cells[-1]) <= {"-", " ", ":"}:
            continue
        out += re.findall(r"`([^`]+)`", cells[-1])
    return out


def missing_paths(paths: Iterable[str], root: Path) -> list[str]:
    """The paths (folders end in ``/``) that do not exist under ``root``."""
    return [p for p in paths if not (root / p.rstrip("/")).exists()]
