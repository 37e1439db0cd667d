"""The five places where the spec had simplified vLLM 0.33.0 without saying so (issue 16).

Each test drives the spec through a short action sequence (or explores a small
config) and asserts vLLM's behaviour; each fails on the spec before the fix.
"""
from __future__ import annotations

import dataclasses

from asyncspec.checker.bfs import Explorer
from asyncspec.spec import engine as eng
from asyncspec.spec import request as rq
from asyncspec.spec.algebra import CONCRETE as A
from asyncspec.spec.config import SpecConfig
from asyncspec.spec.engine import Action
from asyncspec.spec.output import takes_acceptance
from asyncspec.spec.state import EngineState, initial_state

SCHEDULE, PROCESS = Action(eng.SCHEDULE), Action(eng.UPDATE_FROM_OUTPUT)


def _run(cfg: SpecConfig, actions: list[Action], eos: tuple[int, ...] | None = None) -> EngineState:
    s = initial_state(cfg, eos or (0,) * len(cfg.requests))
    for a in actions:
        assert a in eng.enabled_actions(cfg, s), (a, eng.enabled_actions(cfg, s))
        s, _ = eng.apply(cfg, s, a)
    return s


PAD = SpecConfig(name="pad", requests=((4, 4), (1, 3)), batch_queue_depth=2, token_budget=16,
                 block_size=4, num_blocks=8, num_speculative_tokens=2, late_arrivals=True)


def test_padded_drafts_are_always_rejected() -> None:
    """1. ``pad_spec_decode``'s drafts are -1 ids; the rejection sampler rejects every one."""
    s = _run(PAD, [SCHEDULE, Action(eng.ADD_REQUEST, 1), SCHEDULE, PROCESS, SCHEDULE])
    padded = {e.req: e for e in s.batch_queue[0].entries}[1]
    assert padded.num_drafts == 2 and padded.padded_drafts and not takes_acceptance(s, padded)
    choices = [a.accepted for a in eng.enabled_actions(PAD, s) if a.name == eng.UPDATE_FROM_OUTPUT]
    assert choices == [(0,), (1,), (2,)]  # r0's real drafts only; r1 accepts none
    after, _ = eng.apply(PAD, s, Action(eng.UPDATE_FROM_OUTPUT, None, (2,)))
    c1 = after.counters[1]  # one token out; both -1 positions rolled back
    assert c1.num_output_tokens == 1 and c1.num_computed_tokens - c1.num_output_placeholders == 1


def test_no_reachable_transition_accepts_a_padded_draft() -> None:
    explorer = Explorer(dataclasses.replace(PAD, requests=((3, 2), (1, 2))))
    explorer.run()
    padded_seen = 0
    for i, s in enumerate(explorer.graph.states):
        if not s.batch_queue or eng.UPDATE_FROM_OUTPUT not in {a.name for a in eng.enabled_actions(PAD, s)}:
            continue
        entries = [e for e in s.batch_queue[0].entries if takes_acceptance(s, e) or e.padded_drafts]
        for j, e in enumerate(entries):
            if e.padded_drafts:
                padded_seen += 1
                actions = [a for a in eng.enabled_actions(PAD, s) if a.name == eng.UPDATE_FROM_OUTPUT]
                assert all(len(a.accepted) == len(entries) - 1 for a in actions), i
    assert padded_seen > 0


def test_allocation_reserves_the_drafters_lookahead_slots() -> None:
    """2. ``allocate_slots(num_lookahead_tokens=k)``: EAGLE / MTP / draft-model KV slots."""
    s = _run(PAD, [SCHEDULE])  # r0: 4 prompt tokens, block size 4, k = 2 lookahead slots
    assert len(s.block_tables[0]) == 2
    ngram = dataclasses.replace(PAD, num_lookahead_tokens=0)
    assert len(_run(ngram, [SCHEDULE]).block_tables[0]) == 1


