"""Who depends on which vLLM symbol: the spec's citations and the project's vLLM imports.

Two sources:

* the spec's ``@models`` citations (``spec/cites.py``): each spec action or
  property, of the scheduler half and of the worker half, names the vLLM
  functions it models;
* the project's code that drives vLLM (the scheduler driver, the fuzz targets,
  stubs and contract tests): every ``from vllm... import X`` (read from the
  source, nothing is imported), plus, for an imported class, its ``__init__``
  and each of its methods whose name the same file uses as an attribute
  (``scheduler.update_from_output(...)`` -> ``Scheduler.update_from_output``).
  That second half is a heuristic: it can only over-approximate by a method
  name that the file uses on some other object.

* the release settings (``engine/vllm/release_settings.py``): each names the
  functions of both sides of a behaviour that changed between releases, cited
  as ``release setting <name>``.

The spec's ``@models_static`` references (vllm-neuron, which no machine here
can install) are listed apart by ``static_references``: they name a file at a
commit and are never resolved or fingerprinted.

Example:
    >>> deps = spec_citations()
    >>> "spec scheduler.preempt_request" in deps["vllm.v1.core.sched.scheduler.Scheduler._preempt_request"]
    True
    >>> "property W1_feed_is_last_sampled" in deps["vllm.v1.worker.gpu_model_runner.GPUModelRunner._prepare_input_ids"]
    True
"""
from __future__ import annotations

import ast
import importlib
from collections import defaultdict
from pathlib import Path

from asyncspec.spec.cites import CITATIONS, STATIC_REFERENCES, StaticReference

from asyncspec.fidelity.fingerprint import find_def, locate, parse, split_path
from asyncspec.fidelity.source import VllmSource

SPEC_MODULES = ("engine", "properties", "scheduler", "output", "blocks", "request", "draft",
                "worker", "worker_v1", "worker_v2", "worker_neuron", "stop", "dp")
PROJECT_FOLDERS = ("engine", "statemachine_tests", "tests", "bench", "checker", "cli", "asyncspec")
"""Folders whose Python files may drive vLLM (``spec/`` never imports it)."""

Dependents = dict[str, set[str]]  # vLLM dotted path -> who cites or touches it


def repo_root() -> Path:
    """The repository root (this file is ``fidelity/cited.py``)."""
    return Path(__file__).resolve().parent.parent


def import_spec() -> None:
    """Import every spec module, so that every citation and static reference is recorded."""
    for name in SPEC_MODULES:
        importlib.import_module(f"asyncspec.spec.{name}")


def property_names() -> dict[str, str]:
    """Spec name (``module.function``) of each always-property's check -> the property's name."""
    from asyncspec.spec.properties import ALL_ALWAYS
    from asyncspec.spec.worker import WORKER_ALWAYS

    checks = [(p.check, p.name) for p in ALL_ALWAYS.values()] + [(w.check, w.name) for w in WORKER_ALWAYS]
    return {f"{fn.__module__.rsplit('.spec.', 1)[-1]}.{fn.__qualname__}": name for fn, name in checks}


def who_cites(spec: str, properties: dict[str, str]) -> str:
    """``property <name>`` for a property's check, else ``spec <module.function>``."""
    return f"property {properties[spec]}" if spec in properties else f"spec {spec}"


def spec_citations() -> Dependents:
    """vLLM path -> ``spec <module.function>`` / ``property <name>`` citing it."""
    import_spec()
    from asyncspec.spec.properties import EVENTUALLY

    properties = property_names()
    out: Dependents = defaultdict(set)
    for c in CITATIONS.values():
        for target in c.targets:
            out[target].add(who_cites(c.spec, properties))
    for e in EVENTUALLY:
        for target in e.models:
            out[target].add(f"property {e.name}")
    return out


def static_references() -> list[StaticReference]:
    """The spec's references to code no machine here can install, by spec name."""
    import_spec()
    return sorted(STATIC_REFERENCES.values())


