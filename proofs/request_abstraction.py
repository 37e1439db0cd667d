"""The per-request abstraction: one request against an adversarial engine.

State (``AbsState``): one request's ``RequestParams`` (P >= 1, M >= 1,
eos_position >= 0, all unbounded) and ``RequestCounters`` exactly as in
``spec/request.py``, plus

* ``Ghost``: an exact summary of *this request's* in-flight frames (its
  entries in the batch queue, oldest first).  The frames scheduled before the
  last preemption form the *stale region* (a prefix of the queue), the others
  the *fresh region*.  Each region is summarised by its chunk frames (count,
  tokens) and sampling frames (count, tokens): ``scq/sct``, ``skq/skt``,
  ``cq/ct``, ``kq/kt``.  Two flags record when the "chunks before sampling
  frames" order of a region could be broken (``mixed``, ``smixed``); the
  invariant proves ``mixed`` never happens and that ``smixed`` only happens
  in drop mode, where the order does not matter.  Deferral ghosts: ``lo``
  (step seq of the oldest frame), ``pfence``/``plive`` (the latest parked free
  of this request and whether it is still parked), ``freed_at`` (the request's
  ``last_sched_seq`` at its latest free).  ``stale_touched`` records a stale
  frame that changed C or H.  Speculative decoding: ``kd``, the drafts
  scheduled in the fresh sampling frames (each samples 1 + drafts positions,
  so H = kq + kd); stale drafts are not summarised (they never touch C or H).
* ``Env``: what the request can see of the engine: the batch queue depth D
  (>= 2, unbounded, or exactly 2 in the ``d2`` variant, 1 when synchronous),
  the queue length, ``sched_step_seq`` Q, ``processed_step_seq`` R, the block
  size (>= 1) and the draft width k (>= 0, unbounded; spec-decode variants).

Actions (``ACTIONS``).  Every counter update CALLS ``spec/request.py``
through the module (``rq.<name>``), so a monkeypatched mutant is what is
proved; only the control flow of ``update_from_output``'s per-entry code
(``spec/output.process_entry``) is restated with ``A.ite``, and every CTI
replays it against the real ``process_entry``.

* ``admit``: pass 2 admits the request (WAITING/PREEMPTED, not a deliver-mode
  stale request, queue not full) with any 1 <= n <= N tokens (any budget).
* ``schedule``: pass 1 schedules it (RUNNING, guard not firing, no decode
  wait, any 1 <= n <= gap, queue not full).
* ``preempt_deliver`` / ``preempt_drop``: ``_preempt_request`` at any time
  while RUNNING (KV pressure from any other request, or ``reset_prefix_cache``).
* ``abort``: the client aborts it at any time while unfinished (``deferred_abort``: ``act_abort``).
* ``process_{stale,fresh}_{chunk,sample}``: its oldest frame is processed, in
  FIFO order.  Which class can be oldest is exact: stale before fresh, chunks
  before sampling frames within an ordered region (either class when the
  region may be mixed).  Size: any n0 with 1 <= n0 <= tokens - (frames - 1)
  of that class (exactly the class's tokens when it is its last frame).  Sampled position: any >= 1 (so EOS may or may not fire:
  an over-approximation of the deterministic token model).  With spec decode a
  sampling frame also has drafts ``d0`` (fresh: taken out of ``kd``, see
  ``_draft_guard``) of which the adversarial worker accepts any ``acc`` in
  0..d0: ``rq.reject_drafts`` then ``rq.deliver_tokens`` (acc + 1 tokens).
* ``env_schedule`` / ``env_process``: another request's (or an empty) step is
  scheduled / processed.  They change only the queue length and Q/R.

Soundness: the abstraction function maps an engine state and one request to
(params, counters, the summary of that request's frames, D, queue length, Q,
R).  Every concrete transition of the spec maps to an abstract action: steps
that schedule the request map to ``admit``/``schedule`` (others' entries in
the same step are irrelevant to its counters; a preemption inside the same
``schedule()`` call is an earlier ``preempt``); processing a step that holds
the request maps to ``process_*`` (the other entries of the step touch
other requests only); every other step maps to ``env_*`` or to nothing.
Each abstract guard is implied by the concrete enabling condition (it only
drops conditions, e.g. block availability, budget, max_num_seqs, FIFO
position in ``waiting``), and the nondeterministic choices range over every
value the concrete frame could have.  So every reachable concrete state is
abstracted by a reachable abstract state, and an invariant of the abstraction
holds of every request of every reachable engine state.
"""
from __future__ import annotations

