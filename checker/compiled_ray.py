"""``check --ray ADDRESS`` on the compiled explorer: the C search's parents expanded by Ray actors.

This process keeps the store (``csrc/explore.c``): it takes a batch of parents from the frontier
as their bit strings (``frontier``), splits it into one slice per actor, and each actor, holding a
C search of the same config, expands its slice: successors, canonical form, encoding and every
*always* property (``expand``, ``csrc/remote.h``).  The expansions come back in slice order and
are integrated parent by parent in index order (``integrate``), with the single-thread search's
stop rules (the first stopping violation, ``--max-states``) after each parent, so the result is
the one-process result (``tests/test_ray_local.py``).  Ray actors import the installed
``asyncspec``; a spec mutant never runs compiled (``compiled.spec_replaced``), so none is lost.

Example (no cluster needed: an actor's work done in this process):
    >>> from asyncspec.checker.compiled import built, c_search
    >>> from asyncspec.spec.config import SpecConfig
    >>> cfg = SpecConfig(name="tiny", requests=((2, 1),), num_blocks=1, block_size=4)
    >>> if built():
    ...     c, actor = c_search(cfg), c_search(cfg)
    ...     head, parents = c.frontier(8)
    ...     status, taken = c.integrate(head, actor.expand(parents))
    ...     print(head, status, taken == len(parents), c.stats()["states"] > len(parents))
    ... else:
    ...     print(0, 0, True, True)
    0 0 True True
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from asyncspec.spec.config import SpecConfig

from asyncspec.checker.compiled import c_search
from asyncspec.checker.ray_address import RayActors

RAY_BATCH = 16384
"""Parents per round trip to the actors: large enough that Ray's per-call cost (milliseconds) is
small beside the work, small enough that a stop or an interrupt waits for little."""


class ExpandActor:
    """A Ray actor's half: a C search of the config that only expands parents it is sent."""

    def __init__(self, cfg: SpecConfig) -> None:
        self.c: Any = c_search(cfg)

    def expand(self, parents: list[bytes]) -> bytes:
        """The expansion of ``parents`` (their bit strings)."""
        expansion: bytes = self.c.expand(parents)
        return expansion


def slices(parents: list[bytes], k: int) -> list[list[bytes]]:
    """``parents`` cut into at most ``k`` consecutive, non-empty slices of near-equal size.

    >>> [len(s) for s in slices([b""] * 5, 2)], slices([], 3)
    ([3, 2], [])
    """
    per = -(-len(parents) // k) if parents else 1
    return [parents[i:i + per] for i in range(0, len(parents), per)]


def run_batches(c: Any, budget: int, k: int, expand: Callable[[list[list[bytes]]], list[bytes]]) -> int:
    """Expand about ``budget`` parents (whole batches) of the search ``c``, a batch cut into ``k``
    slices that ``expand`` expands elsewhere, the expansions integrated in order.  The statuses of
    ``c.run``: 0 more to do, 1 done, 2 a violation stopped it, 3 ``--max-states``."""
    done = 0
    while done < budget:
        head, parents = c.frontier(RAY_BATCH)
        if not parents:
            break
        for expansion in expand(slices(parents, k)):
            status, taken = c.integrate(head, expansion)
            head, done = head + taken, done + taken
            if status:
                return int(status)
    return int(c.run(0))  # no parent expanded: the search's status as it stands


class RayCompiled:
    """``jobs`` actors on the Ray cluster at ``address`` (``local``: one started here)."""

    def __init__(self, cfg: SpecConfig, jobs: int, address: str) -> None:
        self._cluster = RayActors(address, jobs, ExpandActor, cfg)

    def run(self, c: Any, budget: int) -> int:
        """Up to ``budget`` parents of the search ``c`` expanded by the actors (``run_batches``)."""
        return run_batches(c, budget, len(self._cluster.actors), self._expand)

    def _expand(self, parts: list[list[bytes]]) -> list[bytes]:
        actors = self._cluster.actors
        return list(self._cluster.ray.get([a.expand.remote(part) for a, part in zip(actors, parts)]))

    def close(self) -> None:
        self._cluster.close()
