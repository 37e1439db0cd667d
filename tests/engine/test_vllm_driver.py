"""Fast tests of the vLLM 0.33.0 scheduler driver (asyncspec.engine.vllm).

They drive the REAL vLLM scheduler, so vLLM must be installed (.ci/install-vllm).
Without it this module fails at collection with the installer hint; set
ASYNCSPEC_ALLOW_NO_VLLM=1 to skip instead.  Scenarios follow
shared/notes/vllm-scheduler-semantics.md (sections 3.2, 3.4, 3.5, 3.7).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

import pytest

from tests.vllm_guard import require_pinned_vllm

from asyncspec.engine.vllm import vllm_environment
from asyncspec.engine.vllm.vllm_config import DriverConfig, default_prompt
from asyncspec.engine.vllm.vllm_environment import VLLM_VERSION, VllmUnavailable, check_vllm_version
from asyncspec.engine.vllm.records import DeliveryResult, ScheduledStep
from asyncspec.engine.vllm.scheduler_driver import VllmDriver

require_pinned_vllm()

EOS = 2


def sampled_for(step: ScheduledStep, token: Callable[[str, int], int]) -> dict[str, list[int]]:
    """One token per non-chunk request of ``step``, chosen by ``token(req_id, index)``."""
    return {
        rid: [token(rid, step.index)]
        for rid, chunk in step.is_prefill_chunk.items()
        if not chunk
    }


def run_engine(
    drv: VllmDriver,
    depth: int,
    token: Callable[[str, int], int],
    max_steps: int = 100,
) -> tuple[list[ScheduledStep], list[DeliveryResult]]:
    """EngineCore.step_with_batch_queue in miniature: up to ``depth`` steps in flight,
    outputs processed oldest first."""
    queue: deque[ScheduledStep] = deque()
    steps: list[ScheduledStep] = []
    results: list[DeliveryResult] = []
    for _ in range(max_steps):
        if drv.has_requests() and len(queue) < depth:
            step = drv.schedule()
            steps.append(step)
            queue.append(step)
            if len(queue) < depth and (not step.is_empty or drv.has_requests()):
                continue
        if not queue:
            return steps, results
        oldest = queue.popleft()
        results.append(drv.deliver(oldest, sampled_for(oldest, token)))
    raise AssertionError("engine did not drain")


# ---------------------------------------------------------------- version check


def test_version_message_names_range_and_found(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(vllm_environment, "_installed_vllm_version", lambda: "0.29.0")
    with pytest.raises(VllmUnavailable) as info:
        check_vllm_version(allow_other=False)
    msg = str(info.value)
    assert VLLM_VERSION in msg and "0.29.0" in msg and "0.30.0" in msg and "\n" not in msg
    assert check_vllm_version(allow_other=True) == "0.29.0"
    monkeypatch.setattr(vllm_environment, "_installed_vllm_version", lambda: "0.32.0")
    assert check_vllm_version(allow_other=False) == "0.32.0"  # in the supported range: no --allow-version

    monkeypatch.setattr(vllm_environment, "_installed_vllm_version", lambda: None)
    with pytest.raises(VllmUnavailable, match="not installed"):
        check_vllm_version(allow_other=True)


def test_installed_version_is_pinned() -> None:
    assert check_vllm_version(allow_other=False) == VLLM_VERSION


# ---------------------------------------------------------------- construction


def test_driver_builds_the_requested_scheduler() -> None:
    from vllm.v1.core.sched.async_scheduler import AsyncScheduler

    cfg = DriverConfig(num_blocks=10, defer_block_free=True)
    drv = VllmDriver(cfg)
    sched = drv.scheduler
    assert isinstance(sched, AsyncScheduler)
    assert sched.vllm_config.max_concurrent_batches == 2
    assert sched.defer_block_free is True
    assert drv.snapshot().num_free_blocks == 10  # block 0 is the null block

    sync = VllmDriver(DriverConfig(async_scheduling=False))
    assert not isinstance(sync.scheduler, AsyncScheduler)
    assert sync.scheduler.vllm_config.max_concurrent_batches == 1


def test_default_prompts_are_deterministic_and_eos_free() -> None:
    a = default_prompt("a", 64)
    assert a == default_prompt("a", 64)
    assert a[:16] != default_prompt("b", 64)[:16]
    assert EOS not in a


def test_deliver_enforces_fifo_order() -> None:
    drv = VllmDriver()
    drv.add_request("r", prompt_len=10, max_tokens=5)
    s1, s2 = drv.schedule(), drv.schedule()
    with pytest.raises(ValueError, match="out of order"):
        drv.deliver(s2, {"r": [5]})
    with pytest.raises(ValueError, match="no sampled tokens"):
        drv.deliver(s1, {})
    drv.deliver(s1, {"r": [5]})
    assert drv.num_pending_steps == 1


# ---------------------------------------------------------------- semantics


def test_worked_example_stop_by_max_tokens_depth_2() -> None:
    """Note section 3.2: P=10, M=3, depth 2, no spec decode."""
    drv = VllmDriver(DriverConfig(async_scheduling=True))
    drv.add_request("r", prompt_len=10, max_tokens=3)

    def counters() -> tuple[int, int, int, int]:
        r = drv.snapshot().requests["r"]
        return (r.num_computed_tokens, r.num_output_placeholders,
                r.num_in_flight_tokens, r.num_output_tokens)

    s1 = drv.schedule()
    assert s1.num_scheduled_tokens == {"r": 10} and s1.is_prefill_chunk == {"r": False}
    assert counters() == (10, 1, 10, 0)
    s2 = drv.schedule()
    assert s2.num_scheduled_tokens == {"r": 1}
    assert counters() == (11, 2, 11, 0)
    out1 = drv.deliver(s1, {"r": [101]})
    assert out1.new_token_ids == {"r": (101,)} and out1.finish_reasons == {}
    assert counters() == (11, 1, 1, 1)
    s3 = drv.schedule()
    assert s3.num_scheduled_tokens == {"r": 1}
    assert counters() == (12, 2, 2, 1)
    drv.deliver(s2, {"r": [102]})
    assert counters() == (12, 1, 1, 2)
    s4 = drv.schedule()  # max_tokens guard: C + 2 - H = 13 >= P + M
    assert s4.is_empty and s4.num_scheduled_tokens == {}
    assert counters() == (12, 1, 1, 2)
    out3 = drv.deliver(s3, {"r": [103]})
    assert out3.new_token_ids == {"r": (103,)}
    assert out3.finish_reasons == {"r": "length"}
    assert "r" not in drv.snapshot().requests
    drv.deliver(s4, {})
    total = sum(s.total_num_scheduled_tokens for s in (s1, s2, s3, s4))
    assert total == 12  # P + M - 1
    assert drv.snapshot().num_free_blocks == DriverConfig().num_blocks


def test_worked_example_via_engine_loop_placeholders() -> None:
    drv = VllmDriver()
    drv.add_request("r", prompt_len=10, max_tokens=3)
    placeholders: list[int] = []
    queue: deque[ScheduledStep] = deque()
    for _ in range(4):
        queue.append(drv.schedule())
        placeholders.append(drv.snapshot().requests["r"].num_output_placeholders)
        if len(queue) == 2:
            step = queue.popleft()
            drv.deliver(step, sampled_for(step, lambda rid, i: 100 + i))
            snap = drv.snapshot().requests.get("r")
            placeholders.append(snap.num_output_placeholders if snap else 0)
    assert placeholders == [1, 2, 1, 2, 1, 1, 0]
    drv.deliver(queue.popleft(), {})  # the empty step 4
    assert drv.num_pending_steps == 0
    assert drv.has_requests()  # the finished id is still to be reported
    assert drv.schedule().finished_req_ids == ("r",)


def test_eos_as_second_token_wastes_one_step() -> None:
    drv = VllmDriver()
    drv.add_request("r", prompt_len=10, max_tokens=10)
    steps, results = run_engine(drv, 2, lambda rid, i: EOS if i == 1 else 50 + i)
    scheduled = [s.num_scheduled_tokens.get("r", 0) for s in steps]
    assert scheduled[:3] == [10, 1, 1]  # step 2 was scheduled before EOS was seen
    assert all(n == 0 for n in scheduled[3:])
    assert results[0].new_token_ids == {"r": (50,)}
    assert results[1].new_token_ids == {"r": (EOS,)}
    assert results[1].finish_reasons == {"r": "stop"}
    assert results[2].new_token_ids == {}  # output of the wasted step is ignored
    emitted = [t for res in results for t in res.new_token_ids.get("r", ())]
    assert emitted == [50, EOS]
    assert sum(s.total_num_scheduled_tokens for s in steps) == 12


def test_eos_as_second_token_synchronous_wastes_nothing() -> None:
    drv = VllmDriver(DriverConfig(async_scheduling=False))
    drv.add_request("r", prompt_len=10, max_tokens=10)
    steps, results = run_engine(drv, 1, lambda rid, i: EOS if i == 1 else 50 + i)
    assert sum(s.total_num_scheduled_tokens for s in steps) == 11
    assert results[1].finish_reasons == {"r": "stop"}


def test_preemption_with_output_in_flight_delivers_stale_output() -> None:
    """Two 15-token prompts fill a 2-block pool; the 17th token of "a" needs a
    block, so "b" (last admitted) is preempted while its step 2 is in flight."""
    drv = VllmDriver(DriverConfig(num_blocks=2))
    drv.add_request("a", prompt_len=15, max_tokens=10)
    drv.add_request("b", prompt_len=15, max_tokens=10)
    s1, s2 = drv.schedule(), drv.schedule()
    assert s2.num_scheduled_tokens == {"a": 1, "b": 1}
    assert drv.snapshot().num_free_blocks == 0
    drv.deliver(s1, {"a": [300], "b": [400]})

    s3 = drv.schedule()
    assert s3.preempted_req_ids == ("b",)
    assert s3.num_scheduled_tokens == {"a": 1}
    snap = drv.snapshot()
    b = snap.requests["b"]
    assert (b.status, b.num_computed_tokens, b.num_output_placeholders) == ("PREEMPTED", 0, 0)
    assert (b.num_in_flight_tokens, b.num_stale_output_tokens) == (1, 1)
    assert b.drop_stale_output is False  # deliver mode: no connector needs KV delivery
    assert (b.num_preemptions, b.block_ids, b.num_output_tokens) == (1, (), 1)
    assert snap.running == ("a",) and snap.waiting == ("b",)
    assert len(snap.requests["a"].block_ids) == 2

    out2 = drv.deliver(s2, {"a": [301], "b": [401]})
    assert out2.new_token_ids == {"a": (301,), "b": (401,)}  # stale but delivered
    b = drv.snapshot().requests["b"]
    assert (b.num_stale_output_tokens, b.num_in_flight_tokens) == (0, 0)
    assert (b.num_computed_tokens, b.num_output_placeholders) == (0, 0)  # untouched
    assert b.num_output_tokens == 2 and b.output_token_ids == (400, 401)
    assert b.status == "PREEMPTED"


def test_defer_block_free_parks_blocks_until_fence_processed() -> None:
    drv = VllmDriver(DriverConfig(defer_block_free=True, num_blocks=8))
    drv.add_request("r", prompt_len=10, max_tokens=10)
    s1, s2 = drv.schedule(), drv.schedule()
    drv.deliver(s1, {"r": [60]})
    s3 = drv.schedule()
    snap = drv.snapshot()
    held = snap.requests["r"].block_ids
    assert (snap.sched_step_seq, snap.processed_step_seq) == (3, 1)
    assert snap.requests["r"].last_sched_seq == 3

    out2 = drv.deliver(s2, {"r": [EOS]})  # r finishes while s3 still writes its KV
    assert out2.finish_reasons == {"r": "stop"}
    snap = drv.snapshot()
    assert "r" not in snap.requests
    assert snap.processed_step_seq == 2
    assert snap.deferred_frees == ((3, held),)
    assert snap.num_free_blocks == 8 - len(held)

    s4 = drv.schedule()  # nothing left to run: an empty step, Q unchanged
    assert s4.is_empty and s4.finished_req_ids == ("r",)
    assert drv.snapshot().sched_step_seq == 3
    drv.deliver(s3, {"r": [61]})  # R reaches the fence: blocks return
    snap = drv.snapshot()
    assert snap.processed_step_seq == 3
    assert snap.deferred_frees == ()
    assert snap.num_free_blocks == 8
    drv.deliver(s4, {})
    assert drv.snapshot().processed_step_seq == 3  # empty steps do not move R
    assert not drv.has_requests()


def test_abort_with_output_in_flight() -> None:
    drv = VllmDriver()
    drv.add_request("r", prompt_len=10, max_tokens=10)
    s1, s2 = drv.schedule(), drv.schedule()
    drv.abort(["r", "unknown"])
    snap = drv.snapshot()
    assert "r" not in snap.requests and snap.num_free_blocks == DriverConfig().num_blocks
    out = drv.deliver(s1, {"r": [5]})
    assert out.new_token_ids == {} and out.finish_reasons == {}
    assert drv.schedule().finished_req_ids == ("r",)


def test_snapshot_is_deterministic_and_sorted() -> None:
    def build() -> VllmDriver:
        drv = VllmDriver(DriverConfig(max_num_batched_tokens=32))
        for rid in ("c", "a", "b"):
            drv.add_request(rid, prompt_len=20, max_tokens=4)
        return drv

    d1, d2 = build(), build()
    for drv in (d1, d2):
        step = drv.schedule()
        assert step.num_scheduled_tokens == {"a": 12, "c": 20}  # admission order: c, a
        assert step.is_prefill_chunk == {"a": True, "c": False}
    s1, s2 = d1.snapshot(), d2.snapshot()
    assert s1 == s2
    assert list(s1.requests) == ["a", "b", "c"]
    assert s1.running == ("c", "a") and s1.waiting == ("b",)


def test_only_the_drawn_load_failure_line_of_the_scheduler_logger_is_dropped(caplog: pytest.LogCaptureFixture) -> None:
    """``vllm_environment.DrawnLoadFailures``: the error line a ``fail`` report makes is left out of a
    campaign's stderr; any other line of vLLM's scheduler still shows."""
    import logging

    from asyncspec.engine.vllm.vllm_environment import DrawnLoadFailures, load_vllm

    load_vllm()
    logger = logging.getLogger("vllm.v1.core.sched.scheduler")
    assert any(isinstance(f, DrawnLoadFailures) for f in logger.filters)
    with caplog.at_level(logging.ERROR, logger="vllm.v1.core.sched.scheduler"):
        logger.error("Failing %d request(s) due to KV load failure (failure_policy=fail, %d tokens affected). "
                     "Request IDs: %s", 1, 6, {"r0"})
        logger.error("some other scheduler error %d", 7)
    assert [r.getMessage() for r in caplog.records] == ["some other scheduler error 7"]