from typing import Any, Callable, NamedTuple, cast

from asyncspec.spec import request as rq
from asyncspec.spec.algebra import Arith
from asyncspec.spec.request import Knobs, RequestCounters, RequestParams


class Variant(NamedTuple):
    """An engine setting the proof is done for (the knobs are Python constants)."""

    name: str
    defer_block_free: bool  # KV-consumer deferral of block frees
    depth_two: bool  # D == 2 (plain async, V1 runner) instead of any D >= 2
    spec_decode: bool = False  # k = num_spec_tokens is a symbolic Int >= 0 (else the literal 0)
    async_scheduling: bool = True  # AsyncScheduler, D >= 2 (else the synchronous Scheduler, D = 1)
    deferred_abort: bool = False  # abort_mode "deferred": SGLang's Req.to_finish (spec/engine.py abort)


VARIANTS: tuple[Variant, ...] = (
    Variant("async", False, False),
    Variant("async-d2", False, True),
    Variant("defer", True, False),
    Variant("async-spec", False, False, spec_decode=True),
    Variant("defer-spec", True, False, spec_decode=True),
    Variant("sync-spec", False, False, spec_decode=True, async_scheduling=False),
    Variant("sglang-d2", False, True, deferred_abort=True),
)
"""Proved variants: async, any depth; depth 2; deferral, any depth; with drafts of any width k >= 0:
async and deferral, any depth, and synchronous; SGLang's overlap loop (depth 2, deferred abort)."""


class Ghost(NamedTuple):
    """Exact summary of the request's in-flight frames, plus history ghosts."""

    scq: Any  # stale chunk frames
    sct: Any  # stale chunk tokens
    skq: Any  # stale sampling frames
    skt: Any  # stale sampling tokens
    cq: Any  # fresh chunk frames
    ct: Any  # fresh chunk tokens
    kq: Any  # fresh sampling frames
    kt: Any  # fresh sampling tokens
    kd: Any  # drafts scheduled in the fresh sampling frames (spec-decode variants)
    mixed: Any  # a fresh chunk frame was queued behind a fresh sampling frame
    smixed: Any  # the stale region may not be ordered chunks-then-samples
    lo: Any  # step seq of the oldest frame (deferral)
    pfence: Any  # fence of the latest parked free of this request (deferral)
    plive: Any  # that parked free is still parked
    freed_at: Any  # last_sched_seq when the request's blocks were last freed
    stale_touched: Any  # a stale frame changed C or H


class Env(NamedTuple):
    """The engine as the request sees it."""

    depth: Any  # D = max_concurrent_batches
    qlen: Any  # steps in the batch queue (all requests, empty ones too)
    sched_seq: Any  # Q = sched_step_seq
    processed_seq: Any  # R = processed_step_seq
    block_size: Any  # tokens per KV block
    num_spec: Any  # k = num_spec_tokens (used by the spec-decode variants only)


class AbsState(NamedTuple):
    """One abstract state."""

    p: RequestParams
    c: RequestCounters
    g: Ghost
    e: Env


class Choice(NamedTuple):
    """The nondeterministic inputs of one action."""

    n: Any  # tokens scheduled (admit/schedule)
    n0: Any  # size of the processed frame
    pos: Any  # output position sampled by the processed frame
    lo_next: Any  # seq of the next-oldest frame after a pop (deferral)
    nonempty: Any  # env step is non-empty (moves Q or R when deferring)
    d0: Any  # drafts of the processed sampling frame (spec-decode variants)
    acc: Any  # drafts the worker accepted of those (spec-decode variants)


Action = Callable[[Arith, Variant, AbsState, Choice], tuple[Any, AbsState]]

# ---------------------------------------------------------------- helpers


def knobs(v: Variant, s: AbsState) -> Knobs:
    """The knobs the spec functions read (no decode stagger, prefix caching on).

    k is the state's symbolic ``num_spec`` in the spec-decode variants, else 0."""
    k = s.e.num_spec if v.spec_decode else 0
    return Knobs(v.async_scheduling, v.defer_block_free, 1, s.e.block_size, True, k)


def implies(A: Arith, a: Any, b: Any) -> Any:
    """a => b."""
    return A.or_(A.not_(a), b)


def frames(g: Ghost) -> Any:
    """In-flight frames of the request."""
    return g.scq + g.skq + g.cq + g.kq


