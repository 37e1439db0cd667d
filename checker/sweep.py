"""A grid sweep: one base config, every combination of a few settings.

Example:
    >>> cfgs = grid(base_requests=((3, 2), (2, 2)), depths=(1, 2), blocks=(3,),
    ...             defer=(False,), stale=("deliver",))
    >>> [c.name for c in cfgs]
    ['sweep-d1-b3-deliver', 'sweep-d2-b3-deliver']
"""
from __future__ import annotations

import itertools

from typing import cast

from asyncspec.spec.config import SpecConfig, StaleMode


def grid(
    base_requests: tuple[tuple[int, int], ...],
    depths: tuple[int, ...],
    blocks: tuple[int, ...],
    defer: tuple[bool, ...],
    stale: tuple[str, ...],
    token_budget: int = 4,
    block_size: int = 2,
) -> list[SpecConfig]:
    """Every combination, named after its settings, in a fixed order."""
    out = []
    for d, b, df, st in itertools.product(depths, blocks, defer, stale):
        name = f"sweep-d{d}-b{b}-{st}" + ("-defer" if df else "")
        out.append(SpecConfig(
            name=name, requests=base_requests, batch_queue_depth=d, num_blocks=b,
            defer_block_free=df, stale_mode=cast(StaleMode, st),
            token_budget=token_budget, block_size=block_size,
            forced_preemptions=1 if df else 0,
        ))
    return out
