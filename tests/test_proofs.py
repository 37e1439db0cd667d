"""Fast tier for ``proofs/``: the proof goes through, mutants give replayed CTIs,
a broken encoding fails loudly, and no lemma is vacuous."""
from __future__ import annotations

from typing import Any, Callable

import pytest
import z3

from asyncspec.checker.bfs import Explorer
from asyncspec.proofs import request_abstraction as ab
from asyncspec.checker.configs import named_configs
from asyncspec.proofs.proof_mutants import DRAFT_MUTANTS, MUTANTS, Mutant
from asyncspec.proofs.obligations import INVARIANTS, conjunction, invariants_for
from asyncspec.proofs.prover import EncoderBug, Report, prove, prove_with_patches, symbolic_choice, symbolic_state
from asyncspec.proofs.z3arith import Z3
from asyncspec.spec import request as rq
from asyncspec.spec.algebra import CONCRETE
from asyncspec.spec.config import SpecConfig
from asyncspec.spec.properties import fresh_sampling_steps
from asyncspec.spec.state import EngineState


@pytest.fixture(scope="module")
def report() -> Report:
    return prove(timeout_ms=10_000)


def test_every_obligation_proved(report: Report) -> None:
    bad = [(o.variant, o.action, o.invariant, o.result) for o in report.outcomes if o.result != "proved"]
    assert not bad
    assert len(report.outcomes) > 800


def test_cli_json_contract(capsys: pytest.CaptureFixture[str]) -> None:
    import json

    from asyncspec.proofs.prove_command import prove_main

    assert prove_main(json_out=True, timeout_ms=10_000, only="async-d2 schedule") == 0
    data = json.loads(capsys.readouterr().out)
    assert data["result"] == "ok" and data["obligations"]
    assert set(data["obligations"][0]) >= {"action", "invariant", "result", "seconds"}


@pytest.mark.parametrize("variant", ab.VARIANTS, ids=lambda v: v.name)
@pytest.mark.parametrize("action", list(ab.ACTIONS))
def test_action_enabled_under_invariant(variant: ab.Variant, action: str) -> None:
    """No action is vacuously preserved: each is enabled in some invariant state."""
    s, ch = symbolic_state(""), symbolic_choice()
    guard, _ = ab.ACTIONS[action](Z3, variant, s, ch)
    solver = z3.Solver()
    solver.add(ab.domain(Z3, variant, s), conjunction(Z3, variant, s, invariants_for(variant)), guard)
    assert solver.check() == z3.sat


@pytest.mark.parametrize("mutant", MUTANTS, ids=lambda m: m.name)
def test_mutant_gives_replayed_cti(mutant: Mutant) -> None:
    r = prove_with_patches({mutant.function: mutant.replacement}, stop_on_cti=True)
    assert not r.ok
    assert r.ctis, "the failure must be a replayed CTI, not an unknown"
    assert r.ctis[0].table().row_count == 2


def test_mutants_break_different_invariants() -> None:
    assert len({m.breaks for m in MUTANTS}) == len(MUTANTS) >= 4
    assert len({m.breaks for m in DRAFT_MUTANTS}) == len(DRAFT_MUTANTS) >= 3


# ---------------------------------------------------------------- speculative decoding, k unbounded

SPEC_VARIANTS = tuple(v for v in ab.VARIANTS if v.spec_decode)


def test_spec_variants_prove_the_counter_properties(report: Report) -> None:
    """Every counter property that holds with drafts is an obligation of each spec-decode variant."""
    expected = {"placeholders_nonnegative", "stale_nonnegative", "placeholders_le_in_flight",
                "stale_le_in_flight", "placeholders_count_sampling_steps", "output_within_max_tokens",
                "stale_output_keeps_counters", "prefix_cache_frontier_known", "output_caching_kv_written",
                "spec_tokens_bounded"}
    for v in SPEC_VARIANTS:
        safety = {o.invariant for o in report.outcomes if o.variant == v.name and o.action == "safety"}
        want = expected | ({"computed_minus_placeholders"} if v.async_scheduling else set())
        want |= {"last_sched_seq_bounded", "parked_blocks_fenced"} if v.defer_block_free else set()
        assert safety == want, v.name
        assert "no_wasted_step_on_max_tokens" not in safety  # false with drafts: findings F5


