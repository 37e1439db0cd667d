"""A private import overlay: one vLLM module loaded with a one-line change.

``install(mutant)`` puts a ``sys.meta_path`` finder in front of the normal
ones.  When Python imports the module the mutant names (e.g.
``vllm.v1.engine.core``), the finder reads the *installed* source, replaces
the one line (``apply``), compiles the result under the original file name
(tracebacks and ``__file__`` still point at the installed file) and executes
it as that module.  The installed package is never written: no file is
copied, no bytecode cache is read or written for the mutated module, every
other vLLM module loads as usual.

``apply`` checks with ``ast`` that the original line occurs exactly once
inside the named function (``Class.method`` or a module-level function);
otherwise it raises ``MutantDoesNotApply`` with one line naming the vLLM
function that moved.  The finder must be installed before vLLM is imported,
so a mutant runs in a process of its own.

This module imports nothing of ours (``engine/vllm/`` is a leaf layer).
"""
from __future__ import annotations

import ast
import importlib.machinery
import importlib.util
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from importlib.abc import Loader, MetaPathFinder
from pathlib import Path
from types import CodeType, ModuleType

from asyncspec.engine.vllm.vllm_mutants import VllmMutant


class MutantDoesNotApply(ValueError):
    """The mutant's original line is not found exactly once in its function (one line)."""


def module_name(mutant: VllmMutant) -> str:
    """``vllm/v1/engine/core.py`` -> ``vllm.v1.engine.core``."""
    return "vllm." + mutant.file.removesuffix(".py").replace("/", ".")


def installed_source_path(mutant: VllmMutant) -> Path:
    """The installed file the mutant changes, found without importing vLLM."""
    spec = importlib.machinery.PathFinder.find_spec("vllm")
    if spec is None or not spec.submodule_search_locations:
        raise MutantDoesNotApply("vllm is not installed: run .ci/install-vllm")
    root = Path(list(spec.submodule_search_locations)[0])
    path = root / mutant.file
    if not path.is_file():
        raise MutantDoesNotApply(f"mutant {mutant.id}: vllm/{mutant.file} is not in the installed vLLM")
    return path


def _function_lines(tree: ast.Module, qualname: str) -> tuple[int, int] | None:
    """First and last line (1-based) of ``qualname`` (``f`` or ``Class.f``), or None."""
    def walk(body: Sequence[ast.stmt], prefix: str) -> tuple[int, int] | None:
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                name = f"{prefix}{node.name}"
                if name == qualname and not isinstance(node, ast.ClassDef):
                    return node.lineno, node.end_lineno or node.lineno
                if qualname.startswith(name + "."):
                    found = walk(node.body, name + ".")
                    if found:
                        return found
        return None

    return walk(tree.body, "")


def apply(mutant: VllmMutant, source: str) -> str:
    """``source`` with the mutant's line replaced; ``MutantDoesNotApply`` if it moved."""
    where = f"vllm/{mutant.file}:{mutant.function}"
    span = _function_lines(ast.parse(source), mutant.function)
    if span is None:
        raise MutantDoesNotApply(f"mutant {mutant.id}: vLLM function {where} is gone; "
                                 "update the mutant in engine/vllm/vllm_mutants.py")
    lines = source.splitlines(keepends=True)
    hits = [i for i in range(span[0] - 1, span[1]) if lines[i].strip() == mutant.original]
    if len(hits) != 1:
        raise MutantDoesNotApply(
            f"mutant {mutant.id}: vLLM function {where} moved: its line {mutant.original!r} occurs "
            f"{len(hits)} times there, not once; update the mutant in engine/vllm/vllm_mutants.py")
    line = lines[hits[0]]
    indent = line[: len(line) - len(line.lstrip())]
    newline = "\n" if line.endswith("\n") else ""
    lines[hits[0]] = indent + mutant.replacement + newline
    return "".join(lines)


def mutated_code(mutant: VllmMutant) -> tuple[Path, CodeType]:
    """The installed file's path and its mutated, compiled code."""
    path = installed_source_path(mutant)
    source = apply(mutant, path.read_text(encoding="utf-8"))
    try:
        return path, compile(source, str(path), "exec", dont_inherit=True)
    except SyntaxError as exc:
        raise MutantDoesNotApply(f"mutant {mutant.id}: its replacement does not compile: {exc.msg}") from exc


@dataclass
class _MutantLoader(Loader):
    """Executes the mutated code as the named module; records that it did."""

    mutant: VllmMutant
    code: CodeType
    loaded: bool = False

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return None  # the default module object

    def exec_module(self, module: ModuleType) -> None:
        self.loaded = True
        exec(self.code, module.__dict__)


class MutantFinder(MetaPathFinder):
    """Answers for exactly one module name, with the mutated code; defers for the rest."""

    def __init__(self, mutant: VllmMutant) -> None:
        self.name = module_name(mutant)
        self.path, code = mutated_code(mutant)
        self.loader = _MutantLoader(mutant, code)

    def find_spec(self, fullname: str, path: Sequence[str] | None = None,
                  target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        if fullname != self.name:
            return None
        return importlib.util.spec_from_file_location(fullname, self.path, loader=self.loader)

    @property
    def loaded(self) -> bool:
        """Whether the mutated module has been imported (the target reached it)."""
        return self.loader.loaded


def install(mutant: VllmMutant) -> MutantFinder:
    """Put the mutant's finder first on ``sys.meta_path``; vLLM must not be imported yet."""
    if any(m == "vllm" or m.startswith("vllm.") for m in sys.modules):
        raise MutantDoesNotApply(f"mutant {mutant.id}: vllm was imported before the overlay; "
                                 "run each mutant in a fresh process")
    finder = MutantFinder(mutant)
    sys.meta_path.insert(0, finder)
    return finder
