"""More of vLLM's configuration space on the scheduler target (issue 13, item 3).

Hybrid KV cache groups: a sliding-window group beside the full-attention group,
one shared pool.  Each claim comes with a seeded bug it catches: a vLLM whose
window frees one token late, and a spec that never frees behind the window.
"""
from __future__ import annotations

from typing import Any

import pytest

from tests.vllm_guard import require_pinned_vllm

from asyncspec.spec import blocks
from asyncspec.spec import events as ev

from .campaign import Campaign, coverage_counts
from .harness import Event, RequestSpec, Workload, run_lockstep
from .profiles import HYBRID_PROFILE, unreachable_witnesses
from .spec_target import SpecTarget
from .vllm_target import VllmTarget

require_pinned_vllm()


def _campaign(batches: int, seed: int) -> Campaign:
    c = Campaign("vllm", seconds=3600, seed=seed, profile=HYBRID_PROFILE, max_batches=batches)
    c.run()
    return c


def test_hybrid_campaign_conforms() -> None:
    """100 hybrid examples: no divergence, and the sliding window freed blocks."""
    c = _campaign(batches=5, seed=1)
    assert c.found is None, f"divergence: {c.found.rows[-1].differences if c.found else ''}"
    counts = coverage_counts(c.stats.coverage, HYBRID_PROFILE)
    assert counts["sliding_window_free"] > 0
    assert ev.SLIDING_WINDOW_FREE not in unreachable_witnesses(HYBRID_PROFILE)


def _one_long_request() -> tuple[Workload, list[Event]]:
    w = Workload(requests=(RequestSpec(20, 6),), depth=2, block_size=4, num_blocks=16, token_budget=8,
                 sliding_window=8)
    events = [Event("add_request", 0)] + [Event("schedule"), Event("schedule"), Event("deliver")] + \
        [Event("schedule"), Event("deliver")] * 6
    return w, events


def test_hybrid_trace_reads_the_null_blocks() -> None:
    """A 20-token prompt, window 8, block 4: the sliding-window list fills with null blocks
    (-1) while the full-attention list keeps every block; spec and vLLM agree on both."""
    w, events = _one_long_request()
    result = run_lockstep(w, SpecTarget(w), VllmTarget(w), events)
    assert not result.diverged, result.rows[-1].differences
    tables = [dict(row.actual.requests)[0] for row in result.rows]
    assert any(-1 in r.swa_block_table for r in tables)
    last = tables[-2]
    assert -1 not in last.block_table and len(last.swa_block_table) == len(last.block_table)


def test_vllm_window_one_token_late_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """A vLLM whose window skips one token fewer (frees a block one token late) diverges."""
    from vllm.v1.core.single_type_kv_cache_manager import SlidingWindowManager

    def late(self: Any, num_computed_tokens: int) -> int:
        return max(0, num_computed_tokens - int(self.sliding_window) - int(self.extra_retained_tokens))

    monkeypatch.setattr(SlidingWindowManager, "get_num_skipped_tokens", late)
    c = _campaign(batches=2, seed=1)
    assert c.found is not None
    fields = {d.field for d in c.found.rows[-1].differences}
    assert any("swa_block_table" in f or "free_blocks" in f or "payload" in f for f in fields), fields


def test_spec_without_window_frees_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """A spec that never frees behind the window diverges from vLLM: the comparison reads the group."""
    monkeypatch.setattr(blocks, "remove_skipped_blocks", lambda cfg, d, req: None)
    w, events = _one_long_request()
    result = run_lockstep(w, SpecTarget(w), VllmTarget(w), events)
    assert result.diverged
    assert any("swa_block_table" in d.field for d in result.rows[-1].differences)
