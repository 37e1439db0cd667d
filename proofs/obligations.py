"""The inductive invariant: the spec's counter properties plus strengthening lemmas.

Each ``Invariant`` is a function of one abstract state written against
``Arith`` (so it is evaluated on z3 terms by the prover and on ints by the
CTI replay).  ``kind`` is ``"property"`` (what is claimed) or ``"lemma"``
(what was needed to make the conjunction inductive; ``why`` says for which
obligation).  Obligations, mypyvy style, one z3 query each:

* ``init x I``: Domain /\\ Init => I;
* ``a x I`` for every action a: Domain /\\ Inv /\\ guard_a => I(post_a);
* ``safety x P`` for every property P: Domain /\\ Inv => P.
"""
from __future__ import annotations

from typing import Any, Callable, NamedTuple

from asyncspec.spec import request as rq
from asyncspec.spec.algebra import Arith

from asyncspec.proofs.request_abstraction import (
    AbsState, Variant, frames, fresh_samples, fresh_tokens, implies, stale_tokens, unfinished,
)

Formula = Callable[[Arith, Variant, AbsState], Any]


class Invariant(NamedTuple):
    """One conjunct of the inductive invariant."""

    name: str
    kind: str  # "property" or "lemma"
    formula: Formula
    applies: Callable[[Variant], bool]
    why: str


def _all(v: Variant) -> bool:
    return True


def _d2(v: Variant) -> bool:
    return v.depth_two


def _defer(v: Variant) -> bool:
    return v.defer_block_free


def _async(v: Variant) -> bool:
    return v.async_scheduling


def _no_spec(v: Variant) -> bool:
    return not v.spec_decode


def _spec(v: Variant) -> bool:
    return v.spec_decode


def _sync_spec(v: Variant) -> bool:
    return v.spec_decode and not v.async_scheduling


def _deferred_abort(v: Variant) -> bool:
    return v.deferred_abort


def _running(c: rq.RequestCounters) -> Any:
    return c.status == rq.RUNNING


# ---------------------------------------------------------------- properties


def placeholders_nonnegative(A: Arith, v: Variant, s: AbsState) -> Any:
    return s.c.num_output_placeholders >= 0


def stale_nonnegative(A: Arith, v: Variant, s: AbsState) -> Any:
    return s.c.num_stale_output_tokens >= 0


def placeholders_le_in_flight(A: Arith, v: Variant, s: AbsState) -> Any:
    return s.c.num_output_placeholders <= s.c.num_in_flight_tokens


def stale_le_in_flight(A: Arith, v: Variant, s: AbsState) -> Any:
    return s.c.num_stale_output_tokens <= s.c.num_in_flight_tokens


def computed_minus_placeholders(A: Arith, v: Variant, s: AbsState) -> Any:
    c = s.c
    return implies(A, A.and_(_running(c), A.not_(c.is_prefill_chunk)),
                   c.num_computed_tokens - c.num_output_placeholders == rq.num_tokens(s.p, c) - 1)


def placeholders_count_sampling_steps(A: Arith, v: Variant, s: AbsState) -> Any:
    expect = fresh_samples(v, s.g) if v.async_scheduling else A.lit(0)
    return implies(A, unfinished(A, s.c), s.c.num_output_placeholders == expect)


def output_within_max_tokens(A: Arith, v: Variant, s: AbsState) -> Any:
    return s.c.num_output_tokens <= s.p.max_tokens


def no_wasted_step_on_max_tokens(A: Arith, v: Variant, s: AbsState) -> Any:
    return implies(A, s.c.status == rq.FINISHED_LENGTH_CAPPED,
                   A.and_(s.c.num_wasted_steps == 0, frames(s.g) == 0))


def stale_output_keeps_counters(A: Arith, v: Variant, s: AbsState) -> Any:
    return A.not_(s.g.stale_touched)


def prefix_cache_frontier_known(A: Arith, v: Variant, s: AbsState) -> Any:
    return s.c.num_cached_tokens <= rq.num_tokens(s.p, s.c)


def output_caching_kv_written(A: Arith, v: Variant, s: AbsState) -> Any:
    c = s.c
    return implies(A, A.and_(_running(c), c.num_stale_output_tokens == 0),
                   c.output_cached_tokens <= c.num_computed_tokens - c.num_in_flight_tokens)


