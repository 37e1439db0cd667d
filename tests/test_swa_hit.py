"""Prefix caching with a sliding-window group (spec/swa.py): the window group's scan, the hybrid cut, frees."""
from __future__ import annotations

import dataclasses

from asyncspec.checker import compiled
from asyncspec.checker.configs import named_configs
from asyncspec.checker.fast_explorer import explore_fast
from asyncspec.checker.spec_mutants import MUTANTS_BY_NAME
from asyncspec.spec import blocks, swa
from asyncspec.spec.config import ConfigError, validate
from asyncspec.spec.draft import Draft
from asyncspec.spec.state import NULL_BLOCK, BlockHash, initial_state
from asyncspec.statemachine_tests.core.workload import RequestSpec, Workload, workload_problem

CFG = named_configs()["async-d2-swa-hit"]  # W = 3, blocks of 2: a hit needs one cached window block


def draft(window: int, cached: dict[int, int], free: list[int] | None = None) -> Draft:
    """r0 of a 2-request config with window ``window`` (blocks of 2) and, in the free queue, the window
    group's blocks ``cached`` (block index -> block id) with r0's hashes."""
    cfg = dataclasses.replace(CFG, sliding_window=window, num_blocks=16)
    d = Draft.of(initial_state(cfg, (0,) * len(cfg.requests)))
    for index, b in cached.items():
        d.block_hashes[b] = BlockHash(0, index, swa.SWA_GROUP)
    if free is not None:
        d.free_blocks = free
    return d


def test_the_scan_finds_the_rightmost_run_of_cached_window_blocks() -> None:
    cfg = dataclasses.replace(CFG, sliding_window=5, num_blocks=16)  # cdiv(4, 2) = 2 blocks in a row
    assert swa.contiguous_blocks_for_hit(cfg) == 2
    d = draft(5, {0: 3, 1: 4, 3: 5, 4: 6, 6: 7})  # block 5 missing: the run is 3-4, block 6 alone is short
    assert swa.window_hit(cfg, d, 0, 7) == (NULL_BLOCK, NULL_BLOCK, NULL_BLOCK, 5, 6)
    assert swa.window_hit(cfg, d, 0, 4) == (3, 4)  # no run inside the first 4 blocks ending at 3: blocks 0-1
    d = draft(5, {0: 3, 2: 4})  # no run of two: the cached blocks from block 0 (one)
    assert swa.window_hit(cfg, d, 0, 3) == (3,)
    assert swa.window_hit(cfg, draft(5, {1: 3}), 0, 2) == ()


def test_the_hybrid_hit_cuts_full_attention_to_the_window_groups_length() -> None:
    cfg = dataclasses.replace(CFG, sliding_window=5, num_blocks=16)
    d = draft(5, {0: 8, 1: 9})
    assert swa.cut_hit(cfg, d, 0, (0, 1, 2, 3)) == ((0, 1), (8, 9))
    one = dataclasses.replace(cfg, sliding_window=1)  # a window of one token: no block is needed, none cached
    assert swa.contiguous_blocks_for_hit(one) == 0
    d = draft(1, {})
    d.swa_block_tables[0] = (10, 11)
    d.counters[0] = d.counters[0]._replace(num_cached_tokens=4)
    swa.record_hashes(one, d, 0, 0)
    assert d.block_hashes[10] is None and d.block_hashes[11] is None
    assert swa.cut_hit(one, d, 0, (0, 1, 2, 3)) == ((), ())


def test_window_blocks_are_freed_tail_first_cached_ones_last() -> None:
    cfg = dataclasses.replace(CFG, num_blocks=16)
    d = draft(3, {1: 5})
    d.swa_block_tables[0] = (NULL_BLOCK, 5, 6)
    d.block_tables[0] = (0, 1)
    d.free_blocks = [b for b in range(16) if b not in (0, 1, 5, 6)]
    blocks.free_request_blocks(cfg, d, 0)
    assert d.free_blocks[:3] == [6, 1, 0] and d.free_blocks[-1] == 5  # window group first at the front


def test_the_config_holds_its_mutant_dies_and_the_compiled_explorer_checks_it() -> None:
    result = explore_fast(CFG, stop_on_first=False)
    assert not result.violations and result.distinct_states == 821
    assert MUTANTS_BY_NAME["swa_hit_not_reconciled"].config == CFG.name  # tests/test_mutants.py kills it
    if compiled.built():  # csrc/swa.c encodes the hybrid hit (tests/test_compiled_explorer.py: state by state)
        assert compiled.not_covered(CFG) is None
        mine = compiled.explore_compiled(CFG)
        assert (mine.distinct_states, mine.depth, mine.ok) == (821, result.depth, True)


def test_a_window_with_prefix_caching_is_accepted_but_not_with_drafts() -> None:
    validate(CFG)
    try:
        validate(dataclasses.replace(CFG, num_speculative_tokens=1, num_blocks=24))
    except ConfigError as e:
        assert "modelled without speculative decoding" in str(e)
    else:
        raise AssertionError("a sliding window with drafts was accepted")
    w = Workload(requests=(RequestSpec(4, 2),), sliding_window=4, prefix_caching=True)
    assert workload_problem(w) is None
    assert "without spec decoding" in str(workload_problem(dataclasses.replace(w, num_speculative_tokens=1)))
