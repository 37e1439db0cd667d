"""Prefix caching with a sliding-window group in differential fuzzing: vLLM's ``HybridKVCacheCoordinator``
in lock step with the spec (``spec/swa.py``), and the mutants of ``mutate-vllm``'s corpus the ``hybrid``
part of the default mix kills.

vLLM must be installed (``.ci/install-vllm``); without it this module fails at collection
(ASYNCSPEC_ALLOW_NO_VLLM=1 skips instead)."""
from __future__ import annotations

from typing import Any

import pytest

from tests.vllm_guard import require_pinned_vllm

from asyncspec.spec import swa
from asyncspec.statemachine_tests.core.harness import RequestSpec, Workload, run_lockstep, workload_problem
from asyncspec.statemachine_tests.scheduler.fuzz_example import planned_events
from asyncspec.statemachine_tests.scheduler.profiles import ALL_PROFILE, HYBRID_PROFILE
from asyncspec.statemachine_tests.scheduler.spec_target import SpecTarget
from asyncspec.statemachine_tests.scheduler.vllm_target import VllmTarget

require_pinned_vllm()


def hit_workload(window: int) -> Workload:
    """The checker's ``async-d2-swa-hit`` as a workload (window ``window``): r1 (6 + 4 tokens) is preempted
    by r0's growth and comes back to a hit."""
    return Workload(requests=(RequestSpec(2, 8), RequestSpec(6, 4)), depth=2, block_size=2, num_blocks=10,
                    token_budget=8, aborts=False, prefix_caching=True, sliding_window=window)


def _lockstep(w: Workload) -> Any:
    oracle = SpecTarget(w, target="vllm")
    return run_lockstep(w, oracle, VllmTarget(w), planned_events(w, oracle, ()))


def test_the_hybrid_hit_is_cut_in_lock_step_with_vllm(monkeypatch: pytest.MonkeyPatch) -> None:
    """Windows 3 and 1: full attention's hit cut by the window group's (to 0 for a window of one token);
    block tables, free queue and both groups' cached blocks agree with vLLM at every event."""
    cuts: list[tuple[int, int]] = []
    original = swa.cut_hit

    def counting(cfg: Any, d: Any, req: int, hit: tuple[int, ...]) -> tuple[tuple[int, ...], tuple[int, ...]]:
        kept, window = original(cfg, d, req, hit)
        if hit:
            cuts.append((len(hit), len(kept)))
        return kept, window

    monkeypatch.setattr(swa, "cut_hit", counting)
    for window in (3, 1):
        assert workload_problem(hit_workload(window)) is None
        result = _lockstep(hit_workload(window))
        assert not result.diverged, result.rows[-1].differences
        assert "sliding_window_free" in result.coverage
    assert any(kept < full for full, kept in cuts) and any(kept == 0 < full for full, kept in cuts)


def test_a_vllm_whose_window_run_counts_the_token_itself_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """``_contiguous_blocks_for_hit`` as cdiv(W, B) (the mutant ``swa_hit_run_counts_own_token``): with a
    window of one token vLLM then caches window blocks the spec's group does not."""
    from vllm.utils.math_utils import cdiv
    from vllm.v1.core.single_type_kv_cache_manager import SlidingWindowManager

    monkeypatch.setattr(SlidingWindowManager, "_contiguous_blocks_for_hit",
                        classmethod(lambda cls, window_size, block_size, use_eagle: cdiv(window_size, block_size)))
    result = _lockstep(hit_workload(1))
    assert result.diverged and any(d.field == "cached_blocks" for d in result.rows[-1].differences)


def test_the_hybrid_part_draws_prefix_caching() -> None:
    assert ALL_PROFILE.part(6) == HYBRID_PROFILE and True in HYBRID_PROFILE.prefix_options()
    assert 1 in HYBRID_PROFILE.sliding_windows


SWA_MUTANT_KILLS = {
    "swa_hit_run_counts_own_token": 529,
    "coord_hybrid_hit_not_truncated": 1323,
}
"""The example of the default campaign (``fuzz --target vllm --seed 0``, 20 parts) at which each dies: the
``hybrid`` part's shards 26 (examples 521-540) and 66 (1321-1340)."""


@pytest.mark.slow
@pytest.mark.parametrize("mutant_id", sorted(SWA_MUTANT_KILLS))
def test_the_hybrid_hit_mutants_are_killed_by_the_default_campaign(mutant_id: str) -> None:
    """``asyncspec mutate-vllm --target vllm --only ID``: several minutes each (the campaign up to the kill)."""
    from asyncspec.statemachine_tests.mutation.mutate_vllm import run_worker

    at = SWA_MUTANT_KILLS[mutant_id]
    r = run_worker(mutant_id, "vllm", examples=at, seed=0, timeout=3600)
    assert r.killed and r.how == "divergence" and r.loaded, r
    assert r.died_at_example == at, r