def test_lookahead_slots_change_what_is_reachable() -> None:
    """A pool that fits the n-gram drafter (no lookahead) preempts under EAGLE's lookahead."""
    cfg = SpecConfig(name="tight", requests=((3, 2), (2, 2)), batch_queue_depth=2, token_budget=8,
                     block_size=2, num_blocks=5, num_speculative_tokens=1, num_lookahead_tokens=0)
    no_lookahead = Explorer(cfg).run()
    eagle = Explorer(dataclasses.replace(cfg, num_lookahead_tokens=None)).run()
    assert eagle.ok and no_lookahead.ok
    assert eagle.witnesses["preemption"] and not no_lookahead.witnesses["preemption"]


def test_no_arrival_inside_a_call_after_an_empty_step() -> None:
    """3. After an empty ``schedule()`` with no request left, ``step_with_batch_queue``
    blocks on the oldest output in the same call: no ``add_request`` in between."""
    cfg = SpecConfig(name="call", requests=((2, 2), (2, 2)), batch_queue_depth=3, num_blocks=4,
                     aborts=True, late_arrivals=True)
    s = _run(cfg, [SCHEDULE, Action(eng.ABORT, 0), SCHEDULE])
    assert len(s.batch_queue) == 2 and not s.batch_queue[-1].entries and s.call_in_progress
    names = [a.name for a in eng.enabled_actions(cfg, s)]
    assert names == [eng.UPDATE_FROM_OUTPUT]
    s = _run(cfg, [SCHEDULE, Action(eng.ABORT, 0), SCHEDULE, PROCESS])
    assert eng.ADD_REQUEST in {a.name for a in eng.enabled_actions(cfg, s)}  # the call returned


def test_a_step_that_ran_the_model_returns_to_the_caller() -> None:
    cfg = SpecConfig(name="ret", requests=((2, 2), (2, 2)), batch_queue_depth=3, num_blocks=4,
                     late_arrivals=True)
    s = _run(cfg, [SCHEDULE])
    assert not s.call_in_progress and Action(eng.ADD_REQUEST, 1) in eng.enabled_actions(cfg, s)


def test_preemption_keeps_the_decode_cadence() -> None:
    """4. ``_preempt_request`` leaves ``next_decode_eligible_step`` alone."""
    c = rq.initial_counters(A, rq.RUNNING)._replace(decode_wait=2)
    assert rq.preempt(A, c, False).decode_wait == 2


def _cadence(stagger: int) -> EngineState:
    cfg = SpecConfig(name="cadence", requests=((4, 3),), batch_queue_depth=2, token_budget=3,
                     block_size=2, num_blocks=8, decode_stagger=stagger, forced_preemptions=1)
    # chunk of 3, decode (cadence starts), reset preempts r0, resume with a chunk, then decode?
    return _run(cfg, [SCHEDULE, SCHEDULE, PROCESS, Action(eng.RESET_PREFIX_CACHE), SCHEDULE,
                      PROCESS, SCHEDULE])


def test_a_resumed_request_waits_for_its_old_cadence_with_stagger_3() -> None:
    assert not _cadence(3).batch_queue[-1].entries  # still inside the stagger: empty step
    assert [e.req for e in _cadence(2).batch_queue[-1].entries] == [0]  # stagger 2: elapsed


def test_reset_prefix_cache_is_accepted_with_nothing_running() -> None:
    """5. The utility call is accepted at any call boundary, e.g. after every request ended."""
    cfg = SpecConfig(name="idle", requests=((4, 1),), batch_queue_depth=2, block_size=2,
                     num_blocks=4, forced_preemptions=1)
    s = initial_state(cfg, (0,))
    while engine_actions := [a for a in eng.enabled_actions(cfg, s) if a.name != eng.RESET_PREFIX_CACHE]:
        s, _ = eng.apply(cfg, s, engine_actions[0])  # run the engine until it is idle
    assert not s.running and not s.waiting and any(h is not None for h in s.block_hashes)
    assert eng.enabled_actions(cfg, s) == [Action(eng.RESET_PREFIX_CACHE)]
    s2, events = eng.apply(cfg, s, Action(eng.RESET_PREFIX_CACHE))
    assert all(h is None for h in s2.block_hashes) and not events
