"""What the explorer says about a spec action or property: its source and its vLLM citation.

>>> info = action_info("schedule")
>>> info["function"], info["source"].startswith("spec/scheduler.py:")
('schedule', True)
>>> any(c["target"].endswith("Scheduler.schedule") for c in info["cites"])
True
"""
from __future__ import annotations

import inspect
from collections.abc import Callable
from pathlib import Path
from typing import Any

from asyncspec.spec import engine, output, scheduler
from asyncspec.spec.cites import CITATIONS
from asyncspec.spec.properties import ALL_ALWAYS, EVENTUALLY

ACTION_FUNCTIONS: dict[str, Callable[..., Any]] = {
    engine.SCHEDULE: scheduler.schedule,
    engine.UPDATE_FROM_OUTPUT: output.update_from_output,
    engine.ABORT: engine.abort,
    engine.ADD_REQUEST: engine.add_request,
    engine.RESET_PREFIX_CACHE: engine.reset_prefix_cache,
}
"""The spec function that is the effect of each action name (``engine.apply``)."""

SPEC_ROOT = Path(engine.__file__).resolve().parent


def source_of(fn: Callable[..., Any]) -> str:
    """``spec/scheduler.py:178``: where ``fn`` is defined, relative to the repository."""
    path = Path(inspect.getsourcefile(fn) or "?").resolve()
    line = inspect.getsourcelines(fn)[1]
    try:
        rel = path.relative_to(SPEC_ROOT.parent)
    except ValueError:
        rel = Path(path.name)
    return f"{rel.as_posix()}:{line}"


def cites_of(fn: Callable[..., Any]) -> list[dict[str, Any]]:
    """The ``@models`` record of ``fn``: one entry per vLLM target, with the PRs it follows."""
    module = fn.__module__.rsplit(".spec.", 1)[-1]
    record = CITATIONS.get(f"{module}.{fn.__qualname__}")
    if record is None:
        return []
    return [{"target": t, "prs": list(record.prs)} for t in record.targets]


def _doc_line(fn: Callable[..., Any]) -> str:
    doc = inspect.getdoc(fn) or ""
    return doc.split("\n\n")[0].replace("\n", " ")


def action_info(name: str) -> dict[str, Any]:
    """The spec function behind action ``name``; an unknown name gets an empty record."""
    fn = ACTION_FUNCTIONS.get(name)
    if fn is None:
        return {"function": name, "source": "", "doc": "", "cites": []}
    return {"function": fn.__name__, "source": source_of(fn), "doc": _doc_line(fn), "cites": cites_of(fn)}


def property_info(name: str) -> dict[str, Any]:
    """A property's meaning (``why``), source and citation; eventually-properties included."""
    if name in ALL_ALWAYS:
        p = ALL_ALWAYS[name]
        return {"name": name, "kind": "always", "why": p.why, "source": source_of(p.check),
                "cites": cites_of(p.check)}
    for e in EVENTUALLY:
        if e.name == name:
            return {"name": name, "kind": "eventually", "why": e.why, "source": "spec/properties.py",
                    "cites": [{"target": t, "prs": []} for t in e.models]}
    return {"name": name, "kind": "unknown", "why": "", "source": "", "cites": []}
