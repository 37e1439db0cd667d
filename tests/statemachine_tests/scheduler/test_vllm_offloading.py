"""vLLM's OffloadingConnector on the scheduler target (issue 28, item 4): the real scheduler half
(``OffloadingConnectorScheduler``), the worker played by the harness (``offload_worker.py``), the
spec (``spec/offload.py``) compared each event, store jobs and their flushes included."""
from __future__ import annotations

import pytest

from tests.vllm_guard import require_pinned_vllm

from asyncspec.statemachine_tests.core.harness import Event, RequestSpec, Workload, run_lockstep
from asyncspec.statemachine_tests.scheduler.campaign import Campaign, coverage_counts
from asyncspec.statemachine_tests.scheduler.profiles import ALL_PROFILE, OFFLOAD_PROFILE, part_names
from asyncspec.statemachine_tests.scheduler.spec_target import SpecTarget
from asyncspec.statemachine_tests.scheduler.vllm_target import VllmTarget

require_pinned_vllm()

W = Workload(requests=(RequestSpec(9, 2), RequestSpec(12, 2)), depth=2, block_size=4, num_blocks=4, token_budget=16,
             defer_block_free=True, aborts=True, kv_connector="offloading", loop="free")
REUSE = [Event("add_request", 0), Event("schedule"), Event("deliver"), Event("abort", 0), Event("add_request", 1),
         Event("schedule")]
"""r0's step is processed, r0 is aborted with its store unreported (its blocks freed at once), r1's
12-token prompt takes every freed block."""


def test_a_store_job_reads_the_prompt_blocks_its_step_computes() -> None:
    """r0's 9-token prompt in one step: one store job of its two full blocks (9 // 4), on both sides."""
    events = [Event("add_request", 0), Event("schedule")]
    result = run_lockstep(W, SpecTarget(W), VllmTarget(W), events)
    assert not result.diverged
    assert result.rows[-1].actual.store_jobs == ((0, (0, 1), False),)


def test_an_abort_then_a_reuse_flushes_the_pending_store() -> None:
    """r0 is aborted with its store unreported; the step that gives its blocks to r1 flushes the store
    (``jobs_to_flush``), on vLLM's side as on the spec's."""
    result = run_lockstep(W, SpecTarget(W), VllmTarget(W), REUSE)
    assert not result.diverged, result.rows[-1].differences
    jobs = result.rows[-1].actual.store_jobs
    assert (0, (0, 1), True) in jobs, jobs


def test_offload_part_conforms_and_reaches_its_categories() -> None:
    """40 examples of ``offload`` (the last part of the default mix): no divergence; stores, stores of
    finished requests, flushes and loads of what a preempted request stored all reached."""
    assert part_names(ALL_PROFILE)[17] == "offload"
    c = Campaign("vllm", seconds=3600, seed=0, profile=OFFLOAD_PROFILE, max_batches=2)
    c.run()
    assert c.found is None, f"divergence: {c.found.rows[-1].differences if c.found else ''}"
    counts = coverage_counts(c.stats.coverage, OFFLOAD_PROFILE)
    assert all(counts[k] > 0 for k in ("offload_store", "offload_store_finished", "offload_flush", "offload_load",
                                        "deferred_free")), counts


def test_a_spec_that_never_flushes_a_finished_requests_store_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """The spec mutant ``offload_finished_jobs_unwatched`` (no fence at request_finished) diverges
    from vLLM on the abort-then-reuse case: vLLM flushes, the spec does not."""
    from asyncspec.checker.spec_mutants import _finished_jobs_unwatched
    from asyncspec.spec import offload

    monkeypatch.setattr(offload, "request_finished", _finished_jobs_unwatched(offload.request_finished))
    result = run_lockstep(W, SpecTarget(W), VllmTarget(W), REUSE)
    assert result.diverged and any(d.field == "store_jobs" for d in result.rows[-1].differences)


def test_a_vllm_whose_request_finished_watches_nothing_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """vLLM's ``request_finished`` without the fences of the jobs already issued (the vLLM mutant
    ``offload_finished_jobs_unwatched``, after vllm#48596): r1's allocation of r0's blocks flushes
    nothing, and the spec says it must."""
    from vllm.distributed.kv_transfer.kv_connector.v1.offloading.scheduler import OffloadingConnectorScheduler

    original = OffloadingConnectorScheduler.request_finished

    def unwatched(self: OffloadingConnectorScheduler, request: object) -> object:
        before = {bid: set(jobs) for bid, jobs in self._block_id_to_pending_jobs.items()}
        out = original(self, request)
        self._block_id_to_pending_jobs.clear()
        self._block_id_to_pending_jobs.update(before)
        return out

    monkeypatch.setattr(OffloadingConnectorScheduler, "request_finished", unwatched)
    result = run_lockstep(W, SpecTarget(W), VllmTarget(W), REUSE)
    assert result.diverged and [d.field for d in result.rows[-1].differences] == ["store_jobs"]