def stale_tokens(g: Ghost) -> Any:
    """Tokens of the stale region."""
    return g.sct + g.skt


def fresh_tokens(g: Ghost) -> Any:
    """Tokens of the fresh region."""
    return g.ct + g.kt


def unfinished(A: Arith, c: RequestCounters) -> Any:
    """WAITING, RUNNING or PREEMPTED."""
    return A.and_(c.status >= rq.WAITING, c.status <= rq.PREEMPTED)


def select(A: Arith, cond: Any, a: NamedTuple, b: NamedTuple) -> Any:
    """Fieldwise ``a if cond else b`` for two tuples of the same type."""
    return type(a)(*[A.ite(cond, x, y) for x, y in zip(a, b)])


def _free(A: Arith, v: Variant, c: RequestCounters, g: Ghost, e: Env) -> Ghost:
    """``_free_request_blocks``: free now if ``L <= R``, else park behind fence Q."""
    if not v.defer_block_free:
        return g
    can_free = c.last_sched_seq <= e.processed_seq
    return g._replace(
        freed_at=c.last_sched_seq,
        pfence=A.ite(can_free, g.pfence, e.sched_seq),
        plive=A.ite(can_free, g.plive, A.true()),
    )


def fresh_samples(v: Variant, g: Ghost) -> Any:
    """Sampled positions of the fresh sampling frames: 1 + drafts each (k = 0: the frame count)."""
    return g.kq + g.kd if v.spec_decode else g.kq


def _drafts(A: Arith, v: Variant, s: AbsState, c: RequestCounters, n: Any) -> Any:
    """``rq.scheduled_drafts`` of the step (as ``scheduler._entry``); None when k = 0."""
    return rq.scheduled_drafts(A, s.p, c, n) if v.spec_decode else None


def _append(A: Arith, v: Variant, s: AbsState, c2: RequestCounters, n: Any, drafts: Any = None) -> AbsState:
    """The step just scheduled holds one new frame of ``n`` tokens (``drafts`` of them drafts)."""
    g, e = s.g, s.e
    chunk = c2.is_prefill_chunk
    one = A.lit(1)
    zero = A.lit(0)
    g2 = g._replace(
        cq=g.cq + A.ite(chunk, one, zero),
        ct=g.ct + A.ite(chunk, n, zero),
        kq=g.kq + A.ite(chunk, zero, one),
        kt=g.kt + A.ite(chunk, zero, n),
        mixed=A.or_(g.mixed, A.and_(chunk, g.kq > 0)),
    )
    if drafts is not None:  # a chunk samples nothing: its drafts (always 0) are never verified
        g2 = g2._replace(kd=g.kd + A.ite(chunk, zero, drafts))
    e2 = e._replace(qlen=e.qlen + 1)
    if v.defer_block_free:
        seq = e.sched_seq + 1
        g2 = g2._replace(lo=A.ite(frames(g) == 0, seq, g.lo))
        e2 = e2._replace(sched_seq=seq)
    return AbsState(s.p, c2, g2, e2)


def _sched_seq(v: Variant, s: AbsState) -> Any:
    """The ``sched_step_seq`` the new step gets (raised first when deferring)."""
    return s.e.sched_seq + 1 if v.defer_block_free else s.e.sched_seq


# ---------------------------------------------------------------- scheduling


def act_admit(A: Arith, v: Variant, s: AbsState, ch: Choice) -> tuple[Any, AbsState]:
    """Pass 2 admits the request with ``n`` tokens (``rq.admit`` + ``rq.after_schedule``)."""
    p, c = s.p, s.c
    guard = A.and_(
        A.or_(c.status == rq.WAITING, c.status == rq.PREEMPTED),
        A.not_(A.and_(c.num_stale_output_tokens > 0, A.not_(c.drop_stale_output))),
        ch.n >= 1,
        ch.n <= rq.num_tokens(p, c),
        s.e.qlen < s.e.depth,
    )
    c1 = rq.admit(A, c, A.lit(0))
    c2 = rq.after_schedule(A, p, c1, ch.n, _sched_seq(v, s), knobs(v, s))
    return guard, _append(A, v, s, c2, ch.n, _drafts(A, v, s, c1, ch.n))


