"""What the reference scheduler hands to a model runner, and what it gives back.

``SchedulerOutput`` is one scheduled step: per request the number of tokens,
the position of the first one (``num_computed_tokens`` before the step), the
block table, and whether the step samples and which output position.  A real
engine runs the step's tokens through its model over those blocks and passes
the sampled token ids to ``Scheduler.update_from_output``, which returns one
``RequestOutput`` per request that received tokens or finished.

Example:
    >>> e = ScheduledRequest("r0", None, num_tokens=3, start_position=0,
    ...                      block_ids=(0, 1), sampled_position=1)
    >>> e.samples, list(e.positions), e.written_block_ids(block_size=2)
    (True, [0, 1, 2], (0, 1))
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from asyncspec.reference.reference_request import Request


@dataclass(frozen=True, slots=True)
class ScheduledRequest:
    """One request's share of a step (vLLM ``num_scheduled_tokens[r]`` and its block table)."""

    request_id: str
    request: Request | None = field(repr=False, compare=False)  # the scheduler's object
    num_tokens: int  # tokens scheduled for it in this step
    start_position: int  # num_computed_tokens before the step: the first position computed
    block_ids: tuple[int, ...]  # its whole block table after allocation
    sampled_position: int  # 1-based output position this step samples; 0 = a prefill chunk

    @property
    def samples(self) -> bool:
        """The step ends at the known sequence (plus placeholders) and samples a token."""
        return self.sampled_position > 0

    @property
    def positions(self) -> range:
        """Sequence positions whose KV this step computes."""
        return range(self.start_position, self.start_position + self.num_tokens)

    def written_block_ids(self, block_size: int) -> tuple[int, ...]:
        """The blocks this step writes KV into."""
        first = self.start_position // block_size
        last = (self.start_position + self.num_tokens - 1) // block_size
        return self.block_ids[first : last + 1]


@dataclass(frozen=True, slots=True)
class SchedulerOutput:
    """One ``schedule()`` result; an empty step is still queued and processed."""

    step_id: int  # 1, 2, ... per schedule() call
    scheduled: tuple[ScheduledRequest, ...]
    sched_step_seq: int  # Q of this step under defer_block_free (0 otherwise, or when empty)
    preempted_req_ids: tuple[str, ...]  # requests preempted while scheduling it
    finished_req_ids: frozenset[str] = frozenset()  # finished since the previous step: free their state

    @property
    def total_num_scheduled_tokens(self) -> int:
        """Tokens in the step (0 = an empty step)."""
        return sum(e.num_tokens for e in self.scheduled)


@dataclass(frozen=True, slots=True)
class RequestOutput:
    """What the client sees from one processed step for one request."""

    request_id: str
    new_token_ids: tuple[int, ...]  # tokens appended by this step (empty if none)
    finish_reason: str | None  # "stop", "length", "abort", or None
    stale: bool = False  # delivered from a step scheduled before a preemption
