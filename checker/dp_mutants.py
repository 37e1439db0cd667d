"""Seeded bugs in the DP wave model (``spec/dp.py``), which ``spec_mutants.MUTANTS`` lists.

Each row is one spec mutant, as ``checker/spec_mutants.py`` holds them: its name, the DP property
the checker must report violated, the DP config it is checked on, what it breaks, its patches.
``explore_dp_mutant`` checks a DP config with the patches installed.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from asyncspec.spec import dp

from asyncspec.checker.dp_model import dp_configs, explore_dp
from asyncspec.checker.result import CheckResult

DP_MUTANT_STATE_CAP = 100_000


def _and_not_or(orig: Callable[..., Any]) -> Callable[..., Any]:
    """sync_dp_state's SUM > 0 read as every rank's: a wave ends while one rank still has work."""
    def mutant(contributions: tuple[bool, ...]) -> bool:
        return all(contributions)
    return mutant


def _any_wave_wakes(orig: Callable[..., Any]) -> Callable[..., Any]:
    """START_DP_WAVE taken without the ``new_wave >= current_wave`` check: a stale message of an
    ended wave wakes an engine alone, into the old wave."""
    def mutant(rank: dp.Rank, wave: int, excluded: int, engine_index: int) -> bool:
        return excluded != engine_index
    return mutant


DP_MUTANT_ROWS: tuple[tuple[str, str, str, str, tuple[tuple[Any, str, Callable[..., Any]], ...]], ...] = (
    ("dp_sync_and_not_or", "dp_stopped_ranks_idle", "dp-2ranks",
     "_has_global_unfinished_reqs ANDs the ranks' answers: a sync ends the wave while a rank has requests",
     ((dp, "global_unfinished", _and_not_or),)),
    ("dp_stale_start_wave_wakes", "dp_wave_completes", "dp-2ranks",
     "_handle_client_request takes a START_DP_WAVE of an ended wave: the woken rank waits in the "
     "all-reduce for ranks that never step",
     ((dp, "accepts_start_wave", _any_wave_wakes),)),
)


def explore_dp_mutant(config: str, name: str) -> CheckResult:
    """DP config ``config`` explored whole (the patches already installed), capped."""
    return explore_dp(dp_configs()[config], stop_on_first=False, max_states=DP_MUTANT_STATE_CAP,
                      required_witnesses=(), mutant=name)


def is_dp_config(name: str) -> bool:
    """Whether ``name`` is a DP config (``configs/dp/``), not a scheduler one."""
    return name in dp_configs()
