"""Every seeded spec bug is killed, on the property it targets."""
from __future__ import annotations

import pytest

from asyncspec.checker.spec_mutants import MUTANTS, applied, run_mutant
from asyncspec.spec import request as rq
from asyncspec.spec.properties import ALL_ALWAYS, EVENTUALLY


@pytest.mark.parametrize("mutant", MUTANTS, ids=[m.name for m in MUTANTS])
def test_mutant_is_killed(mutant) -> None:  # type: ignore[no-untyped-def]
    result = run_mutant(mutant)
    assert result.killed, f"{mutant.name} survived; violated {result.violated}"


def test_every_property_has_a_mutant() -> None:
    targeted = {m.property for m in MUTANTS}
    defaults = {n for n, p in ALL_ALWAYS.items() if n != "prefix_cache_frontier_kv_written"}
    assert defaults | {p.name for p in EVENTUALLY} <= targeted


def test_patches_are_undone() -> None:
    original = rq.preempt
    with applied(MUTANTS[2].patches + ((rq, "preempt", lambda f: f),)):
        pass
    assert rq.preempt is original
