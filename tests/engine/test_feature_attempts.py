"""Issue 28 items 3, 4, 6, 7: the attempts of engine/vllm/feature_attempts*.py re-run against vLLM.

Each test re-runs one attempt and holds vLLM to the outcome that docs/fuzzing.md
("Features not modelled yet (issue 28)") records: what ran, with the vLLM
functions counted while it ran, or the exact error of the attempt that fails.
A vLLM that changes any of it fails here, and the table must be updated.
"""

from __future__ import annotations

import contextlib
import functools
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from tests.vllm_guard import require_pinned_vllm

require_pinned_vllm()

from asyncspec.engine.vllm import feature_attempts as fa  # noqa: E402  (after the vLLM guard)
from asyncspec.engine.vllm import feature_attempts_dp as fa_dp  # noqa: E402
from asyncspec.engine.vllm.vllm_environment import load_vllm  # noqa: E402

load_vllm()  # the CPU / offline environment before the tests import vLLM's classes


@contextlib.contextmanager
def counting(*targets: tuple[Any, str]) -> Iterator[Counter[str]]:
    """Count calls of vLLM methods (``(class, name)``) while the block runs; restored after."""
    calls: Counter[str] = Counter()
    saved = [(cls, name, cls.__dict__[name]) for cls, name in targets]
    for cls, name, original in saved:
        def wrapper(*args: Any, _original: Any = original, _key: str = f"{cls.__name__}.{name}",
                    **kwargs: Any) -> Any:
            calls[_key] += 1
            return _original(*args, **kwargs)
        setattr(cls, name, functools.wraps(original)(wrapper))
    try:
        yield calls
    finally:
        for cls, name, original in saved:
            setattr(cls, name, original)


# ---- 3. encoder inputs ----------------------------------------------------------------


@pytest.mark.slow
def test_stock_multimodal_processor_needs_a_tokenizer() -> None:
    """vLLM's own processor (offline, no tokenizer): Scheduler.__init__ -> MultiModalBudget fails."""
    assert fa.attempt_stock_encoder_scheduler() == (
        "ValueError: PaliGemmaMultiModalProcessor requires a tokenizer and cannot be initialized "
        "when `skip_tokenizer_init=True`. Disable `--skip-tokenizer-init`.")


def test_encoder_cache_allocation_and_free_points() -> None:
    from vllm.v1.core.encoder_cache_manager import EncoderCacheManager
    from vllm.v1.core.sched.scheduler import Scheduler

    with counting((Scheduler, "_try_schedule_encoder_inputs"), (Scheduler, "_free_encoder_inputs"),
                  (EncoderCacheManager, "allocate"), (EncoderCacheManager, "free_encoder_input"),
                  (EncoderCacheManager, "can_allocate")) as calls:
        cache_size, budget, events = fa.run_encoder_cache()
    assert (cache_size, budget) == (fa.NUM_IMAGE_TOKENS, fa.NUM_IMAGE_TOKENS)  # MultiModalBudget's arithmetic
    assert calls["EncoderCacheManager.allocate"] == 2 and calls["EncoderCacheManager.free_encoder_input"] == 2
    assert calls["Scheduler._try_schedule_encoder_inputs"] > 0 and calls["Scheduler._free_encoder_inputs"] > 0
    step0, step1, output0, step2 = events[:4]
    # Allocation: the step whose token range first overlaps the image schedules its encoder input.
    assert (step0.call, step0.scheduled_encoder_inputs, step0.referrers) == ("schedule", {"r0": [0]}, {"img-A": ["r0"]})
    assert step0.num_free_slots == 0
    # A full cache cuts r1's chunk to the tokens before its image (offset 2).
    assert step1.num_scheduled_tokens == {"r0": 8, "r1": 2} and step1.scheduled_encoder_inputs == {}
    # Free: at step 0's output, while step 1 (r0's tokens 14..22, inside the image 4..20) is still
    # in flight: the test is offset + length <= num_computed_tokens - num_output_placeholders.
    assert (output0.call, output0.step, output0.referrers["img-A"]) == ("update_from_output", 0, [])
    assert (output0.num_computed_tokens["r0"], output0.num_output_placeholders["r0"]) == (22, 1)
    assert output0.num_freeable_slots == fa.NUM_IMAGE_TOKENS
    # Eviction at the next allocation; the evicted hash rides on that step to the worker.
    assert step2.call == "schedule" and step2.free_encoder_mm_hashes == ["img-A"]
    assert step2.scheduled_encoder_inputs == {"r1": [0]} and step2.referrers == {"img-B": ["r1"]}
    assert events[-1].referrers == {"img-B": []} and events[-1].num_freeable_slots == fa.NUM_IMAGE_TOKENS


