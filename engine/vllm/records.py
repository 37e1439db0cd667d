"""Immutable records a driver returns: one scheduled step, one delivery, snapshots of the counters."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

@dataclass(frozen=True)
class ScheduledStep:
    """One ``schedule()`` result.  Mappings are sorted by request id; do not mutate.

    ``is_prefill_chunk`` is read right after ``schedule()`` (a later schedule()
    overwrites the request attribute).  ``preempted_req_ids`` are the requests
    preempted since the previous schedule() (this call included) and
    ``finished_req_ids`` those finished since the previous schedule(), as the
    SchedulerOutput reports them.
    """

    index: int
    num_scheduled_tokens: Mapping[str, int]
    is_prefill_chunk: Mapping[str, bool]
    new_req_ids: tuple[str, ...]
    resumed_req_ids: tuple[str, ...]
    preempted_req_ids: tuple[str, ...]
    finished_req_ids: tuple[str, ...]
    total_num_scheduled_tokens: int
    num_scheduled_drafts: Mapping[str, int] = field(default_factory=dict)  # len(scheduled_spec_decode_tokens[r])
    pending_structured_output_tokens: bool = False  # the engine defers this step's sampling
    _raw: Any = field(default=None, repr=False, compare=False)
    _driver_id: int = field(default=0, repr=False, compare=False)

    @property
    def is_empty(self) -> bool:
        """True for a step that scheduled no token (it is still queued and delivered)."""
        return self.total_num_scheduled_tokens == 0


@dataclass(frozen=True)
class DeliveryResult:
    """What ``update_from_output`` emitted for one step, sorted by request id.

    ``new_token_ids`` holds the tokens of each EngineCoreOutput (already trimmed at
    a stop).  ``finish_reasons`` maps finished ids to vLLM's ``FinishReason`` in
    lower case ("stop", "length", "abort", "error", "repetition").
    """

    step_index: int
    new_token_ids: Mapping[str, tuple[int, ...]]
    finish_reasons: Mapping[str, str]


@dataclass(frozen=True)
class RequestSnapshot:
    """The counters of one live request (an entry of ``scheduler.requests``)."""

    req_id: str
    status: str
    num_tokens: int
    num_prompt_tokens: int
    num_output_tokens: int
    num_computed_tokens: int
    num_output_placeholders: int
    num_in_flight_tokens: int
    num_stale_output_tokens: int
    drop_stale_output: bool
    is_prefill_chunk: bool
    num_preemptions: int
    last_sched_seq: int
    block_ids: tuple[int, ...]  # the first KV cache group's (full attention)
    output_token_ids: tuple[int, ...]
    group_block_ids: tuple[tuple[int, ...], ...] = ()  # every group's, in group order; 0 = the null block


@dataclass(frozen=True)
class SchedulerSnapshot:
    """A deterministic view of the scheduler (requests sorted by id, queues in order)."""

    requests: Mapping[str, RequestSnapshot]
    running: tuple[str, ...]
    waiting: tuple[str, ...]
    kv_holding_waiting: tuple[str, ...]
    sched_step_seq: int
    processed_step_seq: int
    deferred_frees: tuple[tuple[int, tuple[int, ...]], ...]
    num_free_blocks: int
