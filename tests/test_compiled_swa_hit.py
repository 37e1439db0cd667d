"""The compiled explorer's hybrid hit (``csrc/swa.c``, ``spec/swa.py``) held to the spec on configs drawn
for it: a sliding-window group beside full attention with prefix caching, pools tight enough for KV
pressure to preempt and bring requests back to hits (window hits with a null head, hits the window
group cuts, W = 1's empty window hit), the same states, edges and verdicts as ``--explorer plain``."""
from __future__ import annotations

import random
from typing import Any

import pytest

from asyncspec.checker import compiled
from asyncspec.checker.bfs import Explorer
from asyncspec.spec import swa
from asyncspec.spec.config import ConfigError, SpecConfig
from asyncspec.spec.state import NULL_BLOCK

from tests.test_compiled_explorer import assert_same

pytestmark = pytest.mark.skipif(not compiled.built(), reason=compiled.NOT_BUILT)


def swa_hit_config(seed: int) -> SpecConfig:
    """A sliding-window config with prefix caching, two or three requests and a pool of the longest
    request's blocks or a few more, drawn from ``seed`` (deterministic)."""
    for attempt in range(100):
        rng = random.Random(seed * 5003 + attempt)
        n = rng.choice([2, 3, 3])
        requests = tuple((rng.randint(2, 7), rng.randint(1, 4)) for _ in range(n))
        bs = rng.choice([1, 2, 2, 3])
        need = max(-(-(p + m) // bs) for p, m in requests)
        try:
            return SpecConfig(name=f"swa-hit-{seed}", requests=requests, batch_queue_depth=rng.choice([1, 2, 2, 3]),
                              token_budget=rng.choice([2, 3, 4, 8]), block_size=bs,
                              num_blocks=min(16, need + rng.choice([0, 1, 2, 3])), enable_prefix_caching=True,
                              sliding_window=rng.randint(1, 6), reserve_full_isl=rng.random() < 0.5,
                              defer_block_free=rng.random() < 0.5, late_arrivals=rng.random() < 0.5,
                              forced_preemptions=rng.choice([0, 0, 1]), aborts=rng.random() < 0.3,
                              policy="priority" if rng.random() < 0.3 else "fcfs",
                              priorities=tuple(rng.randint(0, 2) for _ in range(n)),
                              long_prefill_token_threshold=rng.choice([0, 0, 2, 3]),
                              stale_mode=rng.choice(["deliver", "drop"]))
        except ConfigError:
            continue
    raise AssertionError(f"no valid config for seed {seed}")


SWA_HIT_SEEDS = [4, 24, 28]
"""The default tier's configs (4: W = 1, every hit cut to nothing; 24: window hits with a null head;
28: whole window hits); the rest of 0-39 in slow."""
MAX_STATES = 3000


@pytest.mark.parametrize("seed", [*SWA_HIT_SEEDS, *(pytest.param(s, marks=pytest.mark.slow)
                                                    for s in range(40) if s not in SWA_HIT_SEEDS)])
def test_compiled_equals_plain_on_a_hybrid_hit_config(seed: int) -> None:
    cfg = swa_hit_config(seed)
    assert compiled.not_covered(cfg) is None
    assert_same(cfg, max_states=MAX_STATES)


def test_the_default_configs_reach_every_shape_of_the_hybrid_hit(monkeypatch: pytest.MonkeyPatch) -> None:
    """The cross-check above is only as good as the hits its configs take (seen on the plain explorer)."""
    shapes: set[str] = set()
    cut_hit = swa.cut_hit

    def watched(cfg: SpecConfig, d: Any, req: int, attention_hit: tuple[int, ...]) -> tuple[tuple[int, ...], ...]:
        attention, window = cut_hit(cfg, d, req, attention_hit)
        if attention_hit:
            shapes.add("null head" if NULL_BLOCK in window else "cut" if len(attention) < len(attention_hit) else "whole")
        return attention, window

    monkeypatch.setattr(swa, "cut_hit", watched)
    for seed in SWA_HIT_SEEDS:
        Explorer(swa_hit_config(seed), True, MAX_STATES, True).run()
    assert shapes == {"null head", "cut", "whole"}
