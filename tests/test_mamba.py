"""Mamba state groups beside attention (``mamba_cache_mode``, spec/mamba.py): split, state blocks, frees."""
from __future__ import annotations

import dataclasses

import pytest

from asyncspec.checker import compiled
from asyncspec.checker.configs import named_configs
from asyncspec.checker.spec_mutants import MUTANTS_BY_NAME
from asyncspec.spec import events as ev
from asyncspec.spec.config import ConfigError, SpecConfig, validate
from asyncspec.spec.engine import apply, parse_action
from asyncspec.spec.state import NULL_BLOCK, EngineState, initial_state

CFG = named_configs()["async-d2-mamba"]  # align, blocks of 2, budget 3, r0: P=5 M=2 first, D=2, deferred frees


def run(actions: list[str], cfg: SpecConfig = CFG) -> tuple[EngineState, list[frozenset[str]]]:
    s, seen = initial_state(cfg, (0,) * len(cfg.requests)), []
    for text in actions:
        s, events = apply(cfg, s, parse_action(text))
        seen.append(events)
    return s, seen


def test_prefill_chunks_are_cut_to_block_multiples() -> None:
    s, seen = run(["schedule", "schedule"])  # budget 3, but chunks of 2: [0, 2), [2, 4)
    assert ev.MAMBA_ALIGNED_SPLIT in seen[0] and s.counters[0].num_computed_tokens == 4
    assert [e.num_tokens for step in s.batch_queue for e in step.entries] == [2, 2]
    s, _ = run(["schedule", "schedule", "update_from_output", "schedule"])  # the last prompt token: not cut
    assert s.counters[0].num_computed_tokens == 5


def test_one_state_block_per_chunk_end_and_the_older_freed_behind_c_minus_f() -> None:
    head = ["schedule", "schedule", "update_from_output", "schedule", "update_from_output"]
    s, _ = run(head)
    assert len(s.mamba_tables[0]) == 3 and NULL_BLOCK not in s.mamba_tables[0]  # states after 2, 4 and 5 tokens
    s, seen = run(head + ["schedule"])  # C - F = 4: the state after 2 tokens is no longer read
    assert ev.MAMBA_STATE_FREED_IN_FLIGHT in seen[-1]
    assert s.mamba_tables[0][0] == NULL_BLOCK and s.mamba_tables[0][1] != NULL_BLOCK
    step = s.batch_queue[-1].entries[0]
    assert step.state_blocks == (s.mamba_tables[0][2],)  # reads and writes the state after 5 tokens


def test_none_mode_holds_one_state_block_from_admission_to_free() -> None:
    cfg = dataclasses.replace(CFG, name="none", mamba_cache_mode="none", enable_prefix_caching=False,
                              requests=((5, 2),), late_arrivals=False)
    s, seen = run(["schedule", "schedule"], cfg)
    assert ev.MAMBA_ALIGNED_SPLIT not in seen[0] and s.counters[0].num_computed_tokens == 5  # no split
    assert len(s.mamba_tables[0]) == 1 and len(s.free_blocks) == cfg.num_blocks - 4
    s, _ = run(["schedule", "schedule", "update_from_output", "update_from_output", "abort r0"], cfg)
    assert s.mamba_tables[0] == () and len(s.free_blocks) + sum(len(e.evict_first) for e in s.deferred_frees) == 6


def test_the_config_holds_and_the_mutants_are_its() -> None:  # tests/test_mutants.py checks each is killed
    from asyncspec.checker.fast_explorer import explore_fast

    result = explore_fast(CFG, stop_on_first=False)
    assert not result.violations and result.distinct_states == 2091
    assert all(result.witnesses[w] for w in (ev.MAMBA_STATE_FREED_IN_FLIGHT, ev.MAMBA_SPLIT_STOPS_PASS))
    for name in ("mamba_frees_by_computed", "mamba_split_skipped"):
        assert MUTANTS_BY_NAME[name].config == "async-d2-mamba"


def test_the_compiled_explorer_checks_mamba_groups() -> None:
    """csrc/mamba.c encodes the group (tests/test_compiled_explorer.py holds it to the spec state by state)."""
    if not compiled.built():
        assert compiled.not_covered(CFG) == compiled.NOT_BUILT
        return
    assert compiled.not_covered(CFG) is None
    result = compiled.explore_compiled(CFG)
    assert not result.violations and (result.distinct_states, result.depth) == (2091, 26)


def test_bad_mamba_configs_are_refused() -> None:
    with pytest.raises(ConfigError, match="'mamba_cache_mode' must be 'none' or 'align'"):
        validate(SpecConfig(name="x", requests=((4, 1),), mamba_cache_mode="all"))
    with pytest.raises(ConfigError, match="Mamba prefix caching needs mamba_cache_mode = 'align'"):
        validate(SpecConfig(name="x", requests=((4, 1),), mamba_cache_mode="none"))
    with pytest.raises(ConfigError, match="without speculative decoding"):
        validate(SpecConfig(name="x", requests=((4, 1),), mamba_cache_mode="align", num_speculative_tokens=1,
                            num_blocks=12))
