"""KV-load failure recovery on the scheduler target (issue 28, item 2): the worker reports an
asynchronous load's blocks from block j on invalid (``KVConnectorOutput.invalid_block_ids``);
vLLM's ``Scheduler._handle_invalid_blocks`` rolls the request back to its first invalid block
(policy recompute) or fails it (policy fail), and the spec follows.  Each claim comes with a
seeded bug it catches, on vLLM's side and on the spec's."""
from __future__ import annotations

from typing import Any

import pytest

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
    w = Workload(requests=(RequestSpec(13, 2),), depth=2, block_size=4, num_blocks=8, token_budget=16,
                 kv_connector=name, kv_load_failure_policy=policy, remote_loads=(0,), kv_invalid_blocks=True)
    events = [Event("add_request", 0), Event("schedule"), Event("schedule"),
              Event("deliver", kv=(f"invalid@{first_invalid}", 0)), Event("schedule")]
    result = run_lockstep(w, SpecTarget(w), VllmTarget(w), events[:-1] if policy == "fail" else events)
    assert not result.diverged, result.rows[-1].differences
    return result.rows


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