# ---- 4. the offloading connector ------------------------------------------------------


def test_offloading_connector_store_load_and_deferred_free() -> None:
    from vllm.distributed.kv_transfer.kv_connector.v1.offloading.scheduler import OffloadingConnectorScheduler

    with counting((OffloadingConnectorScheduler, "_build_store_jobs"),
                  (OffloadingConnectorScheduler, "_update_connector_output"),
                  (OffloadingConnectorScheduler, "get_num_new_matched_tokens")) as calls:
        defer_block_free, events = fa.run_offloading()
    assert all(calls[k] > 0 for k in ("OffloadingConnectorScheduler._build_store_jobs",
                                      "OffloadingConnectorScheduler._update_connector_output",
                                      "OffloadingConnectorScheduler.get_num_new_matched_tokens"))
    assert defer_block_free  # kv_both at max_concurrent_batches 2: vLLM turns it on by itself
    by_step = {e.step: e for e in events}
    # Store: issued in the step that computes the blocks, sized from num_computed_tokens + scheduled.
    assert by_step[0].num_scheduled_tokens == {"A": 48} and by_step[0].store_jobs == {0: ("A", 3)}
    # Abort with the step in flight: the blocks wait in deferred_frees behind a fence.
    aborted = by_step[fa.ABORT_STEP]
    assert "B2" not in aborted.status and len(aborted.deferred_frees) == 1
    assert len(aborted.deferred_frees[0][1]) == 4
    # CPU hit after eviction: an asynchronous load job, two empty schedules, then the last token.
    assert by_step[12].load_jobs == {4: "A2"} and by_step[12].status == {"A2": ("WAITING_FOR_REMOTE_KVS", 48)}
    assert by_step[13].status["A2"][0] == "WAITING_FOR_REMOTE_KVS"
    assert by_step[14].num_scheduled_tokens == {"A2": 1} and by_step[14].status["A2"] == ("RUNNING", 48)
    assert events[-1].num_free_blocks == 12 and events[-1].deferred_frees == []


# ---- 6. Mamba groups beside attention --------------------------------------------------


def test_mamba_group_without_prefix_caching_holds_one_state_block() -> None:
    from vllm.v1.core.single_type_kv_cache_manager import MambaManager

    with counting((MambaManager, "get_num_blocks_to_allocate")) as calls:
        managers, seen = fa.run_mamba_hybrid("none")
    assert managers == ["FullAttentionManager", "MambaManager"] and calls["MambaManager.get_num_blocks_to_allocate"] > 0
    live = [s for s in seen if s]
    assert live[0] == {"r0": (40, [[1, 2, 3], [4]]), "r1": (20, [[5, 6], [7]])}
    assert all(len(blocks[1]) == 1 for snap in live for _, blocks in snap.values())


def test_mamba_group_needs_the_lcm_as_the_scheduler_block_size() -> None:
    assert fa.attempt_mamba_with_attention_block_size() == "AssertionError in v1/core/kv_cache_coordinator.py __init__"