def deferred_abort_wastes_one_step(A: Arith, v: Variant, s: AbsState) -> Any:
    c = s.c
    return implies(A, A.and_(c.status == rq.FINISHED_ABORTED, c.abort_deferred),
                   c.num_wasted_steps + frames(s.g) <= 1)


def last_sched_seq_bounded(A: Arith, v: Variant, s: AbsState) -> Any:
    return A.and_(s.c.last_sched_seq <= s.e.sched_seq, s.e.processed_seq <= s.e.sched_seq)


def spec_tokens_bounded(A: Arith, v: Variant, s: AbsState) -> Any:
    s_ = s.c.num_spec_token_ids
    return A.and_(s_ >= 0, s_ <= s.e.num_spec)


def parked_blocks_fenced(A: Arith, v: Variant, s: AbsState) -> Any:
    g, e = s.g, s.e
    return implies(A, e.processed_seq < g.freed_at, A.and_(g.plive, g.pfence >= g.freed_at))


# ---------------------------------------------------------------- lemmas


def status_valid(A: Arith, v: Variant, s: AbsState) -> Any:
    return A.and_(s.c.status >= rq.WAITING, s.c.status <= rq.FINISHED_ABORTED)


def no_drafts_without_spec_decode(A: Arith, v: Variant, s: AbsState) -> Any:
    return s.c.num_spec_token_ids == 0


def spec_tokens_shape(A: Arith, v: Variant, s: AbsState) -> Any:
    c, k = s.c, s.e.num_spec
    decoding = A.and_(_running(c), A.not_(c.is_prefill_chunk))
    if v.async_scheduling:
        shape = c.num_spec_token_ids == A.ite(decoding, k, A.lit(0))
    else:
        shape = A.or_(c.num_spec_token_ids == 0, A.and_(c.num_spec_token_ids == k, decoding))
    return implies(A, unfinished(A, c), shape)


def sampling_frames_hold_drafts(A: Arith, v: Variant, s: AbsState) -> Any:
    g = s.g
    return A.and_(g.kd >= 0, g.kq + g.kd <= g.kt)


def sync_computed_ahead(A: Arith, v: Variant, s: AbsState) -> Any:
    c = s.c
    return implies(A, A.and_(_running(c), A.not_(c.is_prefill_chunk)),
                   c.num_computed_tokens == rq.num_tokens(s.p, c) - 1 + fresh_samples(v, s.g))


def frames_wellformed(A: Arith, v: Variant, s: AbsState) -> Any:
    g = s.g
    pairs = [(g.scq, g.sct), (g.skq, g.skt), (g.cq, g.ct), (g.kq, g.kt)]
    return A.and_(*[A.and_(q >= 0, q <= t, implies(A, q == 0, t == 0)) for q, t in pairs],
                  implies(A, g.smixed, stale_tokens(g) > 0))


def in_flight_is_frames(A: Arith, v: Variant, s: AbsState) -> Any:
    c, g = s.c, s.g
    return implies(A, unfinished(A, c), A.and_(
        c.num_in_flight_tokens == stale_tokens(g) + fresh_tokens(g),
        c.num_stale_output_tokens == stale_tokens(g)))


def fresh_frames_ordered(A: Arith, v: Variant, s: AbsState) -> Any:
    return A.not_(s.g.mixed)


def mixed_stale_is_dropped(A: Arith, v: Variant, s: AbsState) -> Any:
    return implies(A, s.g.smixed, s.c.drop_stale_output)


def deliver_mode_stale_waits(A: Arith, v: Variant, s: AbsState) -> Any:
    c, g = s.c, s.g
    return implies(A, A.and_(c.num_stale_output_tokens > 0, A.not_(c.drop_stale_output)),
                   A.and_(c.status != rq.RUNNING, g.cq + g.kq == 0))


def not_running_is_reset(A: Arith, v: Variant, s: AbsState) -> Any:
    c, g = s.c, s.g
    return implies(A, A.or_(c.status == rq.WAITING, c.status == rq.PREEMPTED), A.and_(
        c.num_computed_tokens == 0, c.num_output_placeholders == 0, g.cq + g.kq == 0,
        c.num_cached_tokens == 0, c.output_cached_tokens == 0))


