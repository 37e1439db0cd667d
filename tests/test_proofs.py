"""Fast tier for ``proofs/``: the proof goes through, mutants give replayed CTIs,
a broken encoding fails loudly, and no lemma is vacuous."""
from __future__ import annotations

from typing import Any, Callable

import pytest
import z3

from asyncspec.checker.bfs import Explorer
from asyncspec.proofs import abstraction as ab
from asyncspec.proofs.mutants import MUTANTS, Mutant
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

    from asyncspec.proofs.cli import prove_main

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
    for cfg in (CFG_DELIVER, CFG_DROP, CFG_DEFER):
        explorer = Explorer(cfg, stop_on_first=False)
        explorer.run()
        out[cfg.name] = explorer.graph.states
    return out


def test_every_lemma_has_a_sometimes_check() -> None:
    assert {i.name for i in INVARIANTS if i.kind == "lemma"} == set(SOMETIMES)


@pytest.mark.parametrize("lemma", sorted(SOMETIMES))
def test_lemma_guard_reachable(lemma: str, graphs: dict[str, list[EngineState]]) -> None:
    cfg, pred = SOMETIMES[lemma]
    assert any(pred(cfg, s) for s in graphs[cfg.name]), f"{lemma}: guard never non-trivially true"
