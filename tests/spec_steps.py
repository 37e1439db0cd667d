"""Shared by the spec's hand-written traces: apply actions named as text from the first initial state."""
from __future__ import annotations

from asyncspec.spec import engine as eng
from asyncspec.spec.config import SpecConfig
from asyncspec.spec.state import EngineState, initial_states


def run_actions(cfg: SpecConfig, actions: list[str]) -> EngineState:
    """Apply ``actions`` (each must be enabled: the assertion names the ones that are) from the first
    initial state of ``cfg``."""
    s = initial_states(cfg)[0]
    for text in actions:
        action = eng.parse_action(text)
        assert action in eng.enabled_actions(cfg, s), (text, [str(a) for a in eng.enabled_actions(cfg, s)])
        s, _ = eng.apply(cfg, s, action)
    return s
