"""A mutable working copy of an ``EngineState``, used inside one action.

An action starts with ``Draft.of(state)``, edits lists in place (as the
engine's code does), records *events* (for witnesses and fuzz coverage) and
ends with ``draft.freeze()``.  The action stays a pure function of its input
state: the input is never modified.
"""
from __future__ import annotations

import dataclasses
import operator
import typing
from dataclasses import dataclass, field
from typing import Any

from asyncspec.spec.request import WAITING_FOR_STREAMING_REQ, RequestCounters, RequestParams
from asyncspec.spec.state import (
    KV_ORPHAN, KV_SENDING, PAUSED_ALL, UNPAUSED, BlockHash, DeferredFree, EngineState, Step,
    StoreJob,
)
from asyncspec.spec.cites import models


@dataclass
class Draft:
    """Mutable mirror of ``EngineState`` plus the events of the current action.

    Its fields are the state's, in the state's order (checked below), each a list
    where the state's is a tuple it edits; ``events`` follows.  A new state field
    is declared here too; ``of()`` and ``freeze()`` follow the declarations.
    """

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
    pause_state: int = 0
    pauses_left: int = 0
    pause_breached: bool = False
    stream_sent: list[int] = field(default_factory=list)
    stream_applied: list[int] = field(default_factory=list)
    store_jobs: list[StoreJob] = field(default_factory=list)
    offload_stored: list[int] = field(default_factory=list)
    offload_tables: list[tuple[int, ...]] = field(default_factory=list)
    offload_finished: list[int] = field(default_factory=list)
    store_breached: bool = False
    enc_inputs: list[tuple[int, ...]] = field(default_factory=list)
    enc_entries: list[int] = field(default_factory=list)
    enc_freeable: list[int] = field(default_factory=list)
    worker_encoder: list[int] = field(default_factory=list)
    encoder_miss: bool = False
    mamba_tables: list[tuple[int, ...]] = field(default_factory=list)
    mamba_junction: list[int] = field(default_factory=list)
    mamba_misaligned: bool = False
    events: set[str] = field(default_factory=set)

    @classmethod
    def of(cls, s: EngineState) -> Draft:
        """A working copy of ``s``: each field of ``s``, a list where the draft's is one."""
        state: tuple[Any, ...] = s
        values: list[Any] = [list(value) if thawed else value for value, thawed in zip(state, _THAWED)]
        return cls(*values)

    def freeze(self) -> EngineState:
        """The immutable state this draft describes."""
        values: tuple[Any, ...] = _STATE_FIELDS(self)
        return EngineState._make([tuple(value) if thawed else value for value, thawed in zip(values, _THAWED)])

    def emit(self, event: str) -> None:
        """Record that this action exercised ``event`` (see ``spec/events.py``)."""
        self.events.add(event)


def _thawed_fields() -> tuple[bool, ...]:
    """Per ``EngineState`` field, whether ``Draft`` holds it as a list (a tuple in the state);
    a ``TypeError`` unless ``Draft``'s fields are the state's, in order, then ``events``."""
    names = tuple(f.name for f in dataclasses.fields(Draft))
    if names != (*EngineState._fields, "events"):
        raise TypeError(f"Draft's fields {names} are not EngineState's {EngineState._fields} + events")
    hints = typing.get_type_hints(Draft)
    return tuple(typing.get_origin(hints[name]) is list for name in EngineState._fields)


_THAWED = _thawed_fields()
_STATE_FIELDS = operator.attrgetter(*EngineState._fields)
"""The draft's values of the state's fields, in the state's order."""


@models("vllm.v1.core.sched.scheduler.Scheduler.has_requests",
        "vllm.v1.core.sched.scheduler.Scheduler.has_finished_requests",
        "vllm.distributed.kv_transfer.kv_connector.v1.offloading.scheduler.OffloadingConnectorScheduler"
        ".has_pending_push_work",
        "vllm.v1.core.sched.scheduler.Scheduler.get_num_unfinished_requests")
def has_requests(d: Draft | EngineState) -> bool:
    """``Scheduler.has_requests()``: an unfinished request counts (``has_unfinished_requests``),
    or a finished request's id has not been sent to the worker yet (``finished_req_ids``), or
    a finished request still waits for its connector (blocks held for a send or a load), or
    the offloading connector has store jobs not reported complete (``has_pending_push_work``)."""
    return (has_unfinished_requests(d) or d.finished_pending
            or any(t in (KV_SENDING, KV_ORPHAN) for t in d.kv_transfer) or bool(d.store_jobs))


@models("vllm.v1.core.sched.scheduler.Scheduler.get_num_unfinished_requests")
def has_unfinished_requests(d: Draft | EngineState) -> bool:
    """``get_num_unfinished_requests() > 0`` under the pause state: running and KV-holding
    requests count, waiting ones only when unpaused, under ``PAUSED_ALL`` none; a paused
    streaming session (``WAITING_FOR_STREAMING_REQ``) never counts
    (``num_waiting_for_streaming_input`` is subtracted)."""
    if d.pause_state == PAUSED_ALL:
        return False
    queued = len(d.kv_holding) + (len(d.waiting) if d.pause_state == UNPAUSED else 0)
    return len(d.running) + queued - num_waiting_for_streaming_input(d) > 0


@models("vllm.v1.core.sched.scheduler.Scheduler._handle_stopped_request",
        "vllm.v1.core.sched.scheduler.Scheduler._update_request_as_session")
def num_waiting_for_streaming_input(d: Draft | EngineState) -> int:
    """``Scheduler.num_waiting_for_streaming_input``: the paused sessions (spec/streaming.py).
    Derived from the statuses, so vLLM's counter is compared with it (never stored)."""
    if not d.stream_sent:
        return 0
    return sum(1 for c in d.counters if c.status == WAITING_FOR_STREAMING_REQ)

