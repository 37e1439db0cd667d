"""A vLLM source tree read as text, never imported: installed, a wheel, an sdist or a folder.

``VllmSource.open(path)`` accepts a wheel (``.whl``), an sdist (``.tar.gz``)
or a folder that is (or holds) the ``vllm`` package; ``VllmSource.installed()``
reads the vLLM installed in this environment.  Either way the result maps a
module name (``vllm.v1.core.sched.scheduler``) to its source text.  Bad input
raises ``SourceError`` with one line naming the problem.

Example:
    >>> src = VllmSource.from_files("demo", {"vllm/a/b.py": "def f():\\n    return 1\\n"})
    >>> src.module_text("vllm.a.b").strip()
    'def f():\\n    return 1'
    >>> src.modules()
    ['vllm.a.b']
"""
from __future__ import annotations

import ast
import importlib.metadata
import importlib.util
import re
import tarfile
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path


class SourceError(ValueError):
    """A vLLM source that cannot be read; the message is one line."""


def _module_name(relpath: str) -> str | None:
    """``vllm/v1/request.py`` -> ``vllm.v1.request``; ``vllm/v1/core/__init__.py`` -> ``vllm.v1.core``."""
    if not relpath.endswith(".py") or not relpath.startswith("vllm/"):
        return None
    parts = relpath[: -len(".py")].split("/")
    if parts[-1] == "__init__":
        parts = parts[:-1]
    if not all(p.isidentifier() for p in parts):
        return None
    return ".".join(parts)


@dataclass
class VllmSource:
    """Module name -> source text of one vLLM release (read lazily where possible)."""

    label: str  # what the user named: a path, or "installed"
    version: str
    files: dict[str, str] = field(default_factory=dict)  # module name -> text (loaded)
    paths: dict[str, Path] = field(default_factory=dict)  # module name -> file (not yet read)
    trees: dict[str, ast.Module | None] = field(default_factory=dict, repr=False)  # parse cache
    sorted_modules: list[str] = field(default_factory=list, repr=False)

    @classmethod
    def from_files(cls, version: str, texts: Mapping[str, str], label: str = "memory") -> VllmSource:
        """A source from ``{"vllm/...py": text}`` (tests and examples)."""
        files = {m: t for p, t in texts.items() if (m := _module_name(p)) is not None}
        return cls(label, version, files)

    @classmethod
    def installed(cls) -> VllmSource:
        """The vLLM installed in this environment (found without importing it)."""
        spec = importlib.util.find_spec("vllm")
        if spec is None or not spec.submodule_search_locations:
            raise SourceError("vLLM is not installed here; install it or pass a base source")
        root = Path(next(iter(spec.submodule_search_locations)))
        try:
            version = importlib.metadata.version("vllm")
        except importlib.metadata.PackageNotFoundError:
            version = "unknown"
        return cls._from_dir(root.parent, "installed", version)

    @classmethod
    def open(cls, path: Path) -> VllmSource:
        """A wheel, an sdist or a folder holding vLLM's sources."""
        if not path.exists():
            raise SourceError(f"{path}: no such file or folder; pass a vLLM wheel, sdist or source folder")
        if path.is_dir():
            root = path if (path / "vllm" / "__init__.py").exists() else path.parent
            if not (root / "vllm" / "__init__.py").exists():
                raise SourceError(f"{path}: not a vLLM source folder (no vllm/__init__.py in or above it)")
            return cls._from_dir(root, str(path), _dir_version(root))
        if path.name.endswith(".whl"):
            return cls._from_wheel(path)
        if path.name.endswith((".tar.gz", ".tgz")):
            return cls._from_sdist(path)
        raise SourceError(f"{path}: not a .whl, .tar.gz or folder; pass a vLLM wheel, sdist or source folder")

    @classmethod
    def _from_dir(cls, root: Path, label: str, version: str) -> VllmSource:
        paths = {m: p for p in sorted((root / "vllm").rglob("*.py"))
                 if (m := _module_name(p.relative_to(root).as_posix())) is not None}
        return cls(label, version, paths=paths)

    @classmethod
    def _from_wheel(cls, path: Path) -> VllmSource:
        try:
            with zipfile.ZipFile(path) as z:
                names = z.namelist()
                files = {m: z.read(n).decode("utf-8", "replace") for n in names
                         if (m := _module_name(n)) is not None}
                meta = [n for n in names if n.endswith(".dist-info/METADATA")]
                version = _metadata_version(z.read(meta[0]).decode("utf-8", "replace")) if meta else "unknown"
        except (zipfile.BadZipFile, OSError) as exc:
            raise SourceError(f"{path}: not a readable wheel ({exc})") from None
        if not files:
            raise SourceError(f"{path}: the wheel holds no vllm/ package")
        return cls(str(path), version, files)

    @classmethod
    def _from_sdist(cls, path: Path) -> VllmSource:
        files: dict[str, str] = {}
        version = "unknown"
        try:
            with tarfile.open(path, "r:gz") as t:
                for member in t:
                    if not member.isfile():
                        continue
                    rel = member.name.split("/", 1)[1] if "/" in member.name else member.name
                    module = _module_name(rel)
                    if rel != "PKG-INFO" and module is None:
                        continue
                    handle = t.extractfile(member)
                    text = handle.read().decode("utf-8", "replace") if handle else ""
                    if module is None:
                        version = _metadata_version(text)
                    else:
                        files[module] = text
        except (tarfile.TarError, OSError, EOFError) as exc:
            raise SourceError(f"{path}: not a readable sdist ({exc})") from None
        if not files:
            raise SourceError(f"{path}: the sdist holds no vllm/ package")
        return cls(str(path), version, files)

    def modules(self) -> list[str]:
        """Every module name, sorted."""
        if len(self.sorted_modules) != len(set(self.files) | set(self.paths)):
            self.sorted_modules = sorted(set(self.files) | set(self.paths))
        return self.sorted_modules

    def module_text(self, module: str) -> str | None:
        """The source of ``module``, or None if this release has no such module."""
        if module not in self.files and module in self.paths:
            self.files[module] = self.paths[module].read_text(encoding="utf-8", errors="replace")
        return self.files.get(module)


def _metadata_version(text: str) -> str:
    match = re.search(r"^Version:\s*(\S+)", text, re.M)
    return match.group(1) if match else "unknown"


def _dir_version(root: Path) -> str:
    for name in ("vllm/_version.py", "vllm/version.py"):
        f = root / name
        if f.exists():
            match = re.search(r"""(?:__version__|version)\s*(?::\s*str)?\s*=\s*['"]([^'"]+)['"]""",
                              f.read_text(encoding="utf-8", errors="replace"))
            if match:
                return match.group(1)
    return "unknown"
