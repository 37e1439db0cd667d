"""KV-load failure recovery, the invalid-block path (spec/connector.py ``invalid_blocks``):
an ``invalid@j`` report rolls an async load back to its first invalid block."""
from __future__ import annotations

import dataclasses

import pytest

from asyncspec.checker import configs as cfgs
from asyncspec.checker.compiled import NOT_BUILT, not_covered
from asyncspec.spec import engine as eng
from asyncspec.spec import request as rq
from asyncspec.spec.config import ConfigError, SpecConfig
from asyncspec.spec.state import KV_DONE, KV_FAILED_RECVD

from tests.spec_steps import run_actions

CFG = cfgs.named_configs()["kv-invalid-blocks"]


_run = run_actions


def test_invalid_report_rolls_back_to_the_first_invalid_block() -> None:
    s = _run(CFG, ["schedule", "schedule"])  # r0 starts its load (C = 6), r1 prefills
    assert s.counters[0].status == rq.WAITING_FOR_REMOTE_KVS and s.counters[0].num_computed_tokens == 6
    offered = {str(a) for a in eng.enabled_actions(CFG, s) if a.kv is not None}
    assert {f"update_from_output invalid@{j}=r0" for j in range(3)} <= offered
    assert "update_from_output invalid@3=r0" not in offered  # 6 loaded tokens are 3 blocks of 2
    s, events = eng.apply(CFG, s, eng.parse_action("update_from_output invalid@2=r0"))
    assert s.counters[0].num_computed_tokens == 4 and s.kv_transfer[0] == KV_FAILED_RECVD
    assert "kv_invalid_blocks" in events
    held = s.block_tables[0]
    s, events = eng.apply(CFG, s, eng.parse_action("schedule"))  # promoted: the valid prefix stays
    assert "kv_partial_recompute" in events and s.block_tables[0][:2] == held[:2]
    assert s.kv_transfer[0] == KV_DONE and s.counters[0].num_computed_tokens == 7  # 4 + the 3 recomputed


def test_invalid_from_block_zero_is_a_failed_load() -> None:
    s = _run(CFG, ["schedule", "schedule"])
    via_invalid, _ = eng.apply(CFG, s, eng.parse_action("update_from_output invalid@0=r0"))
    via_fail, _ = eng.apply(CFG, s, eng.parse_action("update_from_output fail=r0"))
    assert via_invalid == via_fail


def test_policy_fail_finishes_the_request_with_an_error() -> None:
    cfg = dataclasses.replace(CFG, kv_load_failure_policy="fail")
    s = _run(cfg, ["schedule", "schedule", "update_from_output invalid@1=r0"])
    assert s.counters[0].status == rq.FINISHED_ERROR and s.block_tables[0] == ()
    assert s.counters[0].num_computed_tokens == 2  # vLLM truncates at block 1 under either policy


def test_an_aborted_load_gets_no_invalid_report() -> None:
    s = _run(CFG, ["schedule", "schedule", "abort r0"])
    assert not any(a.kv is not None and a.kv[0].startswith("invalid") for a in eng.enabled_actions(CFG, s))


def test_the_knob_needs_a_connector_and_the_compiled_explorer_covers_it() -> None:
    with pytest.raises(ConfigError, match="'kv_invalid_blocks' needs kv_connector"):
        SpecConfig(name="x", requests=((4, 2),), kv_invalid_blocks=True)
    assert not_covered(CFG) in (None, NOT_BUILT)  # csrc/connector.c encodes invalid-block reports


@pytest.mark.parametrize("text", ["update_from_output invalid@x=r0", "update_from_output invalid=r0"])
def test_a_malformed_invalid_report_is_refused_in_one_line(text: str) -> None:
    with pytest.raises(ValueError) as err:
        eng.parse_action(text)
    assert "\n" not in str(err.value)