def test_mamba_align_mode_splits_prefill_at_blocks_and_frees_old_states() -> None:
    from vllm.v1.core.sched.scheduler import Scheduler
    from vllm.v1.core.single_type_kv_cache_manager import MambaManager

    with counting((Scheduler, "_mamba_block_aligned_split"), (MambaManager, "remove_skipped_blocks")) as calls:
        managers, seen = fa.run_mamba_hybrid("align")
    assert managers == ["FullAttentionManager", "MambaManager"]
    assert calls["Scheduler._mamba_block_aligned_split"] > 0 and calls["MambaManager.remove_skipped_blocks"] > 0
    # Budget 64: r0's 40-token prompt is cut to 32 (a block multiple), r1's 20 to 16.
    assert seen[0] == {"r0": (32, [[1, 2], [0, 3]]), "r1": (16, [[4], [5]])}
    # The state of older blocks is released to the null block (0) as the request advances.
    last = [s for s in seen if s][-1]
    assert last["r0"][1][1][:2] == [0, 0] and last["r1"][1][1][0] == 0


# ---- 7. data parallel ------------------------------------------------------------------


@pytest.mark.slow
def test_dp_engine_core_proc_cannot_be_built_in_one_process() -> None:
    dense = fa_dp.attempt_dp_engine_core_proc(moe=False, wait_s=20)
    assert dense == {"outcome": "AssertionError: DPEngineCoreProc should only be used for MoE models",
                     "raised_in": "__init__"}
    moe = fa_dp.attempt_dp_engine_core_proc(moe=True, wait_s=20)
    assert moe == {"outcome": "blocked", "blocked_in": ["_perform_handshakes", "_perform_handshake",
                                                        "startup_handshake"]}


@pytest.mark.slow
def test_dp_wave_sync_over_two_ranks() -> None:
    local = {0: [True] * 6 + [False] * 3, 1: [False] * 9}
    ranks = fa_dp.run_wave_sync(local, dp_sync_interval=4)
    for rank in (0, 1):
        assert [p.step_counter for p in ranks[rank]] == list(range(1, 10))
        # Synced at step 1 and every 4th; in between the loop keeps running unasked. The idle
        # rank runs (dummy batches) until the sync at step 8 sees no rank with work.
        assert [p.engines_running for p in ranks[rank]] == [True] * 7 + [False, True]


def test_dp_start_wave_wakes_an_idle_engine() -> None:
    # (new wave, excluded engine): a newer wave from another engine wakes engine 1; its own
    # index is excluded; an older wave changes nothing.
    assert fa_dp.run_start_wave([(3, 0), (5, 1), (2, 0)]) == [(3, True), (3, True), (3, True)]


@pytest.mark.slow
def test_dp_dummy_batch_runs_on_the_cpu_runner() -> None:
    engine_outcome, runner_outcome = fa_dp.run_dummy_batch()
    assert engine_outcome == "NotImplementedError: Method 'execute_dummy_batch' is not implemented."
    assert runner_outcome == "ran on CPUModelRunner"


def test_the_offloading_connectors_worker_half_cannot_run_on_a_cpu() -> None:
    """On the engine target as it is, the oracle model owns its paged store (``runner_stubs.initialize_kv_cache_tensors``
    returns no KV tensor) and vLLM's offloading worker finds no tensor for the attention layer; given one,
    vLLM refuses the CPU platform itself (docs/fuzzing.md, "Features tried on a CPU")."""
    from asyncspec.engine.vllm.engine_feature_attempts import attempt_offloading_engine

    assert attempt_offloading_engine() == "KeyError: 'model.layers.0.self_attn.attn'"
    # with a KV tensor in the runner's hands, vLLM's own check refuses the CPU platform
    assert attempt_offloading_engine(with_kv_tensor=True) == (
        "Exception: CPU Offloading is currently only supported on CUDA-alike and XPU GPUs")


def test_a_mamba_group_on_the_engine_target_runs_without_state_copies_and_align_needs_the_models() -> None:
    """``mamba_cache_mode="none"``: the engine target's runner takes the hybrid KV config (an attention and a
    Mamba group) and the request finishes; ``"align"``: the runner asks the model for its state copy
    functions, which only a Mamba model has (docs/fuzzing.md, "Features tried on a CPU")."""
    from asyncspec.engine.vllm.engine_feature_attempts import attempt_mamba_engine

    assert attempt_mamba_engine("none").startswith("finished after ")
    assert attempt_mamba_engine("align") == "AttributeError: 'OracleModule' object has no attribute 'get_mamba_state_copy_funcs'"
