"""Find a vLLM symbol by its dotted path in a source tree, and fingerprint it by AST.

A function's fingerprint is a hash of its AST without docstrings, positions
or comments, so reformatting and rewording do not count; a class's fingerprint
is its *shape*: bases, decorators, and the names and signatures of its
methods and fields (a method body change is the method's own drift).

Example:
    >>> from asyncspec.fidelity.source import VllmSource
    >>> a = VllmSource.from_files("1", {"vllm/m.py": "class C:\\n    def f(self):\\n        return 1\\n"})
    >>> b = VllmSource.from_files("2", {"vllm/m.py": "class C:\\n    def f(self):\\n        '''doc'''\\n\\n        return (1)\\n"})
    >>> locate(a, "vllm.m.C.f").fingerprint == locate(b, "vllm.m.C.f").fingerprint
    True
    >>> locate(a, "vllm.m.C.g") is None
    True
"""
from __future__ import annotations

import ast
import copy
import hashlib
from typing import NamedTuple, Union

from asyncspec.fidelity.source import VllmSource

Def = Union[ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef]


class Located(NamedTuple):
    """Where a symbol is defined in one release, and its fingerprint there."""

    module: str
    qualname: str
    fingerprint: str

    @property
    def path(self) -> str:
        """The dotted path ``module.qualname``."""
        return f"{self.module}.{self.qualname}"


def parse(src: VllmSource, module: str) -> ast.Module | None:
    """The AST of ``module`` in ``src`` (None if absent or not parseable), cached in ``src``."""
    if module not in src.trees:
        text = src.module_text(module)
        try:
            src.trees[module] = ast.parse(text) if text is not None else None
        except SyntaxError:
            src.trees[module] = None
    return src.trees[module]


def _defs(body: list[ast.stmt]) -> list[Def]:
    """Definitions in a body, looking into top-level ``if``/``try`` blocks."""
    out: list[Def] = []
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.append(node)
        elif isinstance(node, ast.If):
            out += _defs(node.body) + _defs(node.orelse)
        elif isinstance(node, ast.Try):
            out += _defs(node.body) + _defs(node.orelse) + _defs(node.finalbody)
    return out


def find_def(tree: ast.Module, qualname: str) -> Def | None:
    """The definition ``A.b`` in ``tree`` (the last one wins, as at run time)."""
    body: list[ast.stmt] = tree.body
    node: Def | None = None
    for part in qualname.split("."):
        matches = [d for d in _defs(body) if d.name == part]
        if not matches:
            return None
        node = matches[-1]
        body = node.body
    return node


def _strip_docstrings(node: ast.AST) -> ast.AST:
    node = copy.deepcopy(node)
    for n in ast.walk(node):
        body = getattr(n, "body", None)
        if (isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Module)) and body
                and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
                and isinstance(body[0].value.value, str)):
            n.body = body[1:] or [ast.Pass()]
    return node


def _class_shape(node: ast.ClassDef) -> str:
    parts = [ast.dump(b) for b in node.bases] + [ast.dump(d) for d in node.decorator_list]
    for stmt in node.body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            decorators = ",".join(ast.dump(d) for d in stmt.decorator_list)
            parts.append(f"def {stmt.name}({ast.dump(stmt.args)}) [{decorators}]")
        elif isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
            parts.append(f"field {stmt.target.id}: {ast.dump(stmt.annotation)}")
        elif isinstance(stmt, ast.Assign):
            parts += [f"attr {t.id}" for t in stmt.targets if isinstance(t, ast.Name)]
        elif isinstance(stmt, ast.ClassDef):
            parts.append(f"class {stmt.name}")
    return "\n".join(parts)


def fingerprint(node: Def) -> str:
    """A short hash of ``node``'s AST (docstrings, positions and comments left out)."""
    text = _class_shape(node) if isinstance(node, ast.ClassDef) else ast.dump(_strip_docstrings(node))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def split_path(src: VllmSource, dotted: str) -> tuple[str, str] | None:
    """``vllm.a.b.C.f`` -> (``vllm.a.b``, ``C.f``): the longest module prefix in ``src``."""
    parts = dotted.split(".")
    for i in range(len(parts) - 1, 0, -1):
        module = ".".join(parts[:i])
        if src.module_text(module) is not None:
            return module, ".".join(parts[i:])
    return None


