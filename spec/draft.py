"""A mutable working copy of an ``EngineState``, used inside one action.

An action starts with ``Draft.of(state)``, edits lists in place (as the
engine's code does), records *events* (for witnesses and fuzz coverage) and
ends with ``draft.freeze()``.  The action stays a pure function of its input
state: the input is never modified.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from asyncspec.spec.request import RequestCounters, RequestParams
from asyncspec.spec.state import KV_ORPHAN, KV_SENDING, BlockHash, DeferredFree, EngineState, Step
from asyncspec.spec.cites import models


@dataclass
class Draft:
    """Mutable mirror of ``EngineState`` plus the events of the current action."""

    params: tuple[RequestParams, ...]
    counters: list[RequestCounters]
    block_tables: list[tuple[int, ...]]
    waiting: list[int]
    running: list[int]
    batch_queue: list[Step]
    deferred_step: Step | None
    free_blocks: list[int]
    block_hashes: list[BlockHash | None]
    deferred_frees: list[DeferredFree]
    sched_step_seq: int
    processed_step_seq: int
    finished_pending: bool
    forced_preemptions_left: int
    call_in_progress: bool = False
    swa_block_tables: list[tuple[int, ...]] = field(default_factory=list)
    kv_holding: list[int] = field(default_factory=list)
    kv_transfer: list[int] = field(default_factory=list)
    events: set[str] = field(default_factory=set)

    @classmethod
    def of(cls, s: EngineState) -> Draft:
        """A working copy of ``s``."""
        return cls(
            params=s.params,
            counters=list(s.counters),
            block_tables=list(s.block_tables),
            waiting=list(s.waiting),
            running=list(s.running),
            batch_queue=list(s.batch_queue),
            deferred_step=s.deferred_step,
            free_blocks=list(s.free_blocks),
            block_hashes=list(s.block_hashes),
            deferred_frees=list(s.deferred_frees),
            sched_step_seq=s.sched_step_seq,
            processed_step_seq=s.processed_step_seq,
            finished_pending=s.finished_pending,
            forced_preemptions_left=s.forced_preemptions_left,
            call_in_progress=s.call_in_progress,
            swa_block_tables=list(s.swa_block_tables),
            kv_holding=list(s.kv_holding),
            kv_transfer=list(s.kv_transfer),
        )

    def freeze(self) -> EngineState:
        """The immutable state this draft describes."""
        return EngineState(
            params=self.params,
            counters=tuple(self.counters),
            block_tables=tuple(self.block_tables),
            waiting=tuple(self.waiting),
            running=tuple(self.running),
            batch_queue=tuple(self.batch_queue),
            deferred_step=self.deferred_step,
            free_blocks=tuple(self.free_blocks),
            block_hashes=tuple(self.block_hashes),
            deferred_frees=tuple(self.deferred_frees),
            sched_step_seq=self.sched_step_seq,
            processed_step_seq=self.processed_step_seq,
            finished_pending=self.finished_pending,
            forced_preemptions_left=self.forced_preemptions_left,
            call_in_progress=self.call_in_progress,
            swa_block_tables=tuple(self.swa_block_tables),
            kv_holding=tuple(self.kv_holding),
            kv_transfer=tuple(self.kv_transfer),
        )

    def emit(self, event: str) -> None:
        """Record that this action exercised ``event`` (see ``spec/events.py``)."""
        self.events.add(event)


@models("vllm.v1.core.sched.scheduler.Scheduler.has_requests",
        "vllm.v1.core.sched.scheduler.Scheduler.has_finished_requests")
def has_requests(d: Draft | EngineState) -> bool:
    """``Scheduler.has_requests()``: a request is waiting (either queue) or running, or a
    finished request's id has not been sent to the worker yet (``finished_req_ids``), or
    a finished request still waits for its connector (blocks held for a send or a load)."""
    return (bool(d.waiting) or bool(d.running) or d.finished_pending or bool(d.kv_holding)
            or any(t in (KV_SENDING, KV_ORPHAN) for t in d.kv_transfer))