@pytest.mark.parametrize("mutant", DRAFT_MUTANTS, ids=lambda m: m.name)
def test_draft_mutant_gives_replayed_cti(mutant: Mutant) -> None:
    r = prove_with_patches({mutant.function: mutant.replacement}, variants=SPEC_VARIANTS, stop_on_cti=True)
    assert not r.ok
    assert r.ctis, "the failure must be a replayed CTI, not an unknown"
    assert r.ctis[0].table().row_count == 2


def test_draft_mutants_do_not_touch_k0() -> None:
    """k = 0 schedules no drafts: the k = 0 variants cannot see the draft mutants."""
    k0 = tuple(v for v in ab.VARIANTS if not v.spec_decode)
    for m in DRAFT_MUTANTS:
        assert prove_with_patches({m.function: m.replacement}, variants=k0, only="async schedule").ok


def _sat(v: ab.Variant, extra: Callable[[ab.AbsState, ab.Choice, ab.AbsState], Any], action: str) -> bool:
    s, ch = symbolic_state(""), symbolic_choice()
    guard, post = ab.ACTIONS[action](Z3, v, s, ch)
    solver = z3.Solver()
    solver.add(ab.domain(Z3, v, s), conjunction(Z3, v, s, invariants_for(v)), guard, extra(s, ch, post))
    return bool(solver.check() == z3.sat)


@pytest.mark.parametrize("variant", SPEC_VARIANTS, ids=lambda v: v.name)
def test_draft_choices_not_vacuous(variant: ab.Variant) -> None:
    """Under the invariant: a step schedules drafts for a huge k; a fresh frame has some drafts
    rejected (the request goes on) and all accepted; a deliver-mode stale frame has drafts."""
    huge = lambda s, ch, post: z3.And(s.e.num_spec == 1000, post.g.kd - s.g.kd == 1000)  # noqa: E731
    assert _sat(variant, huge, "schedule")
    rejected = lambda s, ch, post: z3.And(ch.d0 > 0, ch.acc < ch.d0, post.c.status == rq.RUNNING)  # noqa: E731
    assert _sat(variant, rejected, "process_fresh_sample")
    accepted = lambda s, ch, post: z3.And(ch.d0 > 1, ch.acc == ch.d0, post.c.status == rq.RUNNING)  # noqa: E731
    assert _sat(variant, accepted, "process_fresh_sample")
    stale = lambda s, ch, post: z3.And(ch.d0 > 0, z3.Not(s.c.drop_stale_output))  # noqa: E731
    assert _sat(variant, stale, "process_stale_sample")


def test_unknown_patch_rejected() -> None:
    with pytest.raises(ValueError):
        prove_with_patches({"no_such_function": lambda: None})


def _process_fresh_sample_without_drain(A: Any, v: ab.Variant, s: ab.AbsState, ch: ab.Choice) -> Any:
    """A wrong abstract action: delivers the token but forgets the in-flight drain."""
    guard, post = ab.ACTIONS["process_fresh_sample"](A, v, s, ch)
    c = post.c._replace(num_in_flight_tokens=s.c.num_in_flight_tokens)
    return guard, post._replace(c=c)


def test_broken_encoding_raises_encoder_bug() -> None:
    actions = {"process_fresh_sample": _process_fresh_sample_without_drain}
    with pytest.raises(EncoderBug):
        prove(actions=actions, only="async process_fresh_sample x in_flight_is_frames")


def _fresh_sample_forgetting_accepted(A: Any, v: ab.Variant, s: ab.AbsState, ch: ab.Choice) -> Any:
    """A wrong abstract action: appends one token however many drafts were accepted."""
    guard, post = ab.ACTIONS["process_fresh_sample"](A, v, s, ch)
    return guard, post._replace(c=post.c._replace(num_output_tokens=s.c.num_output_tokens + 1))


def test_broken_draft_encoding_raises_encoder_bug() -> None:
    actions = {"process_fresh_sample": _fresh_sample_forgetting_accepted}
    with pytest.raises(EncoderBug):
        prove(actions=actions, variants=SPEC_VARIANTS,
              only="async-spec process_fresh_sample x computed_minus_placeholders")


