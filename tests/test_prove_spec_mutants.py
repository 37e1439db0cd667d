"""The checker's spec mutants that break a counter invariant also fail the proof.

Each mutant of ``checker/spec_mutants.py`` that patches ``spec/request.py`` and targets
a counter invariant must make ``prove`` report a counterexample to induction that
replays on the concrete spec (the prover raises ``EncoderBug`` otherwise).
"""
from __future__ import annotations

import pytest

from asyncspec.checker.spec_mutants import MUTANTS, applied
from asyncspec.proofs.request_abstraction import VARIANTS
from asyncspec.proofs.prover import prove
from asyncspec.spec import request as rq

NOT_PROVED = {"delivered_in_order", "matches_sync_output",  # docs/proofs.md: not covered by the abstraction
              "grammar_in_order",  # structured output is not in the proofs (docs/proofs.md)
              "wasted_steps_bounded"}  # proved only for a deferred abort's row (deferred_abort_wastes_one_step)
SPEC_VARIANTS = {v.name for v in VARIANTS if v.spec_decode}
COUNTER_MUTANTS = [m for m in MUTANTS
                   if all(mod is rq for mod, _, _ in m.patches) and m.property not in NOT_PROVED]
FAST = {"rejection_keeps_computed"}  # default tier (a spec-decode variant's CTI); the rest slow
# (preempt_adds_stale, the third of the fast ones, is slow since the default tier was lightened)
SPEC_DECODE = {"rejection_keeps_computed"}  # caught only by the spec-decode variants (k symbolic)


def _params() -> list[object]:
    return [pytest.param(m, id=m.name, marks=() if m.name in FAST else pytest.mark.slow)
            for m in COUNTER_MUTANTS]


def test_the_cross_check_covers_the_counter_mutants() -> None:
    assert len(COUNTER_MUTANTS) >= 12


@pytest.mark.parametrize("mutant", _params())
def test_spec_mutant_fails_the_proof_with_a_replayed_cti(mutant) -> None:  # type: ignore[no-untyped-def]
    with applied(mutant.patches):
        report = prove()
    assert not report.ok
    assert report.ctis, "a failed proof must come with a replayed counterexample"
    if mutant.name in SPEC_DECODE:
        assert {o.variant for o in report.outcomes if o.result != "proved"} <= SPEC_VARIANTS
        assert all(o.result == "proved" for o in report.outcomes if o.variant not in SPEC_VARIANTS)


def test_the_cross_check_covers_spec_decode() -> None:
    names = {m.name for m in COUNTER_MUTANTS}
    assert SPEC_DECODE <= names and SPEC_DECODE <= FAST