def act_schedule(A: Arith, v: Variant, s: AbsState, ch: Choice) -> tuple[Any, AbsState]:
    """Pass 1 schedules the running request with ``n`` tokens (any budget)."""
    p, c = s.p, s.c
    gap = rq.num_new_tokens(p, c)
    guard = A.and_(
        c.status == rq.RUNNING,
        A.not_(rq.max_tokens_guard(A, p, c)),
        c.decode_wait <= 0,
        ch.n >= 1,
        ch.n <= gap,
        s.e.qlen < s.e.depth,
    )
    c2 = rq.after_schedule(A, p, c, ch.n, _sched_seq(v, s), knobs(v, s))
    return guard, _append(A, v, s, c2, ch.n, _drafts(A, v, s, c, ch.n))


def _preempt(drop: bool) -> Action:
    def act(A: Arith, v: Variant, s: AbsState, ch: Choice) -> tuple[Any, AbsState]:
        g = s.g
        c2 = rq.preempt(A, s.c, A.true() if drop else A.false())
        zero = A.lit(0)
        merged = A.or_(g.smixed, g.mixed, A.and_(g.skq > 0, g.cq > 0))
        g2 = g._replace(
            scq=g.scq + g.cq, sct=g.sct + g.ct, skq=g.skq + g.kq, skt=g.skt + g.kt,
            cq=zero, ct=zero, kq=zero, kt=zero, mixed=A.false(),
            kd=zero if v.spec_decode else g.kd,
            smixed=A.and_(merged, stale_tokens(g) + fresh_tokens(g) > 0),
        )
        g2 = _free(A, v, s.c, g2, s.e)
        return s.c.status == rq.RUNNING, AbsState(s.p, c2, g2, s.e)

    act.__doc__ = f"``_preempt_request`` in {'drop' if drop else 'deliver'} mode: fresh frames become stale."
    return act


def act_abort(A: Arith, v: Variant, s: AbsState, ch: Choice) -> tuple[Any, AbsState]:
    """``finish_requests(FINISHED_ABORTED)``: status only; blocks freed (maybe parked).  ``deferred_abort``:
    once; a running request not mid-prefill gets ``rq.defer_abort`` (SGLang's ``Req.to_finish``)."""
    c2, g2 = rq.finish(A, s.c, A.lit(rq.FINISHED_ABORTED)), _free(A, v, s.c, s.g, s.e)
    if not v.deferred_abort:
        return unfinished(A, s.c), AbsState(s.p, c2, g2, s.e)
    defers = rq.abort_defers(A, s.c)
    return A.and_(unfinished(A, s.c), A.not_(s.c.abort_deferred)), AbsState(
        s.p, select(A, defers, rq.defer_abort(A, s.c), c2), select(A, defers, s.g, g2), s.e)


# ---------------------------------------------------------------- output processing


def process_entry(A: Arith, k: Knobs, p: RequestParams, c: RequestCounters, n: Any, position: Any,
                  drafts: Any = 0, accepted: Any = 0, deferred_abort: bool = False) -> RequestCounters:
    """``spec/output.process_entry`` with ``A.ite`` for its branches.

    ``position`` is 0 (a Python int) for a chunk frame.  ``drafts`` and
    ``accepted`` are the literal 0 without spec decode (``rq.deliver_token``,
    exactly the k = 0 encoding); otherwise terms: rejected drafts go through
    ``rq.reject_drafts`` (only when the frame has drafts, as ``if
    entry.num_drafts``) and ``accepted + 1`` tokens through ``rq.deliver_tokens``.
    """
    noted = rq.note_output_after_finish(A, c)
    drained, stale = rq.drain_in_flight(A, c, n)
    dropped = A.and_(stale, drained.drop_stale_output)
    delivered = drained
    if _is_zero(position):
        pass  # a non-final prefill chunk samples nothing
    elif _is_zero(drafts):
        delivered = rq.deliver_token(A, p, drained, stale, position, k)
    else:
        rejected = rq.reject_drafts(A, drained, drafts - accepted, stale)
        verified = select(A, drafts > 0, rejected, drained)
        delivered = rq.deliver_tokens(A, p, verified, stale, position, accepted, k)
    if deferred_abort and not _is_zero(position):  # SGLang's update_finish_state: to_finish first
        delivered = rq.honour_deferred_abort(A, delivered)
    return cast(RequestCounters, select(A, rq.is_finished(A, c), noted, select(A, dropped, drained, delivered)))


def _is_zero(x: Any) -> bool:
    """``x`` is the Python literal 0 (not a term)."""
    return isinstance(x, int) and not isinstance(x, bool) and x == 0


