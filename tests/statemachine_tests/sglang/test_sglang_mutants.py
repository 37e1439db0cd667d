"""Slow tier: every one-line SGLang mutant (engine/sglang/sglang_mutants.py) is killed by a fixed-work
``--target sglang`` campaign (the kill table of docs/fuzzing.md, "SGLang mutants")."""
from __future__ import annotations

import pytest

from asyncspec.engine.sglang.client import SGLangPool, SGLangUnavailable, venv_problem
from asyncspec.engine.sglang.sglang_mutants import MUTANTS
from asyncspec.statemachine_tests.sglang.sglang_fuzz import Campaign


@pytest.mark.slow
@pytest.mark.skipif(venv_problem() is not None, reason=f"SGLang venv absent: {venv_problem()}")
@pytest.mark.parametrize("name", [m.name for m in MUTANTS])
def test_each_sglang_mutant_is_killed_by_a_fixed_work_campaign(name: str) -> None:
    campaign = Campaign(seed=0, examples=30, seconds=900.0, mutant=name)
    pool = SGLangPool(name)
    try:
        found = campaign.run(pool)
    finally:
        pool.close()
    assert found is not None, f"{name} survived {campaign.done} examples"


@pytest.mark.slow
@pytest.mark.skipif(venv_problem() is not None, reason=f"SGLang venv absent: {venv_problem()}")
def test_an_unknown_or_moved_mutant_is_refused_in_one_line() -> None:
    pool = SGLangPool("no_such_mutant")
    try:
        with pytest.raises(SGLangUnavailable, match="unknown mutant"):
            from asyncspec.engine.sglang import case as cs
            pool.run(cs.Case(requests=(cs.Request((5, 6), 1),)))
    finally:
        pool.close()
