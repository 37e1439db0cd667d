"""The explainer's two cases, replayed on the spec (``asyncspec demo``).

Case 1: a 6-token prompt, max_tokens 3, token budget 4: the max_tokens guard
means no step is scheduled after the last needed one (P + M - 1 = 8 tokens
in all, no wasted step).  Case 2: the same request whose 2nd token is EOS
wastes exactly D - 1 steps: one at depth 2, two at depth 3 (the explainer's
toy engine has no V2+PP decode stagger, so neither does this demo).
"""
from __future__ import annotations

from dataclasses import dataclass

from asyncspec.spec import engine
from asyncspec.spec.config import SpecConfig
from asyncspec.spec.state import initial_state

from asyncspec.checker.trace import Trace


@dataclass(frozen=True)
class DemoCase:
    """One demonstrated claim."""

    title: str
    config: SpecConfig
    eos_position: int
    expect_scheduled_tokens: int | None
    expect_wasted: int


def _cfg(name: str, depth: int, max_tokens: int) -> SpecConfig:
    return SpecConfig(name=name, requests=((6, max_tokens),), batch_queue_depth=depth,
                      token_budget=4, block_size=4, num_blocks=4, decode_stagger=1)


CASES = (
    DemoCase("Case 1: 6-token prompt, budget 4, stops at max_tokens=3 (depth 2)",
             _cfg("demo-max-tokens", 2, 3), 0, 8, 0),
    DemoCase("Case 2: same request, EOS as its 2nd token (depth 2)",
             _cfg("demo-eos-d2", 2, 8), 2, None, 1),
    DemoCase("Case 2 at depth 3 (queue < 3, as pipeline parallel 2)",
             _cfg("demo-eos-d3", 3, 8), 2, None, 2),
)


def run_case(case: DemoCase) -> tuple[Trace, int, int]:
    """Drive the exact engine loop to the end; (trace, tokens scheduled, wasted steps)."""
    s = initial_state(case.config, (case.eos_position,))
    trace = Trace(case.config, (case.eos_position,), [])
    scheduled = 0
    while True:
        actions = engine.enabled_actions(case.config, s)
        if not actions:
            break
        action = actions[0]  # the exact loop is deterministic: one engine action is enabled
        if action.name == engine.SCHEDULE:
            s2, _ = engine.apply(case.config, s, action)
            scheduled += sum(e.num_tokens for e in s2.batch_queue[-1].entries)
            s = s2
        else:
            s, _ = engine.apply(case.config, s, action)
        trace.actions.append(action)
    return trace, scheduled, s.counters[0].num_wasted_steps


def case_holds(case: DemoCase, scheduled: int, wasted: int) -> bool:
    """Does the run show what the explainer claims?"""
    if case.expect_scheduled_tokens is not None and scheduled != case.expect_scheduled_tokens:
        return False
    return wasted == case.expect_wasted