def _pop_ghost(A: Arith, g: Ghost, stale: bool, sample: bool, n0: Any, d0: Any = 0) -> Ghost:
    """The summary after the oldest frame (of the given class, ``n0`` tokens, ``d0`` drafts) left."""
    field_q, field_t = {(True, False): ("scq", "sct"), (True, True): ("skq", "skt"),
                        (False, False): ("cq", "ct"), (False, True): ("kq", "kt")}[(stale, sample)]
    g2 = g._replace(**{field_q: getattr(g, field_q) - 1, field_t: getattr(g, field_t) - n0})
    if not _is_zero(d0) and not stale:
        g2 = g2._replace(kd=g.kd - d0)
    return g2._replace(
        smixed=A.and_(g2.smixed, stale_tokens(g2) > 0),
        mixed=A.and_(g2.mixed, fresh_tokens(g2) > 0),
    )


def _draft_guard(A: Arith, g: Ghost, stale: bool, n0: Any, d0: Any, acc: Any) -> Any:
    """The processed sampling frame can hold ``d0`` drafts, ``acc`` of them accepted.

    Every sampling frame holds >= 1 + drafts tokens.  A fresh frame's drafts
    come out of the summary ``kd`` (all of it when it is the last fresh
    sampling frame; the rest must still fit the remaining frames); stale
    drafts are not summarised (they never touch C or H), so any ``d0`` that
    fits the frame is allowed.  The worker accepts any 0 <= acc <= d0.
    """
    conds = [d0 >= 0, acc >= 0, acc <= d0, n0 >= 1 + d0]
    if not stale:
        conds += [d0 <= g.kd, implies(A, g.kq == 1, d0 == g.kd),
                  g.kt - n0 >= (g.kq - 1) + (g.kd - d0)]
    return A.and_(*conds)


def _class_guard(A: Arith, g: Ghost, stale: bool, sample: bool, n0: Any) -> Any:
    """The oldest frame can be of this class and have ``n0`` tokens."""
    q, t = {(True, False): (g.scq, g.sct), (True, True): (g.skq, g.skt),
            (False, False): (g.cq, g.ct), (False, True): (g.kq, g.kt)}[(stale, sample)]
    conds = [q >= 1, n0 >= 1, n0 <= t - (q - 1), implies(A, q == 1, n0 == t)]
    conds.append(stale_tokens(g) > 0 if stale else stale_tokens(g) == 0)
    if sample:
        other, mixed = (g.scq, g.smixed) if stale else (g.cq, g.mixed)
        conds.append(A.or_(mixed, other == 0))
    return A.and_(*conds)


def _process(stale: bool, sample: bool) -> Action:
    def act(A: Arith, v: Variant, s: AbsState, ch: Choice) -> tuple[Any, AbsState]:
        p, c, g, e = s
        k = knobs(v, s)
        position = ch.pos if sample else 0
        with_drafts = sample and v.spec_decode
        d0, acc = (ch.d0, ch.acc) if with_drafts else (0, 0)
        conds = [_class_guard(A, g, stale, sample, ch.n0), e.qlen >= 1]
        if sample:
            conds.append(ch.pos >= 1)
        if with_drafts:
            conds.append(_draft_guard(A, g, stale, ch.n0, d0, acc))
        g2 = _pop_ghost(A, g, stale, sample, ch.n0, d0)
        e2 = e._replace(qlen=e.qlen - 1)
        if v.defer_block_free:
            r2 = g.lo
            conds.append(e.processed_seq + 1 == g.lo)
            conds.append(implies(A, frames(g2) > 0, A.and_(
                ch.lo_next > g.lo, ch.lo_next <= c.last_sched_seq,
                frames(g2) - 1 <= c.last_sched_seq - ch.lo_next,
                implies(A, frames(g2) == 1, ch.lo_next == c.last_sched_seq))))
            e2 = e2._replace(processed_seq=r2)
            g2 = g2._replace(lo=A.ite(frames(g2) > 0, ch.lo_next, g.lo),
                             plive=A.and_(g.plive, A.not_(g.pfence <= r2)))
        c2 = process_entry(A, k, p, c, ch.n0, position, d0, acc, v.deferred_abort)
        newly_finished = A.and_(A.not_(rq.is_finished(A, c)), rq.is_finished(A, c2))
        g2 = select(A, newly_finished, _free(A, v, c2, g2, e2), g2)
        if stale:
            touched = A.or_(c2.num_computed_tokens != c.num_computed_tokens,
                            c2.num_output_placeholders != c.num_output_placeholders)
            g2 = g2._replace(stale_touched=A.or_(g.stale_touched, touched))
        return A.and_(*conds), AbsState(p, c2, g2, e2)

    act.__doc__ = (f"``update_from_output`` for the oldest frame: a {'stale' if stale else 'fresh'} "
                   f"{'sampling frame' if sample else 'prefill chunk'}.")
    return act


