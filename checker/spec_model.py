"""The scheduler spec as a ``Model`` (``checker/model.py``): what ``asyncspec check`` explores.

Initial states are the EOS choices (``spec.state.initial_states``), the steps
``spec.engine.next_states``, the canonical form ``checker/symmetry.py``'s,
the *always* properties ``spec.properties.always_for(cfg)``, the witnesses
``spec.events.ALL_EVENTS`` (those of ``cfg.extra["witnesses"]`` required) and
the *eventually* properties ``checker/graph.py``'s.

Example:
    >>> from asyncspec.spec.config import SpecConfig
    >>> m = SpecModel(SpecConfig(name="tiny", requests=((2, 1),), num_blocks=1, block_size=4))
    >>> s = m.initial_states()[0]
    >>> [str(t.action) for t in m.next_states(s)], m.always(s, ())
    (['schedule'], [])
"""
from __future__ import annotations

from collections.abc import Collection, Iterator
from typing import Any, cast

from asyncspec.spec import engine
from asyncspec.spec.config import SpecConfig
from asyncspec.spec.engine import Action
from asyncspec.spec.events import ALL_EVENTS
from asyncspec.spec.properties import always_for, eventually_for
from asyncspec.spec.state import EngineState, initial_states

from asyncspec.checker import graph
from asyncspec.checker.model import Found, Model
from asyncspec.checker.state_graph import StateGraph
from asyncspec.checker.symmetry import canonical, identity
from asyncspec.checker.trace import Trace


class SpecModel(Model[EngineState, Action]):
    """The spec for one config, with or without block-id symmetry."""

    def __init__(self, cfg: SpecConfig, symmetry: bool = True) -> None:
        self.cfg = cfg
        self.symmetry = symmetry
        self.name = cfg.name
        self.witnesses = ALL_EVENTS
        self.required_witnesses = tuple(cast("tuple[str, ...]", cfg.extra.get("witnesses", ())))
        self.expect_violation = cfg.expect_violation
        self.properties = always_for(cfg)
        self._canon = canonical if symmetry else identity

    def initial_states(self) -> list[EngineState]:
        """One state per EOS choice."""
        return initial_states(self.cfg)

    def next_states(self, s: EngineState) -> list[engine.Transition]:
        """The spec's next-state relation."""
        return engine.next_states(self.cfg, s)

    def canonical(self, s: EngineState) -> EngineState:
        """Block ids renamed by first use, step fences shifted (``checker/symmetry.py``)."""
        return self._canon(s)

    def always(self, s: EngineState, skip: Collection[str]) -> Found:
        """The spec's own checks, in ``always_for`` order."""
        cfg = self.cfg
        return [(p.name, m) for p in self.properties
                if p.name not in skip and (m := p.check(cfg, s)) is not None]

    def eventually(self, g: StateGraph[Any, Action]) -> Iterator[tuple[str, int, str]]:
        """No deadlock, no livelock, every parked free drained (``checker/graph.py``)."""
        return graph.check_eventually(self.cfg, g, eventually_for(self.cfg))

    def trace(self, root: EngineState, actions: list[Action], violated: str) -> Trace:
        """The actions from the initial state with ``root``'s EOS choice."""
        return Trace(self.cfg, tuple(p.eos_position for p in root.params), actions, violated=violated)