def _vllm_imports(tree: ast.AST) -> dict[str, str]:
    """Local name -> dotted vLLM path for every ``from vllm... import`` in ``tree``."""
    out: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0 \
                and (node.module == "vllm" or node.module.startswith("vllm.")):
            for alias in node.names:
                if alias.name != "*":
                    out[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    return out


def _attribute_names(tree: ast.AST) -> set[str]:
    return {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)}


DRIVER_GLOBS = ("engine/vllm/*.py", "statemachine_tests/scheduler/vllm_*.py",
                "statemachine_tests/scheduler/enablement_check.py", "tests/**/test_*vllm*.py")
"""Files that drive vLLM objects (some get vLLM's classes through ``engine/vllm/vllm_environment.py``)."""


def _methods_used(src: VllmSource, path: str, used: set[str]) -> list[str]:
    """``path.__init__`` and ``path.m`` for each method ``m`` of class ``path`` in ``used``."""
    split = split_path(src, path)
    module_tree = parse(src, split[0]) if split is not None else None
    node = find_def(module_tree, split[1]) if split is not None and module_tree is not None else None
    if not isinstance(node, ast.ClassDef):
        return []
    return [f"{path}.{stmt.name}" for stmt in node.body
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef))
            and (stmt.name == "__init__" or (stmt.name in used and not stmt.name.startswith("__")))]


def touched_symbols(src: VllmSource, text: str) -> set[str]:
    """The vLLM symbols one file touches on its own: its imports and the methods it calls on them."""
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return set()
    used = _attribute_names(tree)
    paths = set(_vllm_imports(tree).values())
    return paths | {symbol for path in paths for symbol in _methods_used(src, path, used)}


def project_dependents(src: VllmSource, root: Path | None = None) -> Dependents:
    """vLLM path -> the project files (relative paths) that import or call it."""
    root = root or repo_root()
    drivers = {f for g in DRIVER_GLOBS for f in root.glob(g)}
    imports: dict[str, dict[str, str]] = {}
    attributes: dict[str, set[str]] = {}
    for folder in PROJECT_FOLDERS:
        for f in sorted((root / folder).rglob("*.py")):
            text = f.read_text(encoding="utf-8", errors="replace")
            if "vllm" not in text:
                continue
            try:
                tree = ast.parse(text)
            except SyntaxError:
                continue
            rel = f.relative_to(root).as_posix()
            imports[rel] = _vllm_imports(tree)
            if imports[rel] or f in drivers:
                attributes[rel] = _attribute_names(tree)
    out: Dependents = defaultdict(set)
    classes = sorted({p for found in imports.values() for p in found.values()})
    for rel, found in imports.items():
        for path in found.values():
            out[path].add(rel)
    for path in classes:
        for rel, used in attributes.items():
            for symbol in _methods_used(src, path, used):
                if symbol.endswith(".__init__") and path not in imports[rel].values():
                    continue
                out[symbol].add(rel)
    return out


def release_setting_citations(src: VllmSource) -> Dependents:
    """vLLM path -> ``release setting <name>`` for each function a release setting cites that ``src``
    has (an older side's function that ``src`` lacks is named by ``drift``'s release-settings lines)."""
    from asyncspec.engine.vllm.release_settings import SETTINGS

    out: Dependents = defaultdict(set)
    for setting in SETTINGS:
        for symbol in (*setting.reference_side, *setting.older_side):
            if locate(src, symbol) is not None:
                out[symbol].add(f"release setting {setting.name}")
    return out


def all_dependents(src: VllmSource, root: Path | None = None) -> Dependents:
    """The spec's citations, the release settings' and the project's touches, merged."""
    merged: Dependents = defaultdict(set)
    for part in (spec_citations(), release_setting_citations(src), project_dependents(src, root)):
        for symbol, who in part.items():
            merged[symbol] |= who
    return merged
