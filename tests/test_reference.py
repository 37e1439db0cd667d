"""The reference scheduler: exhaustive refinement of the spec, seeded bugs, unit behaviour."""
from __future__ import annotations

import doctest

import pytest

from asyncspec.checker.configs import config_set, load_manifest, named_configs
from asyncspec.reference import (
    abstraction, block_pool, reference_config as config, reference_engine as engine,
    reference_harness as harness, kv_cache_manager, reference_mutants as mutants, outputs,
    refinement, reference_request as request, reference_scheduler as scheduler,
)
from asyncspec.reference.reference_config import ReferenceConfig
from asyncspec.reference.reference_engine import EngineCore, TokenFunctionModel, make_request
from asyncspec.reference.reference_mutants import MUTANTS, applied
from asyncspec.reference.refinement import check_refinement

# The distinct reference states explored (modulo block renaming) must equal the spec
# checker's pinned counts (configs/manifest.json), as they do when the reference refines it.
# The reference has neither speculative decoding nor structured output (issue 7), nor pauses, KV
# connectors, streaming-input sessions, encoder inputs and Mamba groups (issue 28), nor sliding-window groups:
# configs with them are not its to refine.
CHECKED = [c for c in config_set("default") + config_set("finding")
           if not (c.num_speculative_tokens or c.structured_output or c.pauses or c.kv_connector or c.resumable
                   or c.images or c.sliding_window or c.mamba_cache_mode)]


@pytest.mark.parametrize("cfg", CHECKED, ids=[c.name for c in CHECKED])
def test_reference_refines_spec_exhaustively(cfg) -> None:  # type: ignore[no-untyped-def]
    result = check_refinement(cfg)
    assert result.mismatch is None, result.mismatch.render()
    assert result.ok
    assert result.distinct_states == load_manifest()[cfg.name]["distinct_states"]


def test_the_refinement_covers_most_named_configs() -> None:
    assert len(CHECKED) >= 11


@pytest.mark.slow
def test_reference_refines_spec_slow_configs() -> None:
    for cfg in [c for c in config_set("slow") if not getattr(c, "num_speculative_tokens", 0)]:
        result = check_refinement(cfg)
        assert result.ok, result.mismatch.render() if result.mismatch else "partial"
        assert result.distinct_states == load_manifest()[cfg.name]["distinct_states"]


@pytest.mark.parametrize("mutant", MUTANTS, ids=[m.name for m in MUTANTS])
def test_mutant_is_caught_exhaustively(mutant) -> None:  # type: ignore[no-untyped-def]
    with applied(mutant):
        result = check_refinement(named_configs()[mutant.config])
    assert result.mismatch is not None, f"{mutant.name} survived"
    text = result.mismatch.render()
    assert "(spec)" in text or result.mismatch.kind in ("enabled", "representation")


def test_mutant_patch_is_undone() -> None:
    m = MUTANTS[0]
    original = m.owner.__dict__[m.method]
    with applied(m):
        assert m.owner.__dict__[m.method] is not original
    assert m.owner.__dict__[m.method] is original


def test_mismatch_table_shows_both_successors() -> None:
    m = mutants.MUTANTS_BY_NAME["no_max_tokens_guard"]
    with applied(m):
        result = check_refinement(named_configs()[m.config])
    assert result.mismatch is not None
    text = result.mismatch.render()
    assert "r0.num_computed_tokens" in result.mismatch.message
    assert "schedule (spec)" in text and "init" in text


@pytest.mark.parametrize("module", [abstraction, block_pool, config, engine, harness, kv_cache_manager,
                                    mutants, outputs, refinement, request, scheduler])
def test_docstring_examples(module) -> None:  # type: ignore[no-untyped-def]
    failures, _ = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert failures == 0


def test_free_queue_order_lru() -> None:
    pool = block_pool.BlockPool(num_blocks=5, enable_caching=True)
    a = pool.get_new_blocks(3)
    pool.cache_full_blocks(a[:2], [11, 12])
    pool.free_blocks(reversed(a))  # tail first: 2 (unhashed) to the front, 1 and 0 to the back
    assert pool.free_block_ids() == [2, 3, 4, 1, 0]
    pool.get_new_blocks(4)  # evicts block 1's hash
    assert pool.get_cached_block(12) is None and pool.get_cached_block(11) is not None


def test_engine_runs_a_large_workload_to_completion() -> None:
    cfg = ReferenceConfig(num_gpu_blocks=60, block_size=16, max_num_batched_tokens=2048,
                          max_num_seqs=32, batch_queue_size=2)
    eos = {f"r{i}": (i % 7) * 3 for i in range(64)}
    core = EngineCore(cfg, TokenFunctionModel(eos))
    reqs = [make_request(i, 20 + 3 * i, 20, 16) for i in range(64)]
    for r in reqs:
        core.add_request(r)
    finished = {}
    for _ in range(10_000):
        if not core.has_work():
            break
        for o in core.step_with_batch_queue():
            if o.finish_reason:
                finished[o.request_id] = o.finish_reason
    assert len(finished) == 64
    for i, r in enumerate(reqs):
        want = eos[r.request_id] if 0 < eos[r.request_id] <= 20 else 20
        assert r.num_output_tokens == want
        assert finished[r.request_id] == ("stop" if 0 < eos[r.request_id] <= 20 else "length")
    pool = core.scheduler.kv_cache_manager.block_pool
    assert pool.get_num_free_blocks() == 60
    assert core.scheduler.stats["preemption"] > 0


def test_schedule_cost_is_per_scheduled_request() -> None:
    """schedule() looks at running requests and the waiting requests it admits, not all of them."""
    cfg = ReferenceConfig(num_gpu_blocks=64, block_size=16, max_num_batched_tokens=64, max_num_seqs=4)
    core = EngineCore(cfg, TokenFunctionModel({}))
    for i in range(1000):
        core.add_request(make_request(i, 16, 4, 16))
    out = core.scheduler.schedule()
    assert len(out.scheduled) == 4
    assert len(core.scheduler.waiting) == 996
