"""KV-load failure recovery on the scheduler target (issue 28, item 2): the worker reports an
asynchronous load's blocks from block j on invalid (``KVConnectorOutput.invalid_block_ids``);
vLLM's ``Scheduler._handle_invalid_blocks`` rolls the request back to its first invalid block
(policy recompute) or fails it (policy fail), and the spec follows.  Each claim comes with a
seeded bug it catches, on vLLM's side and on the spec's."""
from __future__ import annotations

from typing import Any

import pytest

from tests.statemachine_tests.scheduler.load_reports import reported_load
from tests.vllm_guard import require_pinned_vllm

from asyncspec.spec import events as ev

from asyncspec.statemachine_tests.core.harness import Event, RequestSpec, Row, Workload, run_lockstep
from asyncspec.statemachine_tests.scheduler.campaign import Campaign, coverage_counts
from asyncspec.statemachine_tests.scheduler.profiles import ALL_PROFILE, KV_RECOVERY_PROFILE, part_names
from asyncspec.statemachine_tests.scheduler.spec_target import SpecTarget
from asyncspec.statemachine_tests.scheduler.vllm_target import VllmTarget

require_pinned_vllm()


def _invalid_load(policy: str, name: str, first_invalid: int) -> list[Row]:
    """A 13-token prompt loaded asynchronously in blocks of 4; its blocks from ``first_invalid`` on fail."""
    return reported_load(policy, name, 13, f"invalid@{first_invalid}", invalid_blocks=True)


@pytest.mark.parametrize("policy,name", [("recompute", "toy"), ("fail", "toy"), ("recompute", "nixl"),
                                         ("fail", "nixl")])
def test_invalid_blocks_roll_back_to_the_first_invalid_block(policy: str, name: str) -> None:
    """Blocks 2 on (positions 8..) invalid: C = 8 under either policy; ``recompute`` keeps the two
    valid blocks and schedules the rest of the prompt, ``fail`` finishes the request with an error."""
    rows = _invalid_load(policy, name, 2)
    after = dict(rows[3].actual.requests)[0]
    assert after.num_computed_tokens == 8
    if policy == "fail":
        assert after.status == "ERROR" and after.block_table == ()
    else:
        assert after.status == "WAITING_FOR_REMOTE_KVS" and len(after.block_table) >= 2
        assert rows[-1].actual.scheduled == ((0, 13 - 8, 1),)


def test_recovery_part_conforms_and_reaches_its_categories() -> None:
    """40 examples of ``kv-recovery`` (a part of the default mix): no divergence, invalid-block
    reports and partial recomputes reached."""
    assert "kv-recovery" in part_names(ALL_PROFILE)
    c = Campaign("vllm", seconds=3600, seed=0, profile=KV_RECOVERY_PROFILE, max_batches=2)
    c.run()
    assert c.found is None, f"divergence: {c.found.rows[-1].differences if c.found else ''}"
    counts = coverage_counts(c.stats.coverage, KV_RECOVERY_PROFILE)
    assert counts["kv_invalid_blocks"] > 0 and counts["kv_partial_recompute"] > 0, counts


def test_vllm_skipping_async_loads_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """A vLLM whose invalid-block scan leaves the asynchronous loads alone (only running requests)
    promotes a partly failed load as loaded: the spec rolls it back, so they diverge."""
    from vllm.v1.core.sched.scheduler import Scheduler

    original = Scheduler._update_requests_with_invalid_blocks

    def running_only(self: Any, requests: Any, invalid: set[int], scheduled: dict[str, int],
                     evict_blocks: bool = True) -> Any:
        return original(self, requests if evict_blocks else (), invalid, scheduled, evict_blocks)

    monkeypatch.setattr(Scheduler, "_update_requests_with_invalid_blocks", running_only)
    w = Workload(requests=(RequestSpec(13, 2),), depth=2, block_size=4, num_blocks=8, token_budget=16,
                 kv_connector="toy", remote_loads=(0,), kv_invalid_blocks=True)
    events = [Event("add_request", 0), Event("schedule"), Event("schedule"), Event("deliver", kv=("invalid@1", 0))]
    result = run_lockstep(w, SpecTarget(w), VllmTarget(w), events)
    assert result.diverged and any(d.field.endswith(".num_computed_tokens") for d in result.rows[-1].differences)