def test_broken_arith_raises_encoder_bug(monkeypatch: pytest.MonkeyPatch) -> None:
    """z3 arithmetic that disagrees with the concrete one is caught at replay."""
    monkeypatch.setattr(type(Z3), "div", lambda self, a, b: (a + b - 1) / b)
    with pytest.raises(EncoderBug):
        prove(only="async schedule x prefix_cache_frontier_known")


# ---------------------------------------------------------------- sometimes: no lemma is vacuous

Pred = Callable[[SpecConfig, EngineState], bool]

CFG_DELIVER = SpecConfig(name="sometimes-deliver", requests=((3, 2), (2, 2)), batch_queue_depth=2, token_budget=2,
                         num_blocks=3, block_size=2, forced_preemptions=1)
CFG_DROP = SpecConfig(name="sometimes-drop", requests=((3, 2), (2, 2)), batch_queue_depth=2, token_budget=2,
                      num_blocks=3, block_size=2, forced_preemptions=1, stale_mode="drop")
CFG_DEFER = SpecConfig(name="sometimes-defer", requests=((3, 2), (2, 2)), batch_queue_depth=2, token_budget=2,
                       num_blocks=3, block_size=2, forced_preemptions=1, defer_block_free=True, stale_mode="drop")


def _frames(s: EngineState, i: int) -> list[Any]:
    return [e for step in s.batch_queue for e in step.entries if e.req == i]


def _any(s: EngineState, pred: Callable[[rq.RequestParams, rq.RequestCounters, int], bool]) -> bool:
    return any(pred(p, c, i) for i, (p, c) in enumerate(zip(s.params, s.counters)))


def _unfinished(c: rq.RequestCounters) -> bool:
    return c.status in (rq.WAITING, rq.RUNNING, rq.PREEMPTED)


def _fresh_sampling_frames(s: EngineState, i: int) -> list[Any]:
    """In-flight sampling frames of request ``i`` whose output is not stale (as ``fresh_sampling_steps``)."""
    out, stale_left = [], s.counters[i].num_stale_output_tokens
    for e in _frames(s, i):
        if stale_left > 0:
            stale_left -= e.num_tokens
        elif e.sampled_position > 0:
            out.append(e)
    return out


def _decoding(c: rq.RequestCounters) -> bool:
    return c.status == rq.RUNNING and not c.is_prefill_chunk


NAMED = named_configs()
CFG_SPEC_D2, CFG_SPEC_D3, CFG_SPEC_SYNC = NAMED["async-d2-spec"], NAMED["async-d3-spec2"], NAMED["sync-d1-spec"]

SOMETIMES_SPEC: dict[str, tuple[tuple[SpecConfig, Pred], ...]] = {
    # async: S = k > 0 while a fresh sampling frame (holding drafts) is in flight
    "spec_tokens_shape": (
        (CFG_SPEC_D2, lambda cfg, s: _any(s, lambda p, c, i: _decoding(c) and c.num_spec_token_ids == cfg.num_speculative_tokens > 0
                                          and any(e.num_drafts > 0 for e in _fresh_sampling_frames(s, i)))),
        # sync: S = k > 0 set by the last fresh delivery, nothing in flight
        (CFG_SPEC_SYNC, lambda cfg, s: _any(s, lambda p, c, i: _decoding(c) and c.num_spec_token_ids == cfg.num_speculative_tokens > 0
                                            and not _frames(s, i))),
    ),
    # two fresh sampling frames with drafts, tokens exactly 1 + drafts each
    "sampling_frames_hold_drafts": (
        (CFG_SPEC_D3, lambda cfg, s: _any(s, lambda p, c, i: len(_fresh_sampling_frames(s, i)) >= 2 and all(
            e.num_drafts > 0 and e.num_tokens == 1 + e.num_drafts for e in _fresh_sampling_frames(s, i)))),
    ),
    # sync, decoding, a frame with drafts in flight: C = N - 1 + 1 + drafts > N
    "sync_computed_ahead": (
        (CFG_SPEC_SYNC, lambda cfg, s: _any(s, lambda p, c, i: _decoding(c) and any(
            e.num_drafts > 0 for e in _fresh_sampling_frames(s, i)) and c.num_computed_tokens > rq.num_tokens(p, c))),
    ),
}

