"""Seeded bugs of the spec's issue-28 connectors and caches (the offloading connector, the encoder
cache): the functions ``spec_mutants.MUTANTS`` installs; kept apart for the module size."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any


def _finished_jobs_unwatched(orig: Callable[..., Any]) -> Callable[..., Any]:
    """request_finished without its loop over the issued jobs: their blocks are not watched, so
    reallocating them flushes nothing (only jobs issued after the finish are watched)."""
    def mutant(cfg: Any, d: Any, req: int) -> None:
        jobs = list(d.store_jobs)
        orig(cfg, d, req)
        d.store_jobs = jobs
    return mutant


def _store_past_tokens(orig: Callable[..., Any]) -> Callable[..., Any]:
    """_calc_num_offloadable_tokens without its min(..., num_tokens): a running request stores up to
    C + n, placeholders included, blocks whose last positions hold no token yet."""
    def mutant(cfg: Any, d: Any, req: int, num_scheduled: int, finished: bool) -> int:
        if finished:
            return int(orig(cfg, d, req, num_scheduled, finished))
        return int((d.counters[req].num_computed_tokens + num_scheduled) // cfg.block_size)
    return mutant


def _no_revive(orig: Callable[..., Any]) -> Callable[..., Any]:
    """A cache hit on a freeable entry references it but leaves it freeable (evictable while read)."""
    def mutant(cfg: Any, d: Any, req: int, input_id: int) -> bool:
        freeable = list(d.enc_freeable)
        hit = bool(orig(cfg, d, req, input_id))
        d.enc_freeable = freeable
        return hit
    return mutant


def _evictions_not_sent(orig: Callable[..., Any]) -> Callable[..., Any]:
    """Evictions never reach the worker (``free_encoder_mm_hashes`` always empty)."""
    def mutant(d: Any, p: Any) -> tuple[int, ...]:
        return ()
    return mutant


def _frees_by_computed(orig: Callable[..., Any]) -> Callable[..., Any]:
    """remove_skipped_blocks on the computed-token basis C (not C - F): an in-flight step's
    starting state is freed under it."""
    def mutant(cfg: Any, d: Any, req: int) -> None:
        c = d.counters[req]
        d.counters[req] = c._replace(num_in_flight_tokens=0)
        orig(cfg, d, req)
        d.counters[req] = c
    return mutant


def _no_aligned_split(orig: Callable[..., Any]) -> Callable[..., Any]:
    """_mamba_block_aligned_split skipped: prefill chunks end wherever the budget does."""
    def mutant(cfg: Any, d: Any, req: int, start: int, n: int) -> int:
        return n
    return mutant


def _hit_not_reconciled(orig: Callable[..., Any]) -> Callable[..., Any]:
    """The hybrid hit not reconciled (vllm-ascend#14810's shape: full attention's blocks not cut to the
    agreed length): full attention's hit is taken whole, the window group's positions past its own
    hit left null, so the next token's window reads KV the group does not hold."""
    def mutant(cfg: Any, d: Any, req: int, attention_hit: tuple[int, ...]) -> tuple[tuple[int, ...], tuple[int, ...]]:
        _, window = orig(cfg, d, req, attention_hit)
        if not window and not attention_hit:
            return attention_hit, window
        return attention_hit, tuple(window) + (-1,) * (len(attention_hit) - len(window))
    return mutant
