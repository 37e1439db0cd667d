"""``asyncspec drift``: which vLLM symbols the spec and the drivers depend on changed,
moved or disappeared between the installed vLLM and another release.

Each symbol is fingerprinted by AST (``fidelity/fingerprint.py``) in both
releases.  A reviewer moving the pinned vLLM re-reads the spec actions,
properties and project files listed next to each drifted symbol.  The spec's
static references (vllm-neuron: a file at a commit, never installed) are
listed apart, neither drifted nor missing: their source is not compared.

Example:
    >>> from asyncspec.fidelity.source import VllmSource
    >>> a = VllmSource.from_files("1", {"vllm/m.py": "def f():\\n    return 1\\n\\ndef g():\\n    pass\\n"})
    >>> b = VllmSource.from_files("2", {"vllm/m.py": "def f():\\n    return 2\\n", "vllm/n.py": "def g():\\n    pass\\n"})
    >>> [(i.symbol, i.status, i.moved_to) for i in compare(a, b, {"vllm.m.f": {"spec x"}, "vllm.m.g": {"spec y"}})]
    [('vllm.m.f', 'changed', None), ('vllm.m.g', 'moved', 'vllm.n.g')]
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from asyncspec.spec.cites import StaticReference

from asyncspec.fidelity.cited import Dependents
from asyncspec.fidelity.fingerprint import find_elsewhere, locate
from asyncspec.fidelity.source import VllmSource

Status = Literal["changed", "moved", "disappeared", "not_in_base"]


@dataclass(frozen=True)
class DriftItem:
    """One symbol that differs between the two releases."""

    symbol: str
    status: Status
    cited_by: tuple[str, ...]
    moved_to: str | None = None

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"symbol": self.symbol, "status": self.status, "cited_by": list(self.cited_by)}
        if self.moved_to is not None:
            data["moved_to"] = self.moved_to
        return data


def static_json(ref: StaticReference) -> dict[str, Any]:
    """One static reference as ``drift --json`` lists it."""
    return {"spec": ref.spec, "repo": ref.source.repo, "commit": ref.source.commit, "file": ref.source.file,
            "symbols": list(ref.symbols)}


@dataclass
class DriftReport:
    """The comparison of ``base`` (installed) and ``other``; ``static``: the references not compared."""

    base: str
    other: str
    checked: int
    items: list[DriftItem] = field(default_factory=list)
    static: tuple[StaticReference, ...] = ()

    def to_json(self) -> dict[str, Any]:
        """The ``drift --json`` object (without ``schema_version``)."""
        return {"base": self.base, "other": self.other, "items": [i.to_json() for i in self.items],
                "static_references": [static_json(r) for r in self.static]}


def _item(base: VllmSource, other: VllmSource, symbol: str, who: tuple[str, ...]) -> DriftItem | None:
    if base.module_text(symbol) is not None:  # a module: only its presence counts
        return None if other.module_text(symbol) is not None else DriftItem(symbol, "disappeared", who)
    b = locate(base, symbol)
    if b is None:
        return DriftItem(symbol, "not_in_base", who)
    o = locate(other, symbol)
    if o is None:
        same = find_elsewhere(other, b.module, b.qualname)
        if same:
            best = next((loc for loc in same if loc.fingerprint == b.fingerprint), same[0])
            return DriftItem(symbol, "moved", who, best.path)
        return DriftItem(symbol, "disappeared", who)
    if o.fingerprint != b.fingerprint:
        return DriftItem(symbol, "changed", who)
    return None


def compare(base: VllmSource, other: VllmSource, dependents: Mapping[str, set[str]]) -> list[DriftItem]:
    """Every depended-on symbol that changed, moved or disappeared, in symbol order."""
    items = []
    for symbol in sorted(dependents):
        item = _item(base, other, symbol, tuple(sorted(dependents[symbol])))
        if item is not None:
            items.append(item)
    return items


def drift(base: VllmSource, other: VllmSource, dependents: Dependents,
          static: tuple[StaticReference, ...] = ()) -> DriftReport:
    """The report for ``asyncspec drift``."""
    return DriftReport(f"{base.version} ({base.label})", f"{other.version} ({other.label})",
                       len(dependents), compare(base, other, dependents), static)


def render(report: DriftReport) -> str:
    """The reviewer's checklist: drifted symbols, then the spec actions to re-read."""
    lines = [f"vLLM drift: base {report.base} vs {report.other}: "
             f"{len(report.items)} of {report.checked} depended-on symbols drifted"]
    for item in report.items:
        where = f" -> {item.moved_to}" if item.moved_to else ""
        lines.append(f"  {item.status:<12} {item.symbol}{where}")
        lines.append(f"               cited by: {', '.join(item.cited_by)}")
    rereads = sorted({w for i in report.items for w in i.cited_by if w.startswith(("spec ", "property "))})
    if rereads:
        lines.append("re-read before moving the pin: " + ", ".join(w.split(" ", 1)[1] for w in rereads))
    return "\n".join(lines + render_static(report.static))


def render_static(static: tuple[StaticReference, ...]) -> list[str]:
    """The static references, by source: not compared, so neither drifted nor missing."""
    lines = []
    for source in sorted({r.source for r in static}):
        refs = [r for r in static if r.source == source]
        symbols = sorted({s for r in refs for s in r.symbols})
        lines.append(f"not compared (static, {source.short}, not installable): {source.file}: "
                     f"{len(symbols)} symbols cited by {len(refs)} spec functions; re-read them at a new commit")
        lines.extend(f"  {r.spec}: {', '.join(r.symbols)}" for r in refs)
    return lines