SOMETIMES: dict[str, tuple[SpecConfig, Pred]] = {
    "status_valid": (CFG_DELIVER, lambda cfg, s: _any(s, lambda p, c, i: rq.is_finished(CONCRETE, c))),
    "no_drafts_without_spec_decode": (CFG_DELIVER, lambda cfg, s: _any(s, lambda p, c, i: c.status == rq.RUNNING and not c.is_prefill_chunk and c.num_output_placeholders > 0)),
    "frames_wellformed": (CFG_DELIVER, lambda cfg, s: _any(s, lambda p, c, i: len(_frames(s, i)) >= 2)),
    "in_flight_is_frames": (CFG_DROP, lambda cfg, s: _any(s, lambda p, c, i: _unfinished(c) and 0 < c.num_stale_output_tokens < c.num_in_flight_tokens)),
    "fresh_frames_ordered": (CFG_DELIVER, lambda cfg, s: _any(s, lambda p, c, i: {e.sampled_position > 0 for e in _frames(s, i)} == {False, True})),
    "mixed_stale_is_dropped": (CFG_DROP, lambda cfg, s: _any(s, lambda p, c, i: c.num_stale_output_tokens > 0 and c.drop_stale_output)),
    "deliver_mode_stale_waits": (CFG_DELIVER, lambda cfg, s: _any(s, lambda p, c, i: c.num_stale_output_tokens > 0 and not c.drop_stale_output)),
    "not_running_is_reset": (CFG_DELIVER, lambda cfg, s: _any(s, lambda p, c, i: c.status == rq.PREEMPTED)),
    "running_shape": (CFG_DELIVER, lambda cfg, s: _any(s, lambda p, c, i: c.status == rq.RUNNING and c.is_prefill_chunk and c.num_in_flight_tokens > 0)),
    "stale_output_not_cached": (CFG_DROP, lambda cfg, s: _any(s, lambda p, c, i: c.status == rq.RUNNING and c.num_stale_output_tokens > 0)),
    "unfinished_below_max_tokens": (CFG_DELIVER, lambda cfg, s: _any(s, lambda p, c, i: _unfinished(c) and c.num_output_tokens == p.max_tokens - 1 > 0)),
    "unfinished_not_wasted": (CFG_DELIVER, lambda cfg, s: _any(s, lambda p, c, i: c.num_wasted_steps > 0)),
    "frames_fit_queue": (CFG_DELIVER, lambda cfg, s: len(s.batch_queue) == cfg.batch_queue_depth and _any(s, lambda p, c, i: len(_frames(s, i)) == 2)),
    "max_tokens_headroom": (CFG_DELIVER, lambda cfg, s: _any(s, lambda p, c, i: c.status == rq.RUNNING and c.num_output_placeholders > 0 and c.num_output_tokens + fresh_sampling_steps(s, i) == p.max_tokens)),
    "step_seqs_ordered": (CFG_DEFER, lambda cfg, s: bool(s.deferred_frees) and _any(s, lambda p, c, i: len(_frames(s, i)) > 0 and s.processed_step_seq < c.last_sched_seq)),
}


@pytest.fixture(scope="module")
def graphs() -> dict[str, list[EngineState]]:
    out = {}
    for cfg in (CFG_DELIVER, CFG_DROP, CFG_DEFER, CFG_SPEC_D2, CFG_SPEC_D3, CFG_SPEC_SYNC):
        explorer = Explorer(cfg, stop_on_first=False)
        explorer.run()
        out[cfg.name] = explorer.graph.states
    return out


def test_every_lemma_has_a_sometimes_check() -> None:
    assert {i.name for i in INVARIANTS if i.kind == "lemma"} == set(SOMETIMES) | set(SOMETIMES_SPEC)


@pytest.mark.parametrize("lemma", sorted(SOMETIMES))
def test_lemma_guard_reachable(lemma: str, graphs: dict[str, list[EngineState]]) -> None:
    cfg, pred = SOMETIMES[lemma]
    assert any(pred(cfg, s) for s in graphs[cfg.name]), f"{lemma}: guard never non-trivially true"


@pytest.mark.parametrize("lemma", sorted(SOMETIMES_SPEC))
def test_spec_lemma_guard_reachable(lemma: str, graphs: dict[str, list[EngineState]]) -> None:
    for cfg, pred in SOMETIMES_SPEC[lemma]:
        assert any(pred(cfg, s) for s in graphs[cfg.name]), f"{lemma} ({cfg.name}): guard never non-trivially true"
