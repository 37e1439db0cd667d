"""A shortest sample trace reaching a witness event (``asyncspec check --show-witness NAME``).

``checker/bfs.py``'s search over ``WitnessModel``: the scheduler spec
(``checker/spec_model.py``, canonical states) in which the first transition
that emits the event leads to a ``Reached`` state, the one state whose
property fails; the search stops there.  The trace names only actions, so it
replays on the concrete spec like any checker trace.

Example:
    >>> from asyncspec.spec.config import SpecConfig
    >>> cfg = SpecConfig(name="one", requests=((3, 2),), token_budget=2, num_blocks=3, block_size=2)
    >>> trace = witness_trace(cfg, "chunked_prefill")
    >>> trace is not None and "chunked_prefill" in trace.states()[-1][2]
    True
"""
from __future__ import annotations

from collections.abc import Collection, Hashable
from dataclasses import dataclass
from typing import Any

from asyncspec.spec.config import SpecConfig
from asyncspec.spec.engine import Action
from asyncspec.spec.state import EngineState

from asyncspec.checker.bfs import Search
from asyncspec.checker.model import Edge, Found, Model
from asyncspec.checker.spec_model import SpecModel
from asyncspec.checker.trace import Trace


@dataclass(eq=False)
class Reached:
    """The state after the first transition that emits the event (hashed by identity)."""

    state: EngineState


class WitnessModel(Model["EngineState | Reached", Action]):
    """The spec of ``cfg``, ending at the first transition that emits ``event``."""

    def __init__(self, cfg: SpecConfig, event: str) -> None:
        self.spec, self.event = SpecModel(cfg), event
        self.name = cfg.name

    def initial_states(self) -> list[EngineState | Reached]:
        """The spec's."""
        return list(self.spec.initial_states())

    def next_states(self, s: EngineState | Reached) -> list[Edge[EngineState | Reached, Action]]:
        """The spec's, up to the first that emits the event (which leads to ``Reached``)."""
        out: list[Edge[EngineState | Reached, Action]] = []
        for t in self.spec.next_states(s) if isinstance(s, EngineState) else ():
            if self.event in t.events:
                out.append(Edge(t.action, Reached(t.state), t.events))
                break
            out.append(Edge(t.action, t.state, t.events))
        return out

    def canonical(self, s: EngineState | Reached) -> EngineState | Reached:
        """The spec's canonical form (``Reached`` is its own)."""
        return self.spec.canonical(s) if isinstance(s, EngineState) else s

    def fingerprint(self, s: EngineState | Reached) -> Hashable:
        """The state itself."""
        return s

    def always(self, s: EngineState | Reached, skip: Collection[str]) -> Found:
        """``not_reached``: fails in the ``Reached`` state."""
        return [("not_reached", self.event)] if isinstance(s, Reached) else []

    def trace(self, root: Any, actions: list[Action], violated: str) -> Trace:
        """A sample trace (it shows no violation)."""
        return Trace(self.spec.cfg, tuple(p.eos_position for p in root.params), actions, violated=None)


def witness_trace(cfg: SpecConfig, event: str, max_states: int | None = None,
                  stopped: list[bool] | None = None) -> Trace | None:
    """A shortest trace whose last action emits ``event``, or None when no reachable step does
    (within ``max_states`` states, when given: then ``True`` is appended to ``stopped``)."""
    r = Search(WitnessModel(cfg, event), max_states, partial_on_interrupt=False).run()
    if r.violations:
        return r.violations[0].trace
    if r.partial and stopped is not None:
        stopped.append(True)
    return None
