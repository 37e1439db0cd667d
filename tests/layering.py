"""The package's import graph, read from source, and the layering rule over it.

The rule (ARCHITECTURE.md, "Layers"): a module imports only modules of its own
layer or of a layer listed before it, and no chain of imports, of any length,
leads back to where it started.  Every import counts: top-level, inside a
function, under ``TYPE_CHECKING``.  ``tests/test_layers.py`` applies the rule
to the real tree and to synthetic graphs.
"""
from __future__ import annotations

import ast
import re
from collections.abc import Iterable, Mapping
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "asyncspec"

LAYERS: tuple[tuple[str, str], ...] = (
    ("spec", "spec"),
    ("configs", "configs"),
    ("checker", "checker"),
    ("proofs", "proofs"),
    ("reference", "reference"),
    ("engine/vllm", "engine.vllm"),
    ("engine/sglang", "engine.sglang"),
    ("engine/torch", "engine.torch"),
    ("statemachine_tests/core", "statemachine_tests.core"),
    ("statemachine_tests/scheduler", "statemachine_tests.scheduler"),
    ("statemachine_tests/vllm_engine", "statemachine_tests.vllm_engine"),
    ("statemachine_tests/sglang", "statemachine_tests.sglang"),
    ("statemachine_tests/mutation", "statemachine_tests.mutation"),
    ("monitor", "monitor"),
    ("fidelity", "fidelity"),
    ("explorer", "explorer"),
    ("cli", "cli"),
    ("asyncspec", ""),
)
"""(folder, module prefix under ``asyncspec``) in the reading order: lower layers first."""

PARENTS = ("engine", "statemachine_tests")
"""Packages that hold several layers; their ``__init__`` is a docstring only."""

MAX_MODULE_LINES = 500
"""No module of the package is longer than this (house style: ~500 lines)."""

Graph = Mapping[str, Iterable[str]]


def module_files() -> dict[str, Path]:
    """Every module of the package, by dotted name, from the folders of ``LAYERS``."""
    found: dict[str, Path] = {f"{PACKAGE}.{parent}": ROOT / parent / "__init__.py" for parent in PARENTS}
    for folder, prefix in LAYERS:
        base = f"{PACKAGE}.{prefix}" if prefix else PACKAGE
        top = ROOT / folder
        for path in sorted(top.rglob("*.py")):
            parts = [p for p in path.relative_to(top).with_suffix("").parts if p != "__init__"]
            found[".".join([base, *parts])] = path
    return found


def layer_of(module: str) -> int:
    """Index in ``LAYERS`` of the layer a module belongs to (the longest prefix wins)."""
    for parent in PARENTS:  # the parent of several layers: placed with the first of them
        if module == f"{PACKAGE}.{parent}":
            return next(i for i, (_, p) in enumerate(LAYERS) if p.startswith(parent + "."))
    best, best_len = len(LAYERS) - 1, -1  # default: the package root, i.e. the CLI
    for i, (_, prefix) in enumerate(LAYERS):
        full = f"{PACKAGE}.{prefix}" if prefix else PACKAGE
        if (module == full or module.startswith(full + ".")) and len(full) > best_len:
            best, best_len = i, len(full)
    return best


def _imported(module: str, path: Path, known: set[str]) -> set[str]:
    """The package modules ``module`` imports (any import statement, anywhere in the file)."""
    out: set[str] = set()
    is_package = path.name == "__init__.py"
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name.startswith(PACKAGE))
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = module.split(".")
                keep = len(parts) - node.level + (1 if is_package else 0)
                base = ".".join(parts[:keep] + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            if not base.startswith(PACKAGE):
                continue
            for alias in node.names:
                candidate = f"{base}.{alias.name}"
                out.add(candidate if candidate in known else base)
    return {m for m in out if m in known and m != module}


def import_graph() -> dict[str, set[str]]:
    """Module -> the package modules it imports."""
    files = module_files()
    known = set(files)
    return {name: _imported(name, path, known) for name, path in files.items()}


def find_cycle(graph: Graph) -> list[str] | None:
    """One import cycle as a closed path ``[a, b, ..., a]``, or ``None`` (iterative DFS)."""
    state: dict[str, int] = {}  # 1 on the DFS stack, 2 done
    for root in sorted(graph):
        if root in state:
            continue
        stack: list[tuple[str, list[str]]] = [(root, sorted(graph.get(root, ())))]
        path = [root]
        state[root] = 1
        while stack:
            node, todo = stack[-1]
            if not todo:
                stack.pop()
                path.pop()
                state[node] = 2
                continue
            nxt = todo.pop(0)
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state:
                state[nxt] = 1
                path.append(nxt)
                stack.append((nxt, sorted(graph.get(nxt, ()))))
    return None


def upward_imports(graph: Graph, allowed: Mapping[tuple[str, str], str]) -> list[str]:
    """Imports of a later layer than the importer's, not listed in ``allowed``."""
    bad = []
    for importer in sorted(graph):
        for imported in sorted(graph[importer]):
            if layer_of(imported) > layer_of(importer) and (importer, imported) not in allowed:
                bad.append(f"{importer} imports {imported} "
                           f"({LAYERS[layer_of(imported)][0]}/ comes after {LAYERS[layer_of(importer)][0]}/)")
    return bad


def documented_layers(architecture: str) -> list[str]:
    """The folders listed, in order, under ARCHITECTURE.md's "## Layers" heading."""
    section = architecture.split("## Layers", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"^\d+\. `([^`]+)/`", section, flags=re.M)


def long_modules(limit: int = MAX_MODULE_LINES) -> list[str]:
    """Package modules longer than ``limit`` lines."""
    return [f"{p.relative_to(ROOT)}: {n} lines" for p in module_files().values()
            if (n := len(p.read_text().splitlines())) > limit]
