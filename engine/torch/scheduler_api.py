"""What the torch engine needs from a scheduler, and adapters that provide it.

The engine (``engine/torch/torch_engine.py``) runs vLLM's ``step_with_batch_queue`` loop over a
scheduler it only knows through :class:`EngineScheduler`:

* ``schedule()`` plans one step: for each scheduled request the tokens it computes, the
  position it starts at (``num_computed_tokens`` before the step), the block table that
  covers them and the output position the step samples (0 for a prefill chunk);
* ``update_from_output(step, sampled)`` takes the *real* token ids the model sampled for
  that step (one per row) and reports which tokens were appended to which request and
  which requests finished; EOS is detected by token id;
* the environment: ``add_request``, ``abort``, ``reset_prefix_cache`` (a forced preemption
  of every running request, drop mode), each with a guard (``can_*``).

Two adapters:

* :class:`SpecScheduler` runs the executable spec itself (``spec/scheduler.py``,
  ``spec/output.py``) as the scheduler.  The spec decides EOS from a per-request
  ``eos_position`` constant; the adapter learns it from the model: the first time a row of a
  live request samples the EOS token id at output position ``k``, it sets that request's
  ``eos_position`` to ``k`` before the step is processed.  The model is deterministic, so
  the token at an output position never changes and setting it then is equivalent to having
  known it from the start.  Block ids are real (the spec's free queue).
* ``engine/torch/torch_reference.py`` implements it over ``asyncspec.reference`` (the
  conventional scheduler), which takes real token ids and detects EOS by token id itself.

Requests are numbered ``0..n-1`` (spec order); late arrivals come in id order.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from asyncspec.spec import engine as spec_engine
from asyncspec.spec import request as rq
from asyncspec.spec.algebra import CONCRETE as A
from asyncspec.spec.config import SpecConfig, validate
from asyncspec.spec.draft import has_requests
from asyncspec.spec.engine import Action
from asyncspec.spec.state import EngineState, initial_state

__all__ = [
    "ABORTED",
    "EOS",
    "LENGTH",
    "EngineScheduler",
    "LargeSpecConfig",
    "ScheduledRow",
    "ScheduledStep",
    "SpecScheduler",
    "StepOutcome",
    "finish_reason",
    "spec_config",
]

#: Finish reasons reported to the client.
EOS = "stop"
LENGTH = "length"
ABORTED = "abort"


@dataclass(frozen=True)
class ScheduledRow:
    """One request's share of a planned step.

    Attributes:
        req: request index.
        num_tokens: tokens computed for it in this step (a prefill chunk or one decode token).
        start: its ``num_computed_tokens`` before the step (first position computed).
        block_table: its block ids, covering positions ``[0, start + num_tokens)``.
        sampled_position: the 1-based output position this step samples; 0 = a prefill
            chunk whose sample is discarded.
    """

    req: int
    num_tokens: int
    start: int
    block_table: tuple[int, ...]
    sampled_position: int

    @property
    def end(self) -> int:
        """One past the last position computed."""
        return self.start + self.num_tokens


@dataclass(frozen=True)
class ScheduledStep:
    """A planned step (a ``SchedulerOutput``); ``rows`` is empty for an empty step."""

    index: int
    rows: tuple[ScheduledRow, ...]


@dataclass(frozen=True)
class StepOutcome:
    """What processing one step (or an environment action) did.

    Attributes:
        delivered: ``(req, token)`` appended to a request's output, in order.
        finished: ``(req, reason)`` for each request that finished.
        wasted: requests whose row was computed although the engine had already finished
            them (EOS or length) before the output arrived.
        preempted: requests preempted by this action.
        freed_blocks: blocks that returned to the free pool.
        events: the spec's event names (``spec/events.py``) this action exercised.
    """

    delivered: tuple[tuple[int, int], ...] = ()
    finished: tuple[tuple[int, str], ...] = ()
    wasted: tuple[int, ...] = ()
    preempted: tuple[int, ...] = ()
    freed_blocks: tuple[int, ...] = ()
    events: frozenset[str] = frozenset()


class EngineScheduler(Protocol):
    """The scheduler interface the torch engine drives (one engine, one scheduler)."""

    def has_requests(self) -> bool:
        """Some request is waiting or running."""

    def schedule(self) -> tuple[ScheduledStep, StepOutcome]:
        """Plan the next step (it may preempt: reported in the outcome)."""

    def update_from_output(self, step: ScheduledStep, sampled: Mapping[int, int]) -> StepOutcome:
        """Process the oldest step given the token each sampling row produced."""

    def can_add(self, req: int) -> bool:
        """``req`` is the next request to arrive."""

    def add_request(self, req: int) -> StepOutcome:
        """``req`` arrives (appended to the waiting queue)."""

    def can_abort(self, req: int) -> bool:
        """``req`` arrived and is not finished."""

    def abort(self, req: int) -> StepOutcome:
        """The client aborts ``req``."""

    def can_reset_prefix_cache(self) -> bool:
        """A forced preemption of every running request is possible now."""

    def reset_prefix_cache(self) -> StepOutcome:
        """Preempt every running request (drop mode), as ``reset_prefix_cache``."""


def finish_reason(status: int) -> str | None:
    """The client-visible reason of a finished spec status (None while unfinished)."""
    return {
        rq.FINISHED_STOPPED: EOS,
        rq.FINISHED_LENGTH_CAPPED: LENGTH,
        rq.FINISHED_ABORTED: ABORTED,
    }.get(status)


# ---------------------------------------------------------------- spec configs


@dataclass(frozen=True)
class LargeSpecConfig(SpecConfig):
    """A :class:`SpecConfig` without the model checker's cap of six requests.

    The spec's actions do not depend on the number of requests; the cap only keeps state
    spaces small.  Everything else is validated as usual (on the first six requests).
    """

    def __post_init__(self) -> None:
        if len(self.requests) <= 6:
            validate(self)
            return
        head = {f.name: getattr(self, f.name) for f in dataclasses.fields(SpecConfig)}
        head["requests"] = self.requests[:6]
        if self.eos_positions is not None:
            head["eos_positions"] = self.eos_positions[:6]
        validate(SpecConfig(**head))


def spec_config(
    name: str,
    requests: Sequence[tuple[int, int]],
    *,
    depth: int,
    eos_positions: Sequence[int] | None = None,
    **settings: object,
) -> SpecConfig:
    """The spec config of an engine run at batch-queue depth ``depth``.

    ``settings`` are other :class:`SpecConfig` fields (``token_budget``, ``num_blocks``,
    ``decode_stagger``, ...).
    """
    fields: dict[str, object] = dict(settings)
    eos = None if eos_positions is None else tuple((e,) for e in eos_positions)
    return LargeSpecConfig(
        name=name,
        requests=tuple(requests),
        batch_queue_depth=depth,
        eos_positions=eos,
        **fields,  # type: ignore[arg-type]
    )


# ---------------------------------------------------------------- spec adapter


class SpecScheduler:
    """The executable spec used as the engine's scheduler (see the module docstring).

    Args:
        cfg: the run's constants (requests, depth, budget, pool, modes, environment).
        eos_token_id: the model's EOS token id (EOS is detected by token id).

    Attributes:
        state: the current spec state.
        trace: every action applied, in order (replayable on the spec).
        eos_positions: the EOS position learnt per request (0 = not seen).
    """

    def __init__(self, cfg: SpecConfig, eos_token_id: int) -> None:
        self.cfg = cfg
        self.eos_token_id = eos_token_id
        self.state: EngineState = initial_state(cfg, tuple(0 for _ in cfg.requests))
        self.trace: list[Action] = []
        self._steps = 0

    # -------------------------------------------------------------- queries

    @property
    def eos_positions(self) -> tuple[int, ...]:
        """The EOS position learnt for each request (0 = none seen)."""
        return tuple(p.eos_position for p in self.state.params)

    def has_requests(self) -> bool:
        """``Scheduler.has_requests()`` as the spec defines it."""
        return has_requests(self.state)

    def can_add(self, req: int) -> bool:
        """``req`` is the next late arrival."""
        return self.cfg.late_arrivals and spec_engine.next_arrival(self.state) == req

    def can_abort(self, req: int) -> bool:
        """``req`` arrived and is not finished."""
        return spec_engine.can_abort(self.state, req)

    def can_reset_prefix_cache(self) -> bool:
        """Forced preemptions are left and some request runs."""
        return self.state.forced_preemptions_left > 0 and bool(self.state.running)

    # -------------------------------------------------------------- engine actions

    def schedule(self) -> tuple[ScheduledStep, StepOutcome]:
        """``schedule()`` of the spec; the step's rows with their block tables."""
        before = self.state
        after, events = self._apply(Action(spec_engine.SCHEDULE))
        step = after.batch_queue[-1]
        rows = tuple(
            ScheduledRow(
                req=e.req,
                num_tokens=e.num_tokens,
                start=after.counters[e.req].num_computed_tokens - e.num_tokens,
                block_table=after.block_tables[e.req],
                sampled_position=e.sampled_position,
            )
            for e in step.entries
        )
        self._steps += 1
        return ScheduledStep(self._steps, rows), _outcome(before, after, events)

    def update_from_output(self, step: ScheduledStep, sampled: Mapping[int, int]) -> StepOutcome:
        """``update_from_output()`` of the spec for the oldest step.

        ``sampled`` maps each sampling row's request to its token id.
        """
        oldest = self.state.batch_queue[0]
        if [e.req for e in oldest.entries] != [r.req for r in step.rows]:
            raise RuntimeError(f"step {step.index} is not the oldest step in the batch queue")
        self._learn_eos(step, sampled)
        before = self.state
        after, events = self._apply(Action(spec_engine.UPDATE_FROM_OUTPUT))
        outcome = _outcome(before, after, events)
        delivered = tuple(
            (row.req, sampled[row.req])
            for row in step.rows
            if after.counters[row.req].num_output_tokens
            > before.counters[row.req].num_output_tokens
        )
        wasted = tuple(
            row.req
            for row in step.rows
            if after.counters[row.req].num_wasted_steps
            > before.counters[row.req].num_wasted_steps
        )
        return dataclasses.replace(outcome, delivered=delivered, wasted=wasted)

    # -------------------------------------------------------------- environment

    def add_request(self, req: int) -> StepOutcome:
        """A late arrival (``Scheduler.add_request``)."""
        before = self.state
        return _outcome(before, *self._apply(Action(spec_engine.ADD_REQUEST, req)))

    def abort(self, req: int) -> StepOutcome:
        """``finish_requests(req, FINISHED_ABORTED)``."""
        before = self.state
        return _outcome(before, *self._apply(Action(spec_engine.ABORT, req)))

    def reset_prefix_cache(self) -> StepOutcome:
        """``reset_prefix_cache(reset_running_requests=True)``."""
        before = self.state
        return _outcome(before, *self._apply(Action(spec_engine.RESET_PREFIX_CACHE)))

    # -------------------------------------------------------------- helpers

    def _apply(self, action: Action) -> tuple[EngineState, frozenset[str]]:
        """Apply an enabled spec action and record it in the trace."""
        if action not in spec_engine.enabled_actions(self.cfg, self.state):
            raise RuntimeError(f"spec action {action} is not enabled")
        self.state, events = spec_engine.apply(self.cfg, self.state, action)
        self.trace.append(action)
        return self.state, events

    def _learn_eos(self, step: ScheduledStep, sampled: Mapping[int, int]) -> None:
        """Record the EOS position of live requests whose row sampled the EOS token."""
        params = list(self.state.params)
        for row in step.rows:
            c = self.state.counters[row.req]
            if row.sampled_position == 0 or sampled.get(row.req) != self.eos_token_id:
                continue
            if params[row.req].eos_position == 0 and not rq.is_finished(A, c):
                params[row.req] = params[row.req]._replace(eos_position=row.sampled_position)
        self.state = self.state._replace(params=tuple(params))


def _outcome(before: EngineState, after: EngineState, events: frozenset[str]) -> StepOutcome:
    """Finished, preempted and freed blocks between two spec states."""
    finished = tuple(
        (i, reason)
        for i, (b, a) in enumerate(zip(before.counters, after.counters))
        if b.status != a.status and (reason := finish_reason(a.status)) is not None
    )
    preempted = tuple(
        i
        for i, (b, a) in enumerate(zip(before.counters, after.counters))
        if a.status == rq.PREEMPTED and b.status != rq.PREEMPTED
    )
    was_free = set(before.free_blocks)
    freed = tuple(b for b in after.free_blocks if b not in was_free)
    return StepOutcome(
        finished=finished, preempted=preempted, freed_blocks=freed, events=events
    )