def running_shape(A: Arith, v: Variant, s: AbsState) -> Any:
    c, g = s.c, s.g
    return implies(A, _running(c), A.and_(
        c.num_computed_tokens >= fresh_tokens(g),
        implies(A, g.kq > 0, A.not_(c.is_prefill_chunk)),
        implies(A, c.is_prefill_chunk, A.and_(g.kq == 0, c.num_computed_tokens < rq.num_tokens(s.p, c)))))


def stale_output_not_cached(A: Arith, v: Variant, s: AbsState) -> Any:
    c = s.c
    return implies(A, A.and_(unfinished(A, c), c.num_stale_output_tokens > 0), c.output_cached_tokens == 0)


def unfinished_below_max_tokens(A: Arith, v: Variant, s: AbsState) -> Any:
    return implies(A, unfinished(A, s.c), s.c.num_output_tokens < s.p.max_tokens)


def unfinished_not_wasted(A: Arith, v: Variant, s: AbsState) -> Any:
    return implies(A, unfinished(A, s.c), s.c.num_wasted_steps == 0)


def frames_fit_queue(A: Arith, v: Variant, s: AbsState) -> Any:
    return A.and_(frames(s.g) <= s.e.qlen, s.e.qlen <= s.e.depth)


def max_tokens_headroom(A: Arith, v: Variant, s: AbsState) -> Any:
    c, g, m = s.c, s.g, s.p.max_tokens
    return A.and_(
        implies(A, _running(c), c.num_output_tokens + g.kq <= m),
        implies(A, A.and_(unfinished(A, c), A.not_(c.drop_stale_output)), c.num_output_tokens + g.skq <= m))


def step_seqs_ordered(A: Arith, v: Variant, s: AbsState) -> Any:
    c, g, e = s.c, s.g, s.e
    L, Q, R = c.last_sched_seq, e.sched_seq, e.processed_seq
    return A.and_(
        Q - R <= e.qlen, frames(g) <= Q - R,
        implies(A, frames(g) > 0, A.and_(R < g.lo, g.lo <= L, frames(g) <= L - g.lo + 1)),
        implies(A, frames(g) == 1, g.lo == L),
        implies(A, frames(g) == 0, L <= R),
        g.freed_at <= L, g.pfence <= Q,
        implies(A, g.plive, R < g.pfence))


