"""Speculative decoding in the spec: padding of one-token admissions, drafts per step."""
from __future__ import annotations

from asyncspec.spec import engine as eng
from asyncspec.spec.config import SpecConfig
from asyncspec.spec.engine import Action
from asyncspec.spec.state import initial_state


def _run(cfg: SpecConfig, actions: list[Action]):  # type: ignore[no-untyped-def]
    s = initial_state(cfg, (0,) * len(cfg.requests))
    for a in actions:
        assert a in eng.enabled_actions(cfg, s), a
        s, _ = eng.apply(cfg, s, a)
    return s


def test_one_token_admission_behind_decodes_is_padded_with_drafts() -> None:
    """vLLM's pad_spec_decode: r1 (a 1-token prompt) joins running r0 with 1 + k positions."""
    cfg = SpecConfig(name="pad", requests=((4, 4), (1, 3)), batch_queue_depth=2, token_budget=16,
                     block_size=4, num_blocks=8, num_speculative_tokens=2, late_arrivals=True)
    s = _run(cfg, [Action(eng.SCHEDULE), Action(eng.ADD_REQUEST, 1), Action(eng.SCHEDULE)])
    entry = {e.req: e for e in s.batch_queue[-1].entries}[1]
    assert (entry.num_tokens, entry.num_drafts, entry.sampled_position) == (3, 2, 1)
    assert s.counters[1].num_output_placeholders == 3


def test_padding_needs_a_decode_scheduled_first() -> None:
    cfg = SpecConfig(name="alone", requests=((1, 3),), batch_queue_depth=2, token_budget=16,
                     block_size=4, num_blocks=8, num_speculative_tokens=2)
    s = _run(cfg, [Action(eng.SCHEDULE)])
    assert [(e.num_tokens, e.num_drafts) for e in s.batch_queue[-1].entries] == [(1, 0)]


def test_arrivals_and_resets_wait_for_a_call_boundary() -> None:
    cfg = SpecConfig(name="b", requests=((2, 2), (2, 2)), batch_queue_depth=1, late_arrivals=True,
                     forced_preemptions=1, num_blocks=4)
    s = _run(cfg, [Action(eng.SCHEDULE)])  # D = 1: the step is in flight, the call goes on
    names = {a.name for a in eng.enabled_actions(cfg, s)}
    assert eng.ADD_REQUEST not in names and eng.RESET_PREFIX_CACHE not in names
