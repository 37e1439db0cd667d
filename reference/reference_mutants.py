"""Seeded bugs in the reference, which both refinement checks must catch.

A mutant replaces one method of a reference class for the duration of a
``with applied(mutant):`` block (the class attribute is patched, so every
instance and every deep copy sees it).  Each names the named config on which
the exhaustive check (``reference/refinement.py``) must report a mismatch;
``tests/statemachine_tests/scheduler/test_reference_refinement.py`` checks that the
Hypothesis machine catches it too.

Example:
    >>> from asyncspec.checker.configs import named_configs
    >>> from asyncspec.reference.refinement import check_refinement
    >>> m = MUTANTS_BY_NAME["free_immediately_despite_deferral"]
    >>> with applied(m):
    ...     r = check_refinement(named_configs()[m.config])
    >>> r.mismatch.kind
    'state'
"""
from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from asyncspec.reference.block_pool import BlockPool, KVCacheBlock
from asyncspec.reference.kv_cache_manager import KVCacheManager
from asyncspec.reference.reference_request import Request
from asyncspec.reference.reference_scheduler import Scheduler

Wrap = Callable[[Callable[..., Any]], Callable[..., Any]]


@dataclass(frozen=True)
class ReferenceMutant:
    """One seeded bug: the method it replaces and where it must be caught."""

    name: str
    description: str
    owner: type  # the class whose method is replaced
    method: str
    wrap: Wrap  # original method -> mutated method
    config: str  # the named config on which the exhaustive check must fail


def _free_immediately(orig: Callable[..., Any]) -> Callable[..., Any]:
    def free(self: Scheduler, req: Request) -> None:
        self.kv_cache_manager.free(req)  # ignores the step fence
    return free


def _stale_counts_against_placeholders(orig: Callable[..., Any]) -> Callable[..., Any]:
    def drain(self: Scheduler, req: Request, num_tokens: int) -> bool:
        stale = bool(orig(self, req, num_tokens))
        if stale and req.num_output_placeholders > 0:
            req.num_output_placeholders -= 1  # a stale frame is not a placeholder's token
        return stale
    return drain


def _no_stale_skip(orig: Callable[..., Any]) -> Callable[..., Any]:
    def blocks_resume(req: Request) -> bool:
        return False
    return staticmethod(blocks_resume)


def _hashed_blocks_to_front(orig: Callable[..., Any]) -> Callable[..., Any]:
    def free_blocks(self: BlockPool, ordered_blocks: list[KVCacheBlock]) -> None:
        freed = []
        for block in ordered_blocks:
            block.ref_cnt -= 1
            if block.ref_cnt == 0:
                freed.append(block)
        self.free_block_queue.appendleft_n(freed)  # cached blocks are no longer kept LRU
    return free_blocks


def _hit_without_cap(orig: Callable[..., Any]) -> Callable[..., Any]:
    def get_computed_blocks(self: KVCacheManager, req: Request) -> tuple[list[KVCacheBlock], int]:
        hits: list[KVCacheBlock] = []
        for block_hash in req.block_hashes:  # no N - 1 cap: nothing may be left to sample
            block = self.block_pool.get_cached_block(block_hash)
            if block is None:
                break
            hits.append(block)
        return hits, len(hits) * self.block_size
    return get_computed_blocks


def _no_max_tokens_guard(orig: Callable[..., Any]) -> Callable[..., Any]:
    def guard(self: Scheduler, req: Request) -> bool:
        return False
    return guard


MUTANTS: tuple[ReferenceMutant, ...] = (
    ReferenceMutant("free_immediately_despite_deferral",
                    "_free_request_blocks returns blocks at once although a step in flight writes them",
                    Scheduler, "_free_request_blocks", _free_immediately, "async-d2-defer"),
    ReferenceMutant("stale_frame_counts_against_placeholders",
                    "the stale drain also consumes a placeholder of the resumed request",
                    Scheduler, "_drain_in_flight", _stale_counts_against_placeholders, "async-free"),
    ReferenceMutant("forget_stale_skip",
                    "pass 2 resumes a request whose deliverable stale output is still in flight",
                    Scheduler, "_stale_output_blocks_resume", _no_stale_skip, "finding-d3-no-stagger"),
    ReferenceMutant("cached_blocks_freed_to_front",
                    "freed prefix-cached blocks go to the front of the free queue (no LRU)",
                    BlockPool, "free_blocks", _hashed_blocks_to_front, "async-d2"),
    ReferenceMutant("cache_hit_without_cap",
                    "the prefix-cache hit may cover the whole sequence (no N - 1 cap)",
                    KVCacheManager, "get_computed_blocks", _hit_without_cap, "async-d2-defer"),
    ReferenceMutant("no_max_tokens_guard",
                    "pass 1 schedules a request whose in-flight step already reaches max_tokens",
                    Scheduler, "_max_tokens_guard", _no_max_tokens_guard, "async-d2"),
)

MUTANTS_BY_NAME = {m.name: m for m in MUTANTS}


@contextlib.contextmanager
def applied(mutant: ReferenceMutant) -> Iterator[None]:
    """Install the mutant; restore the original method afterwards (even on error)."""
    original = mutant.owner.__dict__[mutant.method]
    setattr(mutant.owner, mutant.method, mutant.wrap(getattr(mutant.owner, mutant.method)))
    try:
        yield
    finally:
        setattr(mutant.owner, mutant.method, original)