INVARIANTS: tuple[Invariant, ...] = (
    Invariant("placeholders_nonnegative", "property", placeholders_nonnegative, _all,
              "num_output_placeholders >= 0"),
    Invariant("stale_nonnegative", "property", stale_nonnegative, _all, "num_stale_output_tokens >= 0"),
    Invariant("placeholders_le_in_flight", "property", placeholders_le_in_flight, _all, "H <= F"),
    Invariant("stale_le_in_flight", "property", stale_le_in_flight, _all, "X <= F"),
    Invariant("computed_minus_placeholders", "property", computed_minus_placeholders, _async,
              "RUNNING, not mid-prefill: C - H = N - 1"),
    Invariant("placeholders_count_sampling_steps", "property", placeholders_count_sampling_steps, _all,
              "unfinished: H = sampled positions (1 + drafts each) of the fresh sampling frames in flight "
              "(0 when synchronous)"),
    Invariant("output_within_max_tokens", "property", output_within_max_tokens, _all, "O <= M"),
    Invariant("no_wasted_step_on_max_tokens", "property", no_wasted_step_on_max_tokens, _d2,
              "LENGTH_CAPPED: no step in flight and no wasted step (the guard); D = 2 only"),
    Invariant("stale_output_keeps_counters", "property", stale_output_keeps_counters, _all,
              "a stale frame (dropped or delivered) never changes C or H"),
    Invariant("prefix_cache_frontier_known", "property", prefix_cache_frontier_known, _all,
              "num_cached_tokens <= num_tokens"),
    Invariant("output_caching_kv_written", "property", output_caching_kv_written, _all,
              "RUNNING, no stale output: output-time frontier <= C - F"),
    Invariant("last_sched_seq_bounded", "property", last_sched_seq_bounded, _defer,
              "L <= Q and R <= Q"),
    Invariant("spec_tokens_bounded", "property", spec_tokens_bounded, _spec,
              "0 <= S <= k: a request never holds more draft placeholders than the draft width"),
    Invariant("parked_blocks_fenced", "property", parked_blocks_fenced, _defer,
              "while a step of the request scheduled before its free is unprocessed (R < L at the free), "
              "its blocks stay parked behind a fence >= that step"),
    Invariant("deferred_abort_wastes_one_step", "property", deferred_abort_wastes_one_step, _deferred_abort,
              "ended by SGLang's deferred abort: wasted steps + its steps still in flight <= 1 = D - 1 "
              "(the row scheduled after the abort; wasted_steps_bounded for D = 2)"),
    Invariant("status_valid", "lemma", status_valid, _all,
              "the abstraction's status is a spec status (NOT_ARRIVED is before the request exists)"),
    Invariant("no_drafts_without_spec_decode", "lemma", no_drafts_without_spec_decode, _no_spec,
              "the proved variants have k = 0: spec_token_ids stays empty, so the gap is N + H - C"),
    Invariant("spec_tokens_shape", "lemma", spec_tokens_shape, _spec,
              "unfinished: S = k exactly while decoding (async: set by every sampling step; sync: by the "
              "last fresh delivery), else 0; makes the gap 1 + k and a decode frame 1 + drafts tokens"),
    Invariant("sampling_frames_hold_drafts", "lemma", sampling_frames_hold_drafts, _spec,
              "each fresh sampling frame holds >= 1 + drafts tokens (kd >= 0, kq + kd <= kt): needed "
              "for H <= F and for C >= fresh tokens after a rejection"),
    Invariant("sync_computed_ahead", "lemma", sync_computed_ahead, _sync_spec,
              "synchronous, decoding: C = N - 1 + sampled positions in flight (there is no H to "
              "subtract); gives the gap 1 + S and rolls back exactly with rejections"),
    Invariant("frames_wellformed", "lemma", frames_wellformed, _all,
              "every frame holds >= 1 token; needed for H <= F and X <= F after a pop"),
    Invariant("in_flight_is_frames", "lemma", in_flight_is_frames, _all,
              "F and X are the token sums of all / stale frames: the lockstep drain stays in sync"),
    Invariant("fresh_frames_ordered", "lemma", fresh_frames_ordered, _all,
              "no prefill chunk is queued behind a sampling frame: the pop order of the abstraction is exact"),
    Invariant("mixed_stale_is_dropped", "lemma", mixed_stale_is_dropped, _all,
              "a stale region merged over two preemptions is only ever dropped"),
    Invariant("deliver_mode_stale_waits", "lemma", deliver_mode_stale_waits, _all,
              "deliver-mode stale output: the request is not RUNNING and has no fresh frame (vLLM I6)"),
    Invariant("not_running_is_reset", "lemma", not_running_is_reset, _all,
              "WAITING/PREEMPTED: C = H = 0, no fresh frames, frontiers 0 (admission starts clean)"),
    Invariant("running_shape", "lemma", running_shape, _all,
              "RUNNING: C covers the fresh frames; a prefill chunk has no sampling frame behind it"),
    Invariant("stale_output_not_cached", "lemma", stale_output_not_cached, _all,
              "output-time caching happens only after the stale frames drained"),
    Invariant("unfinished_below_max_tokens", "lemma", unfinished_below_max_tokens, _all,
              "an unfinished request has O < M, so the next token keeps O <= M"),
    Invariant("unfinished_not_wasted", "lemma", unfinished_not_wasted, _d2,
              "wasted steps are counted only after the request finished"),
    Invariant("frames_fit_queue", "lemma", frames_fit_queue, _all,
              "the request's frames are steps of the batch queue, which holds at most D"),
    Invariant("max_tokens_headroom", "lemma", max_tokens_headroom, _d2,
              "in-flight sampled positions never pass M (the guard at D = 2)"),
    Invariant("step_seqs_ordered", "lemma", step_seqs_ordered, _defer,
              "the request's frames have seqs in (R, L], consecutive non-empty steps; a free fences Q >= L"),
)
"""The inductive invariant (filtered per variant with ``applies``)."""


def invariants_for(v: Variant) -> tuple[Invariant, ...]:
    """The conjuncts that apply to variant ``v``."""
    return tuple(i for i in INVARIANTS if i.applies(v))


def conjunction(A: Arith, v: Variant, s: AbsState, invs: tuple[Invariant, ...]) -> Any:
    """Inv(s): every conjunct."""
    return A.and_(*[i.formula(A, v, s) for i in invs])
