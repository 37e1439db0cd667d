"""Seeded mutants of ``spec/request.py`` that the prover must refute with a replayed CTI.

Each mutant replaces one function of ``asyncspec.spec.request`` (applied with
``prover.patched``) and breaks a different counter invariant.
"""
from __future__ import annotations

from typing import Any, Callable, NamedTuple

from asyncspec.spec import request as rq
from asyncspec.spec.algebra import Arith

_preempt = rq.preempt
_after_schedule = rq.after_schedule
_drain_in_flight = rq.drain_in_flight
_deliver_tokens = rq.deliver_tokens
_defer_abort = rq.defer_abort


class Mutant(NamedTuple):
    """A named replacement of one spec function."""

    name: str
    function: str
    replacement: Callable[..., Any]
    breaks: str  # the invariant it is meant to break (any replayed CTI kills it)


def preempt_keeps_placeholders(A: Arith, c: rq.RequestCounters, drop: Any) -> rq.RequestCounters:
    """``_preempt_request`` forgets ``num_output_placeholders := 0``."""
    return _preempt(A, c, drop)._replace(num_output_placeholders=c.num_output_placeholders)


def after_schedule_two_placeholders(A: Arith, p: rq.RequestParams, c: rq.RequestCounters, n: Any,
                                    seq: Any, k: rq.Knobs) -> rq.RequestCounters:
    """A sampling step adds two placeholders."""
    out = _after_schedule(A, p, c, n, seq, k)
    return out._replace(num_output_placeholders=out.num_output_placeholders
                        + A.ite(out.is_prefill_chunk, A.lit(0), A.lit(1)))


def drain_keeps_stale(A: Arith, c: rq.RequestCounters, n: Any) -> tuple[rq.RequestCounters, Any]:
    """The lockstep drain forgets ``num_stale_output_tokens -= n``."""
    out, stale = _drain_in_flight(A, c, n)
    return out._replace(num_stale_output_tokens=c.num_stale_output_tokens), stale


def stale_drain_rolls_back_computed(A: Arith, c: rq.RequestCounters, n: Any) -> tuple[rq.RequestCounters, Any]:
    """Stale output rolls C back by its tokens (as if its KV were lost)."""
    out, stale = _drain_in_flight(A, c, n)
    rolled = A.max(out.num_computed_tokens - n, A.lit(0))
    return out._replace(num_computed_tokens=A.ite(stale, rolled, out.num_computed_tokens)), stale


def guard_never_fires(A: Arith, p: rq.RequestParams, c: rq.RequestCounters) -> Any:
    """No max_tokens guard (vLLM before PR #27922)."""
    return A.false()


def frontier_past_known(A: Arith, k: rq.Knobs, p: rq.RequestParams, c: rq.RequestCounters, upto: Any) -> Any:
    """``cache_blocks`` caches up to ``upto`` even past the known tokens (placeholders hashed)."""
    full = A.div(upto, k.block_size) * k.block_size
    return A.max(c.num_cached_tokens, full)


MUTANTS: tuple[Mutant, ...] = (
    Mutant("preempt_keeps_placeholders", "preempt", preempt_keeps_placeholders, "not_running_is_reset"),
    Mutant("after_schedule_two_placeholders", "after_schedule", after_schedule_two_placeholders,
           "placeholders_count_sampling_steps"),
    Mutant("drain_keeps_stale", "drain_in_flight", drain_keeps_stale, "in_flight_is_frames"),
    Mutant("stale_drain_rolls_back_computed", "drain_in_flight", stale_drain_rolls_back_computed,
           "stale_output_keeps_counters"),
    Mutant("guard_never_fires", "max_tokens_guard", guard_never_fires, "max_tokens_headroom"),
    Mutant("frontier_past_known", "cached_frontier", frontier_past_known, "prefix_cache_frontier_known"),
)


# ---------------------------------------------------------------- speculative decoding


def scheduled_drafts_ignore_budget(A: Arith, p: rq.RequestParams, c: rq.RequestCounters, n: Any) -> Any:
    """Every draft the request holds counts as scheduled, even when the budget cut the step short."""
    return A.max(A.lit(0), c.num_spec_token_ids)


def after_schedule_one_placeholder(A: Arith, p: rq.RequestParams, c: rq.RequestCounters, n: Any,
                                   seq: Any, k: rq.Knobs) -> rq.RequestCounters:
    """A sampling step adds one placeholder, forgetting its drafts (H += 1, not 1 + drafts)."""
    out = _after_schedule(A, p, c, n, seq, k)
    if not k.async_scheduling:
        return out
    samples = A.not_(out.is_prefill_chunk)
    return out._replace(num_output_placeholders=c.num_output_placeholders + A.ite(samples, A.lit(1), A.lit(0)))


def deliver_decrements_trimmed(A: Arith, p: rq.RequestParams, c: rq.RequestCounters, is_stale: Any,
                               position: Any, num_accepted: Any, k: rq.Knobs) -> rq.RequestCounters:
    """H -= the tokens kept after trimming at a stop, not the untrimmed ``accepted + 1``."""
    out = _deliver_tokens(A, p, c, is_stale, position, num_accepted, k)
    trimmed = (out.num_output_tokens - c.num_output_tokens) - (num_accepted + 1)  # <= 0
    fresh_with_h = A.and_(A.not_(is_stale), c.num_output_placeholders > 0)
    return out._replace(num_output_placeholders=A.ite(
        fresh_with_h, out.num_output_placeholders - trimmed, out.num_output_placeholders))


DRAFT_MUTANTS: tuple[Mutant, ...] = (
    Mutant("scheduled_drafts_ignore_budget", "scheduled_drafts", scheduled_drafts_ignore_budget,
           "sampling_frames_hold_drafts"),
    Mutant("after_schedule_one_placeholder", "after_schedule", after_schedule_one_placeholder,
           "placeholders_count_sampling_steps"),
    Mutant("deliver_decrements_trimmed", "deliver_tokens", deliver_decrements_trimmed,
           "placeholders_le_in_flight"),
)
"""Draft-related mutants: caught by the spec-decode variants only (k = 0 schedules no drafts)."""

EQUIVALENT_DRAFT_MUTANTS = (
    "scheduled_drafts without the min(., S) clip: the guard n <= gap = N + S + H - C makes "
    "n + C - N - H <= S, so the clip never acts",
    "reject_drafts ignoring is_stale: deliver-mode stale output arrives only when C = H = 0 "
    "(not RUNNING) or the request is finished, so the C > 0 / H > 0 tests make it a no-op",
)
"""Tried and equivalent under the invariant (documented in docs/proofs.md)."""


# ---------------------------------------------------------------- SGLang's deferred abort


def defer_abort_finishes_at_once(A: Arith, c: rq.RequestCounters) -> rq.RequestCounters:
    """The deferred abort ends the request at once yet charges it the rows still in flight
    (as if every in-flight row of an aborted request were the deferred abort's extra row)."""
    return _defer_abort(A, c)._replace(status=A.lit(rq.FINISHED_ABORTED))


DEFERRED_ABORT_MUTANTS: tuple[Mutant, ...] = (
    Mutant("defer_abort_finishes_at_once", "defer_abort", defer_abort_finishes_at_once,
           "deferred_abort_wastes_one_step"),
)
"""Caught by the ``sglang-d2`` variant only (the others never defer an abort)."""
