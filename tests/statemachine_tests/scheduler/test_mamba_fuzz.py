"""Mamba state groups in differential fuzzing: the workload and its replay file, vLLM's real scheduler
with a ``MambaSpec`` group after full attention in lock step with the spec, the ``mamba`` part of the
default mix, and the four Mamba mutants of ``mutate-vllm``'s corpus.

vLLM must be installed (``.ci/install-vllm``); without it this module fails at collection
(ASYNCSPEC_ALLOW_NO_VLLM=1 skips instead)."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.cli_contract import assert_matches_schema
from tests.vllm_guard import require_pinned_vllm

from asyncspec.statemachine_tests.core.harness import RequestSpec, Workload, run_lockstep, workload_problem
from asyncspec.statemachine_tests.core.replay_file import replay_problem
from asyncspec.statemachine_tests.scheduler.fuzz import fuzz_main
from asyncspec.statemachine_tests.scheduler.fuzz_example import planned_events
from asyncspec.statemachine_tests.scheduler.profiles import ALL_PROFILE, MAMBA_PROFILE, PROFILES, part_names, reference_gaps
from asyncspec.statemachine_tests.scheduler.spec_target import SpecTarget
from asyncspec.statemachine_tests.scheduler.vllm_target import VllmTarget

require_pinned_vllm()

ALIGN = Workload(requests=(RequestSpec(5, 2), RequestSpec(3, 2), RequestSpec(2, 2)), depth=2, block_size=2,
                 num_blocks=6, token_budget=3, max_num_seqs=3, aborts=True, prefix_caching=True,
                 defer_block_free=True, mamba_cache_mode="align")
"""The checker's ``async-d2-mamba`` as a workload: align mode, prefix caching, deferred frees."""
NONE = Workload(requests=(RequestSpec(5, 2), RequestSpec(3, 2)), depth=2, block_size=2, num_blocks=6, token_budget=3,
                max_num_seqs=3, aborts=True, mamba_cache_mode="none")


def _lockstep(w: Workload) -> Any:
    oracle = SpecTarget(w, target="vllm")
    return run_lockstep(w, oracle, VllmTarget(w), planned_events(w, oracle, ()))


def test_the_workload_round_trips_and_bad_mamba_settings_are_one_line_problems() -> None:
    data = json.loads(json.dumps(ALIGN.to_json()))
    assert Workload.from_json(data) == ALIGN and workload_problem(ALIGN) is None
    assert replay_problem({"asyncspec_fuzz_replay": 1, "workload": data, "events": ["schedule"]}) is None
    bad = {**data, "mamba_cache_mode": "all"}
    assert "mamba_cache_mode" in str(replay_problem({"asyncspec_fuzz_replay": 1, "workload": bad, "events": []}))
    for w, why in ((Workload(requests=(RequestSpec(4, 1),), prefix_caching=True, mamba_cache_mode="none"), "'align'"),
                   (Workload(requests=(RequestSpec(4, 1),), num_speculative_tokens=1, mamba_cache_mode="align"),
                    "without drafts"),
                   (Workload(requests=(RequestSpec(250, 10),), num_blocks=80, mamba_cache_mode="none"), "256")):
        assert why in str(workload_problem(w))


def test_align_mode_splits_frees_states_and_hits_in_lock_step_with_vllm() -> None:
    """Each event compares the Mamba group's table (``swa_block_table``: the second group, null as -1),
    its new blocks in the payload and the cached states (group 1) with vLLM's."""
    result = _lockstep(ALIGN)
    assert not result.diverged, result.rows[-1].differences
    assert {"mamba_aligned_split", "mamba_state_freed_in_flight"} <= set(result.coverage)
    tables = [q.swa_block_table for r in result.rows for _, q in r.actual.requests]
    assert any(-1 in t and any(b >= 0 for b in t) for t in tables)  # a freed state beside a live one


def test_none_mode_holds_one_state_block_in_lock_step_with_vllm() -> None:
    result = _lockstep(NONE)
    assert not result.diverged, result.rows[-1].differences
    assert {len(q.swa_block_table) for r in result.rows for _, q in r.actual.requests} == {0, 1}


def test_a_vllm_without_the_aligned_split_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """``_mamba_block_aligned_split`` returning its input (the spec mutant ``mamba_split_skipped`` on vLLM's
    side): r0's first chunk runs the whole budget, 3 tokens, where the spec cuts it to a block (2)."""
    from vllm.v1.core.sched.scheduler import Scheduler

    monkeypatch.setattr(Scheduler, "_mamba_block_aligned_split", lambda self, request, n, *args: n)
    result = _lockstep(ALIGN)
    assert result.diverged and result.rows[-1].event.kind == "schedule"
    assert any(d.field == "scheduled" for d in result.rows[-1].differences)


def test_the_mamba_part_is_last_in_the_default_mix_and_not_on_the_reference() -> None:
    assert part_names(ALL_PROFILE)[18] == "mamba" and PROFILES["mamba"] is MAMBA_PROFILE
    assert reference_gaps(MAMBA_PROFILE)[-1] == "Mamba state groups"
    assert {"mamba_aligned_split", "mamba_state_freed_in_flight"} <= set(ALL_PROFILE.reported_categories())


def test_a_short_mamba_campaign_on_vllm_is_clean_and_reaches_its_categories(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc = fuzz_main("vllm", 600.0, 0, True, False, tmp_path, MAMBA_PROFILE, examples=20)
    data = json.loads(capsys.readouterr().out)
    assert_matches_schema(data, "fuzz")
    assert rc == 0 and data["divergences"] == 0 and data["parts"] == {"mamba": 20}
    assert data["coverage"]["mamba_aligned_split"] > 0 and data["coverage"]["mamba_state_freed_in_flight"] > 0


MAMBA_MUTANT_KILLS = {
    "sched_mamba_split_prompt_only": 363,
    "sched_mamba_no_junction_stop": 365,
    "sched_mamba_split_sub_block": 763,
    "kv_skipped_on_computed_basis": 125,
}
"""The Mamba vLLM mutants (``engine/vllm/mutants_features.py``) and the example of the default campaign
(``fuzz --target vllm --seed 0``, 20 parts) at which each dies: the ``mamba`` part's shards 18 and 38
(examples 361-380, 761-780); the processed-basis one already in the ``hybrid`` part's shard 6 (its
sliding-window group).  The sub-block one died at 1,126 in the 19-part mix (its shard 56)."""


@pytest.mark.slow
@pytest.mark.parametrize("mutant_id", sorted(MAMBA_MUTANT_KILLS))
def test_the_mamba_mutants_are_killed_by_the_default_campaign(mutant_id: str) -> None:
    """``asyncspec mutate-vllm --target vllm --only ID``: about 30 s each, 2 minutes for the sub-block one."""
    from asyncspec.statemachine_tests.mutation.mutate_vllm import run_worker

    at = MAMBA_MUTANT_KILLS[mutant_id]
    r = run_worker(mutant_id, "vllm", examples=at, seed=0, timeout=900)
    assert r.killed and r.how == "divergence" and r.loaded, r
    assert r.died_at_example == at, r
