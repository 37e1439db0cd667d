"""KV-load failure recovery on the ``vllm-engine`` target (issue 28, item 2, where it reaches the worker).

The toy connector (``engine/vllm/toy_connector.py``) runs both halves: its scheduler half in vLLM's
scheduler, its worker half in vLLM's runner (``KVConnectorModelRunnerMixin``), reporting each load one
step after it started and writing what the load brought into the oracle model's KV store, but the
blocks it reports invalid.  Default tier: a case's loads round-trip through JSON and are checked; a
hand-written case at depth 2 whose load reports its blocks from block 1 on invalid is followed by the
spec (the report taken from the step's ``kv_connector_output``), the valid prefix kept and the rest
recomputed with the oracle model's tokens; a failed load under policy ``fail`` ends its request.
Slow: the ``kv-recovery`` profile's 100 cases are clean, and the invalid-block mutant
``conn_invalid_keeps_first_block`` dies in the kv-recovery stage of ``mutate-vllm --target vllm-engine``.
"""
from __future__ import annotations

import json
from dataclasses import replace

import pytest

from asyncspec.engine.vllm.engine_config import EngineDriverConfig
from asyncspec.statemachine_tests.vllm_engine import engine_case as ec
from asyncspec.statemachine_tests.vllm_engine.engine_campaign import run_fixed
from asyncspec.statemachine_tests.vllm_engine.engine_profile import KV_RECOVERY_ENGINE_PROFILE
from asyncspec.statemachine_tests.scheduler.profile_type import KV_RECOVERY_COVERAGE
from tests.statemachine_tests.vllm_engine.drive_case import drive, engine_kill

STEP = ec.EngineEvent(ec.STEP)
CONFIG = EngineDriverConfig(depth=2, block_size=4, num_blocks=8, max_num_seqs=3, max_num_batched_tokens=8,
                            enable_chunked_prefill=True, enable_prefix_caching=False, max_model_len=24,
                            kv_connector=True)
PROMPT = (900, 901, 902, 903, 904, 905, 906, 907, 908, 909)  # P = 10: the load claims 9 tokens, 3 blocks


def _case(report: str, config: EngineDriverConfig = CONFIG) -> ec.EngineCase:
    return ec.EngineCase(config, (ec.EngineRequest(PROMPT, 3), ec.EngineRequest((910, 911, 912), 4)),
                         defer_block_free=True, stale_mode="drop", remote_loads=(0,), load_reports=(report,))


def test_loads_round_trip_and_are_checked() -> None:
    case = _case("invalid@1")
    assert ec.EngineCase.from_json(json.loads(json.dumps(case.to_json()))) == case
    assert ec.case_problem(case) is None
    w = case.workload()
    assert w.kv_connector == "toy" and w.remote_loads == (0,) and w.kv_invalid_blocks
    assert case.kv_transfer_params(0) == {"load": True, "report": "invalid@1"} and case.kv_transfer_params(1) is None
    assert "past its 3 loaded blocks" in (ec.case_problem(_case("invalid@3")) or "")
    assert "engine.kv_connector" in (ec.case_problem(_case("recv", replace(CONFIG, kv_connector=False))) or "")
    assert "prefix caching" in (ec.case_problem(_case("recv", replace(CONFIG, enable_prefix_caching=True))) or "")


def test_an_invalid_block_rolls_the_load_back_to_its_valid_prefix() -> None:
    pytest.importorskip("vllm")
    events = [ec.EngineEvent(ec.ADD_REQUEST, 0), ec.EngineEvent(ec.ADD_REQUEST, 1), STEP, STEP, STEP]
    run, coverage = drive(_case("invalid@1"), events)
    assert not run.diverged, run.result.rows[-1].differences
    assert all(coverage.get(name, 0) > 0 for name in KV_RECOVERY_COVERAGE), coverage
    reports = [row.event.kv for row in run.result.rows if row.event.kv is not None]
    assert reports == [("invalid@1", 0)]  # the worker's report, as the spec took it
    fed = [row for rows in run.result.fed.values() for row in rows if row.startswith("r0")]
    assert fed[0].startswith("r0@4:")  # block 0 kept (4 tokens), the rest of the prompt recomputed


def test_a_failed_load_ends_its_request_under_policy_fail() -> None:
    pytest.importorskip("vllm")
    case = _case("fail", replace(CONFIG, kv_load_failure_policy="fail"))
    run, coverage = drive(case, [ec.EngineEvent(ec.ADD_REQUEST, 0), STEP, STEP, STEP])
    assert not run.diverged, run.result.rows[-1].differences
    assert coverage.get("kv_load_failed", 0) == 1
    assert any((0, "error") in row.actual.finished for row in run.result.rows)


@pytest.mark.slow
def test_the_kv_recovery_profile_is_clean() -> None:
    pytest.importorskip("vllm")
    summary = run_fixed(100, 1, KV_RECOVERY_ENGINE_PROFILE.depths, KV_RECOVERY_ENGINE_PROFILE)
    assert summary["divergences"] == 0, summary["first_divergence"]
    assert all(summary["coverage"][name] > 0 for name in KV_RECOVERY_COVERAGE)


@pytest.mark.slow
def test_an_invalid_block_mutant_dies_on_the_engine() -> None:
    pytest.importorskip("vllm")
    result = engine_kill("conn_invalid_keeps_first_block")
    assert result["killed"] and "(kv-recovery profile)" in result["detail"], result
