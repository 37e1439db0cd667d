"""Which vLLM a process drives: its version, where it was read from, and its package folder.

Read without importing vLLM (``importlib.util.find_spec`` finds the package, the
metadata or the checkout's own files give the version), so a report can name the
release even when the import itself would fail.

The version comes from, in order: the installed distribution's metadata, when
that distribution owns the package folder found on ``sys.path``; the package's
own ``vllm/_version.py`` (what a built checkout writes); the checkout's
``PKG-INFO`` (an unpacked sdist) or ``pyproject.toml`` ``[project] version``.
``VllmIdentity.source`` says which, so an unbuilt checkout is marked as such.

Example:
    >>> version_tuple("0.32.0"), version_tuple("0.33.1.dev4+g1234")
    ((0, 32, 0), (0, 33, 1))
    >>> in_supported_range("0.30.0"), in_supported_range("0.29.1"), in_supported_range("0.34.0")
    (True, False, False)
"""
from __future__ import annotations

import importlib.metadata
import importlib.util
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path

REFERENCE_VERSION = "0.33.0"
"""The release the spec describes and the default install (``.ci/install-vllm``)."""

SUPPORTED_RANGE = ((0, 30, 0), (0, 33, 0))
"""Releases (major, minor, micro) the drivers probe and drive without ``--allow-version``."""

METADATA = "metadata"  # the installed distribution's metadata
VERSION_FILE = "vllm/_version.py"
PKG_INFO = "PKG-INFO"
PYPROJECT = "pyproject.toml"
UNKNOWN = "unknown"


@dataclass(frozen=True)
class VllmIdentity:
    """The vLLM found on ``sys.path``: ``version`` as read from ``source``, and ``path`` (the package folder)."""

    version: str | None  # None: not installed, or no file names a version
    path: str | None  # the ``vllm`` package folder, None when there is none
    source: str  # METADATA, VERSION_FILE, PKG_INFO, PYPROJECT or UNKNOWN

    def describe(self) -> str:
        """One line: ``vllm 0.32.0 at /…/site-packages/vllm`` (an unbuilt checkout's source named)."""
        if self.path is None:
            return "vllm is not installed"
        version = self.version or "of unknown version"
        marked = "" if self.source == METADATA else f" (version from {self.source}: a source checkout)"
        return f"vllm {version} at {self.path}{marked}"

    def as_json(self) -> dict[str, str | None]:
        """``{"version", "path", "version_source"}`` for a report."""
        return {"version": self.version, "path": self.path, "version_source": self.source}


def version_tuple(version: str) -> tuple[int, int, int]:
    """The leading ``major.minor.micro`` of a version string (missing parts are 0)."""
    match = re.match(r"\s*v?(\d+)(?:\.(\d+))?(?:\.(\d+))?", version)
    if match is None:
        raise ValueError(f"not a version: {version!r}")
    major, minor, micro = (int(part or 0) for part in match.groups())
    return major, minor, micro


def in_supported_range(version: str) -> bool:
    """Whether ``version`` lies in ``SUPPORTED_RANGE`` (a dev build past the top release does not)."""
    try:
        release = version_tuple(version)
    except ValueError:
        return False
    return SUPPORTED_RANGE[0] <= release <= SUPPORTED_RANGE[1]


def package_dir() -> Path | None:
    """The ``vllm`` package folder the next ``import vllm`` would load, without importing it."""
    try:
        spec = importlib.util.find_spec("vllm")
    except (ImportError, ValueError):
        return None
    if spec is None:
        return None
    if spec.submodule_search_locations:
        return Path(next(iter(spec.submodule_search_locations))).resolve()
    return Path(spec.origin).resolve().parent if spec.origin else None


def _metadata_version(folder: Path) -> str | None:
    """The installed distribution's version, if that distribution's files hold ``folder``."""
    try:
        dist = importlib.metadata.distribution("vllm")
    except importlib.metadata.PackageNotFoundError:
        return None
    owned = Path(str(dist.locate_file("vllm"))).resolve()
    if owned == folder:
        return dist.version
    direct = dist.read_text("direct_url.json") or ""  # an editable install of a checkout
    return dist.version if str(folder.parent) in direct else None


def _file_version(folder: Path) -> tuple[str | None, str]:
    """The version a checkout's own files give, and which file gave it."""
    written = folder / "_version.py"
    if written.is_file():
        match = re.search(r"""^(?:__version__|version)\s*=\s*(?:\w+\s*=\s*)?['"]([^'"]+)['"]""",
                          written.read_text(encoding="utf-8", errors="replace"), re.M)
        if match:
            return match.group(1), VERSION_FILE
    pkg_info = folder.parent / PKG_INFO
    if pkg_info.is_file():
        match = re.search(r"^Version:\s*(\S+)", pkg_info.read_text(encoding="utf-8", errors="replace"), re.M)
        if match:
            return match.group(1), PKG_INFO
    pyproject = folder.parent / PYPROJECT
    if pyproject.is_file():
        try:
            project = tomllib.loads(pyproject.read_text(encoding="utf-8")).get("project", {})
        except tomllib.TOMLDecodeError:
            project = {}
        if isinstance(project.get("version"), str):
            return str(project["version"]), PYPROJECT
    return None, UNKNOWN


def driven_vllm(folder: Path | None = None) -> VllmIdentity:
    """The version and package folder of the vLLM this process drives (or ``folder``'s, when given)."""
    found = folder.resolve() if folder is not None else package_dir()
    if found is None:
        return VllmIdentity(None, None, UNKNOWN)
    version = _metadata_version(found) if folder is None or found == package_dir() else None
    if version is not None:
        return VllmIdentity(version, str(found), METADATA)
    file_version, source = _file_version(found)
    return VllmIdentity(file_version, str(found), source)
