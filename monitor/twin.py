"""The spec twin of a live scheduler: a growing set of requests, a bounded window of steps.

A real engine's requests arrive with their own ids and are never declared up
front, so the twin adds each one to the spec's state as a late arrival
(``spec/engine.py`` ``add_request``) when vLLM's ``Scheduler.add_request``
receives it.  The spec decides a stop from a per-request EOS position that a
live engine cannot know in advance; the twin sets it when vLLM reports the stop,
before the spec processes the same output (as ``engine/torch/scheduler_api.py``
learns it from the model's samples).  The EOS position is a fact about the
request, so a window written later carries it from its start.

The window: the spec state at its start and the actions since.  When it is
full the twin *compacts*: requests that are finished and in no in-flight step
leave the state (indices are renumbered), and a new window starts there.  So
the state, the window and the cost of a spec step stay bounded however long the
engine runs.
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from asyncspec.checker.window_fields import spec_payload
from asyncspec.spec import engine as eng
from asyncspec.spec import request as rq
from asyncspec.spec.algebra import CONCRETE as A
from asyncspec.spec.config import SpecConfig
from asyncspec.spec.engine import Action
from asyncspec.spec.state import BlockHash, EngineState, Step, StepEntry


class NotEnabled(Exception):
    """The engine did something the spec does not enable in its current state."""


@dataclass
class Window:
    """The spec state at the window start and the actions since."""

    start: EngineState
    start_ids: tuple[str, ...]
    previous_step: frozenset[int]
    actions: list[Action] = field(default_factory=list)


def empty_state(cfg: SpecConfig, free_blocks: tuple[int, ...], hashed: Iterable[int] = ()) -> EngineState:
    """No request; the pool's free queue as vLLM has it (``hashed``: blocks holding a hash of a
    request the twin never saw, which no later request can hit)."""
    hashes: list[BlockHash | None] = [None] * cfg.num_blocks
    for b in hashed:
        hashes[b] = BlockHash(-1 - b, 0)
    return EngineState(params=(), counters=(), block_tables=(), waiting=(), running=(), batch_queue=(),
                       deferred_step=None, free_blocks=free_blocks, block_hashes=tuple(hashes),
                       deferred_frees=(), sched_step_seq=0, processed_step_seq=0, finished_pending=False,
                       forced_preemptions_left=cfg.forced_preemptions)


class SpecTwin:
    """The spec, stepped alongside one vLLM scheduler."""

    def __init__(self, cfg: SpecConfig, state: EngineState, window_size: int, ids: Iterable[str] = (),
                 previous_step: frozenset[int] = frozenset()) -> None:
        self.cfg = cfg
        self.state = state
        self.window_size = window_size
        self.ids: list[str] = list(ids)  # spec index -> vLLM request id
        self.index_of: dict[str, int] = {rid: i for i, rid in enumerate(self.ids)}
        self.previous_step = previous_step  # Scheduler.prev_step_scheduled_req_ids
        self.payload: tuple[Any, ...] = ()
        self.window = Window(state, tuple(self.ids), previous_step)
        self._set_requests()

    # ---- requests -----------------------------------------------------------------

    def _set_requests(self) -> None:
        """``cfg.requests`` / ``eos_positions`` follow the state (lifted past ``MAX_REQUESTS``
        as ``statemachine_tests/scheduler/spec_target.spec_config`` does)."""
        params = self.state.params
        object.__setattr__(self.cfg, "requests", tuple((p.num_prompt_tokens, p.max_tokens) for p in params))
        object.__setattr__(self.cfg, "eos_positions", tuple((p.eos_position,) for p in params))

    def add(self, req_id: str, prompt_len: int, max_tokens: int) -> None:
        """``Scheduler.add_request``: a new index, not arrived, then the spec's ``add_request``."""
        s = self.state
        index = len(s.params)
        self.state = s._replace(
            params=s.params + (rq.RequestParams(prompt_len, max_tokens, 0),),
            counters=s.counters + (rq.initial_counters(A, rq.NOT_ARRIVED),),
            block_tables=s.block_tables + ((),),
        )
        self.ids.append(req_id)
        self.index_of[req_id] = index
        self._set_requests()
        self.apply(Action(eng.ADD_REQUEST, index))

    def learn_eos(self, index: int, position: int) -> None:
        """vLLM stopped request ``index`` on a token at output position ``position``."""
        s = self.state
        params = list(s.params)
        params[index] = params[index]._replace(eos_position=position)
        self.state = s._replace(params=tuple(params))
        self._set_requests()

    # ---- actions ----------------------------------------------------------------------

    def apply(self, action: Action) -> None:
        """Take ``action``; ``NotEnabled`` if the spec does not allow it here."""
        cfg, s = self.cfg, self.state
        if not _enabled(cfg, s, action):
            raise NotEnabled(f"'{action}' is not enabled in the spec here")
        after, _ = eng.apply(cfg, s, action)
        self.window.actions.append(action)
        if action.name == eng.SCHEDULE:
            self.payload = spec_payload(s, after, self.previous_step)
            self.previous_step = frozenset(e[0] for e in self.payload)
        elif action.name == eng.RESET_PREFIX_CACHE:
            self.previous_step = frozenset()
        self.state = after

    def is_live(self, index: int) -> bool:
        status = self.state.counters[index].status
        return status != rq.NOT_ARRIVED and not rq.is_finished(A, self.state.counters[index])

    # ---- the window ---------------------------------------------------------------------

    def roll_if_full(self) -> bool:
        """At a full window: compact the state and start a new window there (True)."""
        if len(self.window.actions) < self.window_size:
            return False
        self.compact()
        self.window = Window(self.state, tuple(self.ids), self.previous_step)
        return True

    def compact(self) -> None:
        """Drop requests that are finished and in no in-flight step; renumber the rest."""
        s = self.state
        referenced = {e.req for st in _steps(s) for e in st.entries}
        keep = [i for i in range(len(s.params)) if i in referenced or not rq.is_finished(A, s.counters[i])]
        new = {old: k for k, old in enumerate(keep)}
        hashes = tuple(None if h is None else BlockHash(new[h.req], h.block_index) if h.req in new
                       else BlockHash(-1 - b, 0) for b, h in enumerate(s.block_hashes))
        self.state = s._replace(
            params=tuple(s.params[i] for i in keep), counters=tuple(s.counters[i] for i in keep),
            block_tables=tuple(s.block_tables[i] for i in keep),
            waiting=tuple(new[i] for i in s.waiting), running=tuple(new[i] for i in s.running),
            batch_queue=tuple(_renumber(st, new) for st in s.batch_queue),
            deferred_step=None if s.deferred_step is None else _renumber(s.deferred_step, new),
            block_hashes=hashes,
        )
        self.ids = [self.ids[i] for i in keep]
        self.index_of = {rid: k for k, rid in enumerate(self.ids)}
        self.previous_step = frozenset(new[i] for i in self.previous_step if i in new)
        self.payload = ()
        self._set_requests()

    def window_start_state(self) -> EngineState:
        """The window's start state with every request added since present as not arrived,
        each with the EOS position known now (the spec's late-arrival form)."""
        start, now = self.window.start, self.state
        offset = len(start.params)
        known = {rid: now.params[i] for i, rid in enumerate(self.ids)}
        params = tuple(known.get(rid, p) for rid, p in zip(self.window.start_ids, start.params))
        later = self.ids[offset:] if tuple(self.ids[:offset]) == self.window.start_ids else []
        return start._replace(
            params=params + tuple(known[rid] for rid in later),
            counters=start.counters + tuple(rq.initial_counters(A, rq.NOT_ARRIVED) for _ in later),
            block_tables=start.block_tables + tuple(() for _ in later),
        )


def _steps(s: EngineState) -> tuple[Step, ...]:
    queued: tuple[Step, ...] = s.batch_queue
    return queued + ((s.deferred_step,) if s.deferred_step is not None else ())


def _renumber(step: Step, new: dict[int, int]) -> Step:
    return step._replace(entries=tuple(StepEntry(new[e.req], *e[1:]) for e in step.entries))


def _enabled(cfg: SpecConfig, s: EngineState, action: Action) -> bool:
    """``action in eng.enabled_actions(cfg, s)``, without listing every abort."""
    if action.name == eng.SCHEDULE:
        return bool(eng.can_schedule(cfg, s))
    if action.name == eng.UPDATE_FROM_OUTPUT:
        return bool(eng.can_process(cfg, s)) and action.accepted in eng.acceptance_choices(s)
    if action.name == eng.ABORT and action.req is not None:
        return cfg.aborts and bool(eng.can_abort(s, action.req))
    return action in eng.enabled_actions(cfg, s)
