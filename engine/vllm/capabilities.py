"""What the installed vLLM supports: each driver's exact surface, probed at start-up.

A *surface* is one thing a driver relies on: a class or function that must
exist (``Exists``), a keyword argument it passes (``Param``), a config field
(``Field``), an attribute it reads or sets after construction (``Attr``), or
a behaviour of a validator (``Behaviour``).  Surfaces are grouped into named
*capabilities* (``surfaces.py`` lists them, one capability per driver part).
``probe()`` checks every surface against the importable vLLM and returns a
``Capabilities``: the names present and, for each absent one, one line naming
its first missing piece.  A driver that cannot run raises
``MissingCapability(capability, reason)`` (``Capabilities.require``), which a
campaign turns into "part skipped"; a driver that can do without a piece (a
config field it would only pass at its default) asks ``Capabilities.has``.

The probe reads the objects (``inspect.signature``, dataclass fields, class
sources, each class's source read once), never constructs a vLLM object: it
costs what resolving the names imports (measured on 0.33.0: the scheduler's
surfaces 0.2 s after the vLLM import, the V1 runner's 1.8 s, most of it
importing the runner).  ``resolve`` is a parameter so tests can probe stand-ins;
``surfaces.py`` holds the drivers' surfaces and probes the installed vLLM one
capability at a time (``surfaces.require``, ``surfaces.has``).

Example, against a stand-in namespace that lacks one keyword::

    >>> class Scheduler:
    ...     def __init__(self, vllm_config, kv_cache_config): ...
    >>> from asyncspec.engine.vllm.capabilities import Param, probe
    >>> caps = probe([Param("scheduler", "m.Scheduler", "block_size")], {"m.Scheduler": Scheduler}.get)
    >>> caps.has("scheduler"), caps.missing["scheduler"]
    (False, 'm.Scheduler takes no keyword argument block_size')
"""
from __future__ import annotations

import dataclasses
import functools
import inspect
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

Resolver = Callable[[str], Any]
"""Dotted path -> the object it names, or None (``vllm_environment.resolve_dotted``)."""


class MissingCapability(RuntimeError):
    """A driver needs ``capability``, which this vLLM lacks; ``reason`` is one line naming the missing piece.

    Raised by ``Capabilities.require`` (and the drivers through it) before any
    vLLM object is built, so a campaign can skip the part and go on.
    """

    def __init__(self, capability: str, reason: str) -> None:
        """Keep both halves; the message is ``<capability>: <reason>``, one line."""
        super().__init__(f"{capability}: {reason}")
        self.capability = capability
        self.reason = reason


@dataclass(frozen=True)
class Surface:
    """One piece of vLLM a capability needs: ``path`` (dotted) and, for most kinds, a ``member`` of it."""

    capability: str
    path: str
    member: str = ""

    def check(self, obj: Any) -> str | None:
        """None when ``obj`` (what ``path`` resolved to) has the piece; else one line naming it."""
        raise NotImplementedError

    def cited(self) -> str:
        """The dotted vLLM path this surface stands for (``path`` or ``path.member``)."""
        return self.path


@dataclass(frozen=True)
class Exists(Surface):
    """``path`` must resolve (a module, class, function or class attribute)."""

    def check(self, obj: Any) -> str | None:
        """Resolution is all: checked by ``missing_piece``."""
        return None


@dataclass(frozen=True)
class Param(Surface):
    """The callable at ``path`` must accept the keyword argument ``member``.

    ``named``: the signature must name it; ``**kwargs`` alone does not count
    (for an argument the callee must act on, e.g. MRV2's
    ``GPUModelRunner.load_model(model=...)``, which 0.30.0 and 0.31.0 swallow).
    """

    named: bool = False

    def check(self, obj: Any) -> str | None:
        """Present when the signature names ``member`` (or, unless ``named``, takes ``**kwargs``)."""
        try:
            params = inspect.signature(obj).parameters.values()
        except (TypeError, ValueError):
            return f"{self.path} has no readable signature (looking for keyword {self.member})"
        if any(p.name == self.member and p.kind is not p.POSITIONAL_ONLY for p in params):
            return None
        if not self.named and any(p.kind is p.VAR_KEYWORD for p in params):
            return None
        swallowed = " (only **kwargs, which ignore it)" if self.named else ""
        return f"{self.path} takes no keyword argument {self.member}{swallowed}"


