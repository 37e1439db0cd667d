"""Slow tier: every one-line SGLang mutant (engine/sglang/mutants.py) is killed by a fixed-work
``--target sglang`` campaign (the kill table of docs/fuzzing.md, "SGLang mutants")."""
from __future__ import annotations

import pytest

from asyncspec.engine.sglang.client import SGLangPool, SGLangUnavailable, sglang_python
from asyncspec.engine.sglang.mutants import MUTANTS
from asyncspec.statemachine_tests.sglang_fuzz import Campaign


def _venv_missing() -> str | None:
    try:
        sglang_python()
    except SGLangUnavailable as exc:
        return str(exc)
    return None


@pytest.mark.slow
@pytest.mark.skipif(_venv_missing() is not None, reason=f"SGLang venv absent: {_venv_missing()}")
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
@pytest.mark.skipif(_venv_missing() is not None, reason=f"SGLang venv absent: {_venv_missing()}")
def test_an_unknown_or_moved_mutant_is_refused_in_one_line() -> None:
    pool = SGLangPool("no_such_mutant")
    try:
        with pytest.raises(SGLangUnavailable, match="unknown mutant"):
            from asyncspec.engine.sglang import case as cs
            pool.run(cs.Case(requests=(cs.Request((5, 6), 1),)))
    finally:
        pool.close()