# ---------------------------------------------------------------- environment


def act_env_schedule(A: Arith, v: Variant, s: AbsState, ch: Choice) -> tuple[Any, AbsState]:
    """A step without this request is scheduled (empty or not)."""
    e = s.e
    e2 = e._replace(qlen=e.qlen + 1)
    if v.defer_block_free:
        e2 = e2._replace(sched_seq=e.sched_seq + A.ite(ch.nonempty, A.lit(1), A.lit(0)))
    return e.qlen < e.depth, s._replace(e=e2)


def act_env_process(A: Arith, v: Variant, s: AbsState, ch: Choice) -> tuple[Any, AbsState]:
    """The oldest step holds no frame of this request: it is processed (R moves if non-empty)."""
    g, e = s.g, s.e
    conds = [e.qlen > frames(g)]
    e2 = e._replace(qlen=e.qlen - 1)
    g2 = g
    if v.defer_block_free:
        nonempty_ok = A.and_(e.sched_seq - e.processed_seq > frames(g),
                             implies(A, frames(g) > 0, e.processed_seq + 1 < g.lo))
        conds.append(A.ite(ch.nonempty, nonempty_ok, e.qlen > e.sched_seq - e.processed_seq))
        r2 = e.processed_seq + A.ite(ch.nonempty, A.lit(1), A.lit(0))
        e2 = e2._replace(processed_seq=r2)
        g2 = g._replace(plive=A.and_(g.plive, A.not_(g.pfence <= r2)))
    return A.and_(*conds), AbsState(s.p, s.c, g2, e2)


ACTIONS: dict[str, Action] = {
    "admit": act_admit,
    "schedule": act_schedule,
    "preempt_deliver": _preempt(False),
    "preempt_drop": _preempt(True),
    "abort": act_abort,
    "process_stale_chunk": _process(True, False),
    "process_stale_sample": _process(True, True),
    "process_fresh_chunk": _process(False, False),
    "process_fresh_sample": _process(False, True),
    "env_schedule": act_env_schedule,
    "env_process": act_env_process,
}
"""Every abstract action, in a fixed order."""


# ---------------------------------------------------------------- initial states and domain


def domain(A: Arith, v: Variant, s: AbsState) -> Any:
    """Constraints on constants: P, M >= 1, eos >= 0, block size >= 1, D >= 2 (== 2 for d2,
    == 1 for the synchronous variant), k >= 0 (spec-decode variants; no upper bound)."""
    p, e = s.p, s.e
    depth = e.depth == 2 if v.depth_two else e.depth >= 2
    conds = [p.num_prompt_tokens >= 1, p.max_tokens >= 1, p.eos_position >= 0, e.block_size >= 1]
    if not v.async_scheduling:
        depth = e.depth == 1
    if v.spec_decode:
        conds.append(e.num_spec >= 0)
    return A.and_(*conds, depth)


def initial(A: Arith, v: Variant, s: AbsState) -> Any:
    """The request has just been added (``initial_counters``); the engine is anywhere."""
    init = rq.initial_counters(A, rq.WAITING)
    g, e = s.g, s.e
    conds = [x == y for x, y in zip(s.c, init)]
    zero = [g.scq, g.sct, g.skq, g.skt, g.cq, g.ct, g.kq, g.kt, g.pfence, g.freed_at]
    if v.spec_decode:
        zero.append(g.kd)
    conds += [x == 0 for x in zero]
    conds += [A.not_(g.mixed), A.not_(g.smixed), A.not_(g.plive), A.not_(g.stale_touched)]
    conds += [e.qlen >= 0, e.qlen <= e.depth]
    if v.defer_block_free:
        conds += [e.processed_seq >= 0, e.processed_seq <= e.sched_seq,
                  e.sched_seq - e.processed_seq <= e.qlen]
    else:
        conds += [e.sched_seq == 0, e.processed_seq == 0]
    return A.and_(*conds)
