"""Pipeline parallelism 2 without async scheduling: vLLM's plain ``Scheduler`` under a batch queue of two
(``EngineCore.step_with_batch_queue``), in lock step with the spec's ``sync_scheduler``.

vLLM must be installed (``.ci/install-vllm``); without it this module fails at collection
(ASYNCSPEC_ALLOW_NO_VLLM=1 skips instead)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.cli_contract import assert_matches_schema
from tests.vllm_guard import require_pinned_vllm

from asyncspec.spec.config import ConfigError, SpecConfig
from asyncspec.statemachine_tests.core.harness import RequestSpec, Workload, run_lockstep, workload_problem
from asyncspec.statemachine_tests.scheduler.fuzz import fuzz_main
from asyncspec.statemachine_tests.scheduler.fuzz_example import planned_events
from asyncspec.statemachine_tests.scheduler.profiles import SYNC_PP_PROFILE
from asyncspec.statemachine_tests.scheduler.spec_target import SpecTarget
from asyncspec.statemachine_tests.scheduler.vllm_target import VllmTarget, driver_config

require_pinned_vllm()

PP2 = Workload(requests=(RequestSpec(3, 3), RequestSpec(2, 3), RequestSpec(2, 1)), depth=2, block_size=2,
               num_blocks=3, token_budget=4, aborts=False, sync_scheduler=True)
"""The checker's ``sync-d2-pp`` as a workload."""


def test_the_plain_scheduler_under_a_queue_of_two_has_no_placeholders_in_lock_step_with_vllm() -> None:
    assert not driver_config(PP2).async_scheduling
    oracle = SpecTarget(PP2, target="vllm")
    result = run_lockstep(PP2, oracle, VllmTarget(PP2), planned_events(PP2, oracle, ()))
    assert not result.diverged, result.rows[-1].differences
    assert all(q.num_output_placeholders == 0 for r in result.rows for _, q in r.actual.requests)
    assert max(len(r.actual.scheduled) for r in result.rows) >= 1


def test_sync_scheduler_settings_outside_the_model_are_one_line_problems() -> None:
    assert "depth 2" in str(workload_problem(Workload(requests=(RequestSpec(3, 2),), depth=1, sync_scheduler=True)))
    assert "without drafts" in str(workload_problem(Workload(requests=(RequestSpec(3, 2),), num_speculative_tokens=1,
                                                             sync_scheduler=True)))
    with pytest.raises(ConfigError, match="no drafts"):
        SpecConfig(name="x", requests=((3, 2),), sync_scheduler=True, num_speculative_tokens=1)


def test_a_short_sync_pp_campaign_on_vllm_is_clean(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc = fuzz_main("vllm", 600.0, 0, True, False, tmp_path, SYNC_PP_PROFILE, examples=20)
    data = json.loads(capsys.readouterr().out)
    assert_matches_schema(data, "fuzz")
    assert rc == 0 and data["divergences"] == 0 and data["examples"] == 20
    assert data["coverage"]["chunked_prefill"] > 0
