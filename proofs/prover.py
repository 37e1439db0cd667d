"""Discharge the obligations with z3; turn counterexamples into replayed CTIs.

One z3 query per obligation, with a fixed random seed and a per-query timeout.
A satisfiable query gives a CTI: its pre-state (ints) is replayed with
``CONCRETE`` arithmetic, through the abstract action *and* through the real
spec code (``spec/scheduler.py``, ``spec/output.py``, ``spec/engine.py`` on a
one-request engine state): the pre-state must satisfy the invariant, the
action must be enabled, both successors must agree with z3's, and the
successor must violate the invariant.  Otherwise ``EncoderBug`` is raised.
"""
from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any
from unittest import mock

import z3
from rich.table import Table

from asyncspec.checker import interrupt
from asyncspec.spec import engine, output, request as rq, scheduler
from asyncspec.spec.algebra import CONCRETE
from asyncspec.spec.config import SpecConfig
from asyncspec.spec.draft import Draft
from asyncspec.spec.request import RequestCounters, RequestParams
from asyncspec.spec.state import Step, StepEntry

from asyncspec.proofs.request_abstraction import (
    ACTIONS, AbsState, Action, Choice, Env, Ghost, VARIANTS, Variant, domain, initial,
)
from asyncspec.proofs.obligations import Invariant, conjunction, invariants_for
from asyncspec.proofs.z3arith import Z3

SEED = 0
DEFAULT_TIMEOUT_MS = 10_000
BOOL_FIELDS = {"drop_stale_output", "is_prefill_chunk", "output_out_of_order", "abort_deferred",
               "mixed", "smixed", "plive", "stale_touched", "nonempty"}


class EncoderBug(AssertionError):
    """A z3 counterexample that does not replay on the concrete spec."""


@dataclass
class Cti:
    """A counterexample to induction, replayed."""

    variant: str
    action: str
    invariant: str
    pre: AbsState
    post: AbsState
    choice: Choice

    def table(self) -> Table:
        """The two-state table (pre/post)."""
        return cti_table(self)


@dataclass
class Outcome:
    """The result of one obligation."""

    variant: str
    action: str
    invariant: str
    result: str  # "proved", "cti" or "unknown"
    seconds: float
    cti: Cti | None = None


@dataclass
class Report:
    """All outcomes of one run."""

    outcomes: list[Outcome] = field(default_factory=list)
    interrupted: bool = False  # Ctrl-C or SIGTERM: the obligations after the last outcome were not run
    total: int = 0  # obligations selected

    @property
    def ok(self) -> bool:
        return bool(self.outcomes) and not self.interrupted and all(o.result == "proved" for o in self.outcomes)

    @property
    def ctis(self) -> list[Cti]:
        return [o.cti for o in self.outcomes if o.cti is not None]


# ---------------------------------------------------------------- symbolic states


def _var(name: str, field_name: str) -> Any:
    return z3.Bool(name) if field_name in BOOL_FIELDS else z3.Int(name)


def symbolic_state(prefix: str) -> AbsState:
    """Fresh z3 constants for every field of an abstract state."""
    def make(cls: Any, part: str) -> Any:
        return cls(*[_var(f"{prefix}{part}.{f}", f) for f in cls._fields])

    return AbsState(make(RequestParams, "p"), make(RequestCounters, "c"), make(Ghost, "g"), make(Env, "e"))


def symbolic_choice() -> Choice:
    """Fresh z3 constants for the nondeterministic inputs."""
    return Choice(*[_var(f"choice.{f}", f) for f in Choice._fields])


def _solver(timeout_ms: int) -> z3.Solver:
    s = z3.Solver()
    s.set("random_seed", SEED)
    s.set("timeout", timeout_ms)
    s.set("ctrl_c", False)  # z3's own SIGINT handler would swallow Ctrl-C (checker/interrupt.py handles it)
    return s


def _value(model: z3.ModelRef, term: Any) -> Any:
    if isinstance(term, (bool, int)):
        return term
    v = model.eval(term, model_completion=True)
    if z3.is_bool(v):
        return z3.is_true(v)
    return v.as_long()