@dataclass(frozen=True)
class Field(Surface):
    """The config class at ``path`` must have the field ``member`` (a dataclass or pydantic field)."""

    def check(self, obj: Any) -> str | None:
        """Dataclass fields (init-only ones too), pydantic ``model_fields``, else the constructor's keywords."""
        names: set[str] = set(getattr(obj, "__dataclass_fields__", {}))  # InitVars included
        model_fields = getattr(obj, "model_fields", None)
        if isinstance(model_fields, dict):
            names |= set(model_fields)
        if not names and inspect.isclass(obj):
            names = set(inspect.signature(obj).parameters)
        return None if self.member in names else f"{self.path} has no field {self.member}"


@functools.lru_cache(maxsize=256)
def _source_of(klass: Any) -> str:
    """``inspect.getsource(klass)`` once per class (it parses the whole module), "" without one."""
    try:
        return inspect.getsource(klass)
    except (OSError, TypeError):
        return ""


def _class_sources(cls: Any) -> Iterable[str]:
    """The source of ``cls`` and of each of its bases that has one (stand-ins and vLLM alike)."""
    for klass in getattr(cls, "__mro__", (cls,)):
        if klass is not object:
            yield _source_of(klass)


@dataclass(frozen=True)
class Attr(Surface):
    """Instances of the class at ``path`` carry the attribute ``member``.

    Present when the class (or a base) defines it (a class attribute, a
    property, a method, a slot or an annotation), or its source assigns
    ``self.<member>``: instance attributes exist only after ``__init__``, and
    the probe builds nothing.
    """

    def check(self, obj: Any) -> str | None:
        """Looks at the class dictionary, then at the class sources."""
        if hasattr(obj, self.member) or any(self.member in getattr(k, "__annotations__", {})
                                            for k in getattr(obj, "__mro__", ())):
            return None
        assigned = re.compile(rf"\bself\.{re.escape(self.member)}\s*(?::[^=\n]+)?=[^=]")
        if any(assigned.search(text) for text in _class_sources(obj)):
            return None
        return f"{self.path} has no attribute {self.member}"

    def cited(self) -> str:
        """``path.member``."""
        return f"{self.path}.{self.member}"


@dataclass(frozen=True)
class Behaviour(Surface):
    """What ``path`` does, decided by ``test`` (the resolved object -> a one-line problem, or None).

    For a validator whose verdict depends on the release, e.g. ``VllmConfig``
    refusing Model Runner V2 without Triton (0.31.0, 0.32.0).
    """

    test: Callable[[Any], str | None] = dataclasses.field(default=lambda obj: None, compare=False)

    def check(self, obj: Any) -> str | None:
        """``test(obj)``."""
        return self.test(obj)


def missing_piece(surface: Surface, resolve: Resolver) -> str | None:
    """One line naming what ``surface`` finds missing, or None."""
    obj = resolve(surface.path)
    if obj is None:
        return f"{surface.path} does not exist"
    return surface.check(obj)


@dataclass(frozen=True)
class Capabilities:
    """A probe's answer: the capabilities present and, per absent one, its first missing piece."""

    present: frozenset[str]
    missing: dict[str, str]  # capability -> one line

    def has(self, capability: str) -> bool:
        """Whether every surface of ``capability`` is there."""
        return capability in self.present

    def require(self, *capabilities: str) -> None:
        """Raise ``MissingCapability`` for the first of ``capabilities`` that is absent."""
        for name in capabilities:
            if name not in self.present:
                raise MissingCapability(name, self.missing.get(name, "not probed"))

    def names(self) -> list[str]:
        """The present capabilities, sorted (what a report lists)."""
        return sorted(self.present)

    def lines(self) -> list[str]:
        """``<capability>: <missing piece>`` for each absent capability, sorted."""
        return [f"{name}: {why}" for name, why in sorted(self.missing.items())]


def probe(surfaces: Iterable[Surface], resolve: Resolver) -> Capabilities:
    """Check each surface; a capability is present when all of its surfaces are."""
    seen: dict[str, str | None] = {}
    for surface in surfaces:
        seen.setdefault(surface.capability, None)
        if seen[surface.capability] is None:
            seen[surface.capability] = missing_piece(surface, resolve)
    return Capabilities(frozenset(n for n, why in seen.items() if why is None),
                        {n: why for n, why in seen.items() if why is not None})
