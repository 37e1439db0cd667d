"""ARCHITECTURE.md is true and stays true: stated imports, the module list, the change table.

The layer order itself is held by ``tests/test_layers.py``; this file holds the rest of the
document to the code (``tests/architecture_doc.py`` reads it).
"""
from __future__ import annotations

import re
from pathlib import Path

from tests.architecture_doc import (
    actual_layer_imports,
    change_table_paths,
    documented_modules,
    layer_import_errors,
    missing_paths,
    module_list_errors,
    stated_layer_imports,
)
from tests.layering import ROOT, import_graph, module_files

ARCHITECTURE = (ROOT / "ARCHITECTURE.md").read_text()


def _repo_paths() -> list[str]:
    return [str(p.relative_to(ROOT)) for p in module_files().values()]


def test_each_layer_imports_exactly_the_layers_it_states() -> None:
    errors = layer_import_errors(stated_layer_imports(ARCHITECTURE), actual_layer_imports(import_graph()))
    assert errors == [], "ARCHITECTURE.md, Layers: " + "; ".join(errors)


def test_every_module_is_named_once_with_its_purpose() -> None:
    errors = module_list_errors(documented_modules(ARCHITECTURE), _repo_paths())
    assert errors == [], "ARCHITECTURE.md, Modules: " + "; ".join(errors)


def test_every_folder_the_change_table_names_exists() -> None:
    paths = change_table_paths(ARCHITECTURE)
    assert len(paths) >= 6, "the change table names a folder for each kind of change"
    assert missing_paths(paths, ROOT) == []


def test_the_reading_order_names_only_files_that_exist() -> None:
    order = ARCHITECTURE.split("## Reading order", 1)[1].split("\n## ", 1)[0]
    cited = re.findall(r"`((?:[\w-]+/)+[\w.-]*)`", order)
    assert cited and missing_paths(cited, ROOT) == []


# ------------------------------------------------------------ the readers on synthetic text

DOC = """# Architecture

## Layers

1. `spec/` — the spec. Imports: nothing.
2. `checker/` — the checker. Imports: `spec/`.
3. `cli/` — the command line.

## Modules

### `spec/`
- `request.py` — one request's counters.
- `state.py` — the state.

### `checker/`
- `bfs.py` — breadth-first search.
- `bfs.py` — again.
- `graph.py`

## Where a change goes

| change | where |
|---|---|
| a spec action | `spec/` |
| a search strategy | `checker/`, `nowhere/` |
"""


def test_a_wrong_or_missing_imports_clause_is_reported() -> None:
    stated = stated_layer_imports(DOC)
    assert stated["spec"] == set() and stated["checker"] == {"spec"}
    assert stated["cli"] == {"<no Imports: clause>"}
    actual = {"spec": set(), "checker": {"spec", "configs"}, "cli": {"spec", "checker"}}
    errors = layer_import_errors(stated, actual)
    assert len(errors) == 2 and "configs" in errors[0] and errors[1].startswith("`cli/`")


def test_a_missing_twice_named_unknown_or_unexplained_module_is_reported() -> None:
    files = ["spec/request.py", "spec/state.py", "spec/events.py", "checker/bfs.py", "spec/__init__.py"]
    errors = module_list_errors(documented_modules(DOC), files)
    assert "spec/events.py is not named in ARCHITECTURE.md's Modules" in errors
    assert "checker/bfs.py is named 2 times" in errors
    assert "checker/graph.py is named but does not exist" in errors
    assert "checker/graph.py has no one-line purpose" in errors
    assert not any("__init__" in e for e in errors)


def test_a_change_table_folder_that_does_not_exist_is_reported(tmp_path: Path) -> None:
    (tmp_path / "spec").mkdir()
    (tmp_path / "checker").mkdir()
    assert change_table_paths(DOC) == ["spec/", "checker/", "nowhere/"]
    assert missing_paths(change_table_paths(DOC), tmp_path) == ["nowhere/"]