def concrete(model: z3.ModelRef, x: Any) -> Any:
    """Evaluate a tuple of terms (nested NamedTuples) in ``model``."""
    if isinstance(x, tuple):
        return type(x)(*[concrete(model, y) for y in x])
    return _value(model, x)


# ---------------------------------------------------------------- replay


def _concrete_bool(x: Any) -> bool:
    return bool(x)


def _cfg(v: Variant, s: AbsState) -> SpecConfig:
    """A one-request config with the CTI's constants.

    The checker's bound ``num_speculative_tokens <= 4`` is a state-space limit,
    not part of the semantics, so a CTI with a larger k sets it past validation.
    """
    p = s.p
    bs = s.e.block_size
    k = s.e.num_spec if v.spec_decode else 0
    depth = 2 if v.async_scheduling else 1
    need = -(-(p.num_prompt_tokens + p.max_tokens + (depth + 1) * k) // bs)  # validate(), lookahead k
    cfg = SpecConfig(name="cti", requests=((p.num_prompt_tokens, p.max_tokens),),
                     batch_queue_depth=2 if v.async_scheduling else 1,
                     block_size=bs, num_blocks=max(need, 1), defer_block_free=v.defer_block_free,
                     decode_stagger=1, enable_prefix_caching=True, num_speculative_tokens=min(k, 4),
                     stale_mode="drop" if v.deferred_abort else "deliver",
                     abort_mode="deferred" if v.deferred_abort else "immediate")
    object.__setattr__(cfg, "num_speculative_tokens", k)
    return cfg


def _draft(s: AbsState, free: int, hold: int = 0) -> Draft:
    """A one-request engine holding blocks for its computed tokens (at least ``hold``
    tokens), ``free`` blocks spare."""
    running = [0] if s.c.status == rq.RUNNING else []
    waiting = [0] if s.c.status in (rq.WAITING, rq.PREEMPTED) else []
    held = tuple(range(free, free + -(-max(s.c.num_computed_tokens, hold) // s.e.block_size)))
    return Draft(params=(s.p,), counters=[s.c], block_tables=[held], waiting=waiting, running=running,
                 batch_queue=[], deferred_step=None, free_blocks=list(range(free)), block_hashes=[None] * (free + len(held)),
                 deferred_frees=[], sched_step_seq=s.e.sched_seq, processed_step_seq=s.e.processed_seq,
                 finished_pending=False, forced_preemptions_left=0)


def spec_successor(v: Variant, action: str, s: AbsState, ch: Choice) -> tuple[RequestCounters, int]:
    """The request's counters after ``action``, computed by the real (concrete) spec code,
    and the drafts of the step entry it scheduled (0 for other actions)."""
    cfg = _cfg(v, s)
    if action in ("schedule", "admit"):
        d = _draft(s, cfg.blocks_for(s.c.num_computed_tokens + ch.n + rq.num_tokens(s.p, s.c)) + 1)
        out: list[tuple[int, int]] = []
        if action == "schedule":
            scheduler.schedule_running(cfg, d, ch.n, out)
        else:
            scheduler.schedule_waiting(cfg, d, ch.n, out)
        if out != [(0, ch.n)]:
            raise EncoderBug(f"{action} with n={ch.n} is not what the spec schedules ({out})")
        if cfg.defer_block_free:
            d.sched_step_seq += 1
        entry = scheduler._entry(cfg, d, 0, ch.n)
        return d.counters[0], 0 if d.counters[0].is_prefill_chunk else entry.num_drafts
    if action.startswith("preempt"):
        d = _draft(s, 0)
        d.running = []
        scheduler.preempt_request(cfg, d, 0, drop=action.endswith("drop"))
        return d.counters[0], 0
    if action == "abort":
        state, _ = engine.abort(cfg, _draft(s, 0).freeze(), 0)
        return state.counters[0], 0
    if action.startswith("process"):
        return _spec_process(v, action, s, ch, cfg), 0
    return s.c, 0  # env actions leave the request alone


def _spec_process(v: Variant, action: str, s: AbsState, ch: Choice, cfg: SpecConfig) -> RequestCounters:
    """``output.update_from_output`` on a queue whose oldest step is the CTI's frame."""
    sample = action.endswith("sample")
    position = ch.pos if sample else 0
    drafts = ch.d0 if sample and v.spec_decode else 0
    accepted = ch.acc if drafts else 0
    hold = max(s.c.num_cached_tokens, rq.num_tokens(s.p, s.c)) + accepted + 1  # blocks to hash into
    d = _draft(s, 0, hold)
    entry = StepEntry(0, ch.n0, position, (), num_drafts=drafts)
    d.batch_queue = [Step((entry,), s.g.lo if v.defer_block_free else 0)]
    state, _ = output.update_from_output(cfg, d.freeze(), accepted=(accepted,))
    return state.counters[0]


def _abstract_drafts(v: Variant, pre: AbsState, post: AbsState, action: str) -> int:
    """Drafts the abstract action added to the fresh sampling frames."""
    if not v.spec_decode or action not in ("schedule", "admit"):
        return 0
    return int(post.g.kd - pre.g.kd)


def replay(v: Variant, name: str, act: Action, inv: Invariant, invs: tuple[Invariant, ...],
           pre: AbsState, ch: Choice, z3_post: AbsState) -> Cti:
    """Check a CTI on the concrete spec; ``EncoderBug`` if it does not replay."""
    A = CONCRETE
    where = f"[{v.name}] {name} x {inv.name}"
    if not _concrete_bool(domain(A, v, pre)) or not _concrete_bool(conjunction(A, v, pre, invs)):
        bad = [i.name for i in invs if not _concrete_bool(i.formula(A, v, pre))]
        raise EncoderBug(f"{where}: the CTI pre-state violates the invariant concretely ({bad})")
    guard, post = act(A, v, pre, ch)
    if not _concrete_bool(guard):
        raise EncoderBug(f"{where}: the action is not enabled on the concrete pre-state")
    if post != z3_post:
        raise EncoderBug(f"{where}: z3's successor {z3_post} differs from the concrete one {post}")
    spec_post, spec_drafts = spec_successor(v, name, pre, ch)
    if spec_post != post.c:
        raise EncoderBug(f"{where}: the abstract action gives {post.c}, the spec gives {spec_post}")
    if spec_drafts != _abstract_drafts(v, pre, post, name):
        raise EncoderBug(f"{where}: the spec's step entry has {spec_drafts} drafts, the abstraction "
                         f"{_abstract_drafts(v, pre, post, name)}")
    if _concrete_bool(inv.formula(A, v, post)):
        raise EncoderBug(f"{where}: the concrete successor satisfies the invariant")
    return Cti(v.name, name, inv.name, pre, post, ch)


# ---------------------------------------------------------------- queries


def _check(solver: z3.Solver) -> tuple[str, z3.ModelRef | None]:
    r = solver.check()
    if r == z3.unsat:
        return "proved", None
    if r == z3.sat:
        return "cti", solver.model()
    return "unknown", None


@dataclass
class VariantTerms:
    """The z3 terms of one variant, built once per ``prove`` call and shared by its queries.

    The state, the domain, the invariant and each action's (guard, successor)
    are the same formula in every obligation of the variant; building them
    once keeps the wall time to the solver's (terms are immutable, so sharing
    them changes no query).
    """

    variant: Variant
    invs: tuple[Invariant, ...]
    actions: dict[str, Action]
    state: AbsState = field(default_factory=lambda: symbolic_state(""))
    choice: Choice = field(default_factory=symbolic_choice)
    _dom: Any = None
    _inv: Any = None
    _steps: dict[str, tuple[Any, AbsState]] = field(default_factory=dict)

    @property
    def dom(self) -> Any:
        if self._dom is None:
            self._dom = domain(Z3, self.variant, self.state)
        return self._dom

    @property
    def inv(self) -> Any:
        if self._inv is None:
            self._inv = conjunction(Z3, self.variant, self.state, self.invs)
        return self._inv

    def step(self, name: str) -> tuple[Any, AbsState]:
        """(guard, successor) of action ``name``."""
        if name not in self._steps:
            self._steps[name] = self.actions[name](Z3, self.variant, self.state, self.choice)
        return self._steps[name]


def _terms(v: Variant, terms: VariantTerms | None, actions: dict[str, Action] | None = None) -> VariantTerms:
    return terms if terms is not None else VariantTerms(v, invariants_for(v), actions or dict(ACTIONS))


def prove_initiation(v: Variant, inv: Invariant, timeout_ms: int, terms: VariantTerms | None = None) -> Outcome:
    """Domain /\\ Init => I."""
    t = _terms(v, terms)
    s = t.state
    solver = _solver(timeout_ms)
    solver.add(t.dom, initial(Z3, v, s), z3.Not(inv.formula(Z3, v, s)))
    start = time.perf_counter()
    result, model = _check(solver)
    out = Outcome(v.name, "init", inv.name, result, time.perf_counter() - start)
    if model is not None:
        pre = concrete(model, s)
        if not CONCRETE.and_(domain(CONCRETE, v, pre), initial(CONCRETE, v, pre)) or inv.formula(CONCRETE, v, pre):
            raise EncoderBug(f"[{v.name}] init x {inv.name}: the counterexample does not replay")
    return out


def prove_consecution(v: Variant, name: str, act: Action, inv: Invariant,
                      invs: tuple[Invariant, ...], timeout_ms: int, terms: VariantTerms | None = None) -> Outcome:
    """Domain /\\ Inv /\\ guard => I(post); a CTI is replayed before it is returned."""
    t = _terms(v, terms, {name: act})
    s, ch = t.state, t.choice
    guard, post = t.step(name)
    solver = _solver(timeout_ms)
    solver.add(t.dom, t.inv, guard, z3.Not(inv.formula(Z3, v, post)))
    start = time.perf_counter()
    result, model = _check(solver)
    out = Outcome(v.name, name, inv.name, result, time.perf_counter() - start)
    if model is not None:
        out.cti = replay(v, name, act, inv, invs, concrete(model, s), concrete(model, ch), concrete(model, post))
    return out


def prove_safety(v: Variant, inv: Invariant, invs: tuple[Invariant, ...], timeout_ms: int,
                 terms: VariantTerms | None = None) -> Outcome:
    """Domain /\\ Inv => P."""
    t = _terms(v, terms)
    solver = _solver(timeout_ms)
    solver.add(t.dom, t.inv, z3.Not(inv.formula(Z3, v, t.state)))
    start = time.perf_counter()
    result, _ = _check(solver)
    return Outcome(v.name, "safety", inv.name, result, time.perf_counter() - start)


def obligations(v: Variant, actions: dict[str, Action]) -> Iterator[tuple[str, Invariant]]:
    """(action, invariant) pairs of variant ``v``, initiation first, safety last."""
    invs = invariants_for(v)
    for inv in invs:
        yield "init", inv
    for name in actions:
        for inv in invs:
            yield name, inv
    for inv in invs:
        if inv.kind == "property":
            yield "safety", inv


def prove(timeout_ms: int = DEFAULT_TIMEOUT_MS, only: str | None = None,
          actions: dict[str, Action] | None = None, variants: tuple[Variant, ...] = VARIANTS,
          stop_on_cti: bool = False, on_outcome: Callable[[Outcome], None] | None = None) -> Report:
    """Run every obligation (``only``: a substring of ``variant action x invariant``).

    An interrupt (``checker.interrupt.requested()``, e.g. z3 stopped by ``waking``) ends the run
    between obligations; the one z3 was solving is dropped, not counted as unknown."""
    z3.set_param("smt.random_seed", SEED)
    acts = ACTIONS if actions is None else actions
    report = Report()
    report.total = sum(1 for v in variants for name, inv in obligations(v, acts)
                       if not only or only in f"{v.name} {name} x {inv.name}")
    for v in variants:
        invs = invariants_for(v)
        terms = VariantTerms(v, invs, acts)
        for name, inv in obligations(v, acts):
            if only and only not in f"{v.name} {name} x {inv.name}":
                continue
            if name == "init":
                out = prove_initiation(v, inv, timeout_ms, terms)
            elif name == "safety":
                out = prove_safety(v, inv, invs, timeout_ms, terms)
            else:
                out = prove_consecution(v, name, acts[name], inv, invs, timeout_ms, terms)
            if interrupt.requested():
                report.interrupted = True
                if out.result != "unknown":  # z3 finished before the interrupt reached it
                    report.outcomes.append(out)
                return report
            report.outcomes.append(out)
            if on_outcome is not None:
                on_outcome(out)
            interrupt.pause_point("mid-run")  # a test signals here (checker/interrupt.py)
            if stop_on_cti and out.result != "proved":
                return report
    return report


@contextlib.contextmanager
def patched(patches: dict[str, Callable[..., Any]]) -> Iterator[None]:
    """Replace functions of ``asyncspec.spec.request`` (a spec mutant) for the duration."""
    with contextlib.ExitStack() as stack:
        for name, fn in patches.items():
            if not hasattr(rq, name):
                raise ValueError(f"spec/request.py has no function {name!r}")
            stack.enter_context(mock.patch.object(rq, name, fn))
        yield


def prove_with_patches(patches: dict[str, Callable[..., Any]], **kwargs: Any) -> Report:
    """``prove`` on a mutant of ``spec/request.py`` (module attributes monkeypatched)."""
    with patched(patches):
        return prove(**kwargs)


# ---------------------------------------------------------------- display


def _row(s: AbsState) -> list[str]:
    c, g, e = s.c, s.g, s.e
    status = rq.STATUS_NAMES.get(c.status, str(c.status)) + ("*" if c.drop_stale_output else "")
    return [status, str(rq.num_tokens(s.p, c)), str(c.num_computed_tokens), str(c.num_output_placeholders),
            str(c.num_spec_token_ids),
            str(c.num_in_flight_tokens), str(c.num_stale_output_tokens), str(c.num_output_tokens),
            "chunk" if c.is_prefill_chunk else "-", str(c.num_cached_tokens), str(c.output_cached_tokens),
            str(c.num_wasted_steps),
            f"{g.scq}/{g.sct} {g.skq}/{g.skt}" + (" mixed" if g.smixed else ""),
            f"{g.cq}/{g.ct} {g.kq}/{g.kt}/{g.kd}" + (" mixed" if g.mixed else ""),
            f"{e.qlen}/{e.depth}", f"{c.last_sched_seq}/{e.sched_seq}/{e.processed_seq} lo={g.lo}",
            f"{g.pfence}{'' if g.plive else ' (gone)'} @{g.freed_at}"]


COLUMNS = ("", "status", "N", "C", "H", "S", "F", "X", "O", "chunk", "cached", "out-cached", "wasted",
           "stale chunk/sample q/t", "fresh chunk q/t sample q/t/drafts", "queue/D", "L/Q/R oldest",
           "parked fence")


def cti_table(cti: Cti) -> Table:
    """The pre/post table of a CTI (``*`` after the status: drop_stale_output)."""
    p = cti.pre.p
    ch = cti.choice
    spec = f" k={cti.pre.e.num_spec}" if cti.variant.endswith("-spec") else ""
    drafts = f" drafts={ch.d0} accepted={ch.acc}" if spec and cti.action.endswith("sample") else ""
    title = (f"CTI [{cti.variant}] {cti.action} breaks {cti.invariant}  "
             f"(P={p.num_prompt_tokens} M={p.max_tokens} eos={p.eos_position} "
             f"block_size={cti.pre.e.block_size}{spec}; choice n={ch.n} n0={ch.n0} "
             f"pos={ch.pos}{drafts})")
    table = Table(title=title, header_style="bold")
    for col in COLUMNS:
        table.add_column(col, justify="right")
    pre, post = _row(cti.pre), _row(cti.post)
    table.add_row("pre", *pre)
    table.add_row("post", *[f"[bold]{b}[/bold]" if a != b else b for a, b in zip(pre, post)])
    return table