def test_spec_without_invalid_block_recovery_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """A spec that ignores invalid blocks (the load counts as done) diverges from vLLM."""
    from asyncspec.spec import connector

    monkeypatch.setattr(connector, "invalid_blocks", lambda cfg, d, report: None)
    c = Campaign("vllm", seconds=3600, seed=0, profile=KV_RECOVERY_PROFILE, max_batches=2)
    c.run()
    assert c.found is not None
    assert ev.KV_INVALID_BLOCKS not in c.stats.coverage


def test_v7_sync_load_with_invalid_blocks_strands_the_request_under_async(monkeypatch: pytest.MonkeyPatch) -> None:
    """docs/findings_vllm.md, V7 (outside the spec's model: no synchronous load there). A 9-token
    prompt loaded synchronously (8 external tokens, blocks of 4) under async scheduling, its decode
    step in flight when the load's output reports block 1 invalid: vLLM 0.33.0 rolls C back to 4
    but keeps both output placeholders, delivers the in-flight decode's token (sampled over the
    invalid block), and after the recompute is left with a placeholder and nothing in flight:
    ``schedule()`` schedules nothing and the request never finishes.  Pins the behaviour; fails
    once vLLM rolls the placeholders back (vllm#45146 / #49252)."""
    from vllm.v1.outputs import KVConnectorOutput

    from asyncspec.engine.vllm import toy_connector
    from asyncspec.engine.vllm.scheduler_driver import VllmDriver
    from asyncspec.engine.vllm.vllm_config import DriverConfig

    def sync_matched(self: Any, request: Any, num_computed_tokens: int) -> tuple[int, bool]:
        external = int(request.num_prompt_tokens) - 1 - num_computed_tokens
        return (external, False) if request.request_id not in self.started_loads and external > 0 else (0, False)

    def sync_alloc(self: Any, request: Any, blocks: Any, num_external_tokens: int) -> None:
        if num_external_tokens > 0:
            self.started_loads.add(request.request_id)  # loaded in the step: no finished_recving

    monkeypatch.setattr(toy_connector.AsyncSpecToyConnector, "get_num_new_matched_tokens", sync_matched)
    monkeypatch.setattr(toy_connector.AsyncSpecToyConnector, "update_state_after_alloc", sync_alloc)
    d = VllmDriver(DriverConfig(block_size=4, num_blocks=8, max_num_seqs=4, max_num_batched_tokens=16,
                                async_scheduling=True, kv_connector=True, kv_connector_name="toy",
                                max_model_len=4096, kv_load_failure_policy="recompute"))
    d.add_request("r0", prompt_len=9, max_tokens=4, structured_output=False, kv_transfer_params={"load": True},
                  priority=0)
    r = d.scheduler.requests["r0"]

    def counters() -> tuple[int, int, int, int]:
        return (int(r.num_computed_tokens), int(r.num_output_placeholders), int(r.num_in_flight_tokens),
                int(r.num_output_tokens))

    load_step, decode_step = d.schedule(), d.schedule()  # the load's last prompt token; the decode behind it
    assert counters() == (10, 2, 2, 0)
    (block_ids,) = d.scheduler.kv_cache_manager.get_block_ids("r0")
    d.deliver(load_step, {"r0": [101]}, KVConnectorOutput(invalid_block_ids={block_ids[1]}))
    assert counters() == (4, 2, 1, 0)  # C at block 1, but the skipped step's placeholder is kept
    d.deliver(decode_step, {"r0": [102]}, None)
    assert counters() == (4, 1, 0, 1) and list(r.output_token_ids) == [102]  # sampled over the invalid block
    for token in (200, 201):
        step = d.schedule()  # the recompute of positions 4..10, then one decode
        d.deliver(step, {"r0": [token]}, None)
    assert counters() == (12, 1, 0, 3) and not r.is_finished()  # a placeholder with nothing in flight
    assert d.schedule().num_scheduled_tokens == {}  # stranded: max_tokens 4 never reached