def locate(src: VllmSource, dotted: str) -> Located | None:
    """Where ``dotted`` is defined in ``src``, with its fingerprint; None if it is not.

    Re-exports are followed (``vllm.config.CacheConfig`` is defined in
    ``vllm.config.cache``); a module-level variable is fingerprinted by its assignment.
    """
    split = split_path(src, dotted)
    return _resolve(src, split[0], split[1], 0) if split is not None else None


def _resolve(src: VllmSource, module: str, qualname: str, depth: int) -> Located | None:
    tree = parse(src, module)
    if tree is None:
        return None
    node = find_def(tree, qualname)
    if node is not None:
        return Located(module, qualname, fingerprint(node))
    head, _, rest = qualname.partition(".")
    origin = _imported_from(src, tree, module, head) if depth < 6 else None
    if origin is not None:
        inner = ".".join(p for p in (origin[1], rest) if p)
        if not inner:
            return Located(origin[0], "", "module")
        found = _resolve(src, origin[0], inner, depth + 1)
        if found is not None:
            return found
    for star in _star_imports(src, tree, module) if depth < 6 else []:
        found = _resolve(src, star, qualname, depth + 1)
        if found is not None:
            return found
    assignment = _assignment(tree.body, head) if not rest else None
    if assignment is not None:
        return Located(module, qualname, hashlib.sha256(ast.dump(assignment).encode()).hexdigest()[:16])
    return None


def _statements(body: list[ast.stmt]) -> list[ast.stmt]:
    out: list[ast.stmt] = []
    for node in body:
        out.append(node)
        if isinstance(node, ast.If):
            out += _statements(node.body) + _statements(node.orelse)
        elif isinstance(node, ast.Try):
            out += _statements(node.body) + _statements(node.orelse)
    return out


def _absolute(src: VllmSource, module: str, stmt: ast.ImportFrom) -> str:
    """The module a (possibly relative) ``from X import ...`` in ``module`` reads."""
    if not stmt.level:
        return stmt.module or ""
    is_package = any(m.startswith(module + ".") for m in src.modules())
    parts = module.split(".") if is_package else module.split(".")[:-1]
    parts = parts[: len(parts) - (stmt.level - 1)]
    return ".".join(parts + ([stmt.module] if stmt.module else []))


def _star_imports(src: VllmSource, tree: ast.Module, module: str) -> list[str]:
    """Modules ``module`` re-exports with ``from X import *``."""
    return [_absolute(src, module, s) for s in _statements(tree.body)
            if isinstance(s, ast.ImportFrom) and any(a.name == "*" for a in s.names)]


def _imported_from(src: VllmSource, tree: ast.Module, module: str, name: str) -> tuple[str, str] | None:
    """(module, name there) that ``from X import name`` in ``module`` binds ``name`` to."""
    for stmt in _statements(tree.body):
        if not isinstance(stmt, ast.ImportFrom):
            continue
        for alias in stmt.names:
            if (alias.asname or alias.name) != name:
                continue
            base = _absolute(src, module, stmt)
            if src.module_text(f"{base}.{alias.name}") is not None:
                return f"{base}.{alias.name}", ""
            return base, alias.name
    return None


def _assignment(body: list[ast.stmt], name: str) -> ast.stmt | None:
    for stmt in _statements(body):
        if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and stmt.target.id == name:
            return stmt
        if isinstance(stmt, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in stmt.targets):
            return stmt
    return None


def find_elsewhere(src: VllmSource, module: str, qualname: str) -> list[Located]:
    """Where a symbol no longer at ``module.qualname`` may have gone: every module
    defining ``qualname`` (e.g. ``Scheduler.schedule``) or, failing that, for a method,
    a class of the same module defining a method of that name."""
    last = qualname.rsplit(".", 1)[-1]
    found: list[Located] = []
    for other in src.modules():
        text = src.module_text(other) or ""
        if f"def {last}(" not in text and f"class {last}" not in text:
            continue
        tree = parse(src, other)
        node = find_def(tree, qualname) if tree is not None else None
        if node is not None:
            found.append(Located(other, qualname, fingerprint(node)))
    tree = parse(src, module)
    if found or "." not in qualname or tree is None:
        return found
    for cls in (d for d in _defs(tree.body) if isinstance(d, ast.ClassDef)):
        method = find_def(ast.Module(body=[cls], type_ignores=[]), f"{cls.name}.{last}")
        if method is not None:
            found.append(Located(module, f"{cls.name}.{last}", fingerprint(method)))
    return found
