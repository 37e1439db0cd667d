"""The reference engine loop: a scheduler, a model, and a batch queue of depth D.

``EngineCore.step_with_batch_queue`` follows vLLM's
(``vllm/v1/engine/core.py``): if requests exist, schedule a step, start the
model on it and push it onto the queue; return at once while the queue has
room; otherwise (or when no request is left) wait for the *oldest* step and
process its output.  With D = 1 this is ``EngineCore.step``.  The two halves
are also available separately (``schedule_step`` / ``process_oldest``) so a
harness can interleave client events between them, as vLLM's abort queue
does.

A model is anything with ``execute_model(scheduler_output) -> {request_id:
[token ids]}``.  ``TokenFunctionModel`` is the deterministic stand-in the
refinement checks use: the token at output position k of request r is a fixed
function of (r, k), EOS at the request's chosen EOS position.

Example (one request, D = 2, EOS never):
    >>> from asyncspec.reference.reference_config import ReferenceConfig
    >>> cfg = ReferenceConfig(num_gpu_blocks=4, block_size=2, batch_queue_size=2)
    >>> core = EngineCore(cfg, TokenFunctionModel({}))
    >>> core.add_request(make_request(0, prompt_len=3, max_tokens=2, block_size=2))
    >>> delivered = []
    >>> while core.has_work():
    ...     delivered += [(o.request_id, o.finish_reason) for o in core.step_with_batch_queue()]
    >>> delivered
    [('r0', None), ('r0', 'length')]
"""
from __future__ import annotations

from collections import deque
from collections.abc import Mapping, Sequence
from typing import Protocol

from asyncspec.reference.reference_config import ReferenceConfig
from asyncspec.reference.outputs import RequestOutput, SchedulerOutput
from asyncspec.reference.reference_request import EOS_TOKEN_ID, Request
from asyncspec.reference.reference_scheduler import Scheduler

SampledTokens = Mapping[str, Sequence[int]]


class Model(Protocol):
    """What the engine loop needs from a model runner."""

    def execute_model(self, scheduler_output: SchedulerOutput) -> SampledTokens:
        """Run one step; the sampled token ids per request that samples."""


def prompt_token(request_index: int, position: int) -> int:
    """The prompt token of request ``request_index`` at ``position`` (never EOS).

    Distinct requests have distinct first tokens, so they never share a block hash.
    """
    return 1 + (request_index << 24) + position


def output_token(request_index: int, position: int, eos_position: int) -> int:
    """The token a model samples at 1-based output ``position``: EOS iff it is ``eos_position``."""
    if eos_position > 0 and position == eos_position:
        return EOS_TOKEN_ID
    return 1 + (request_index << 24) + (1 << 23) + position


def request_index(request_id: str) -> int:
    """``"r12"`` -> 12."""
    return int(request_id[1:])


def make_request(index: int, prompt_len: int, max_tokens: int, block_size: int) -> Request:
    """Request ``r{index}`` with the deterministic prompt of ``prompt_token``."""
    prompt = [prompt_token(index, i) for i in range(prompt_len)]
    return Request(f"r{index}", prompt, max_tokens, block_size)


class TokenFunctionModel:
    """A deterministic model: samples ``output_token(r, position, eos[r])``."""

    def __init__(self, eos_positions: Mapping[str, int]) -> None:
        self.eos_positions = dict(eos_positions)
        self.num_executed = 0

    def execute_model(self, scheduler_output: SchedulerOutput) -> SampledTokens:
        self.num_executed += 1
        return {
            e.request_id: [output_token(request_index(e.request_id), e.sampled_position,
                                        self.eos_positions.get(e.request_id, 0))]
            for e in scheduler_output.scheduled
            if e.samples
        }


class EngineCore:
    """The scheduler, the model and the batch queue (newest at the left, as vLLM)."""

    def __init__(self, config: ReferenceConfig, model: Model) -> None:
        self.config = config
        self.scheduler = Scheduler(config)
        self.model = model
        self.batch_queue: deque[tuple[SchedulerOutput, SampledTokens]] = deque()
        self.call_in_progress = False  # a step_with_batch_queue call goes on to process a step

    @property
    def batch_queue_size(self) -> int:
        """D."""
        return self.config.batch_queue_size

    def add_request(self, request: Request) -> None:
        """A new request arrives."""
        self.scheduler.add_request(request)

    def abort(self, request_id: str) -> None:
        """The client aborts a request (applied between the engine's halves)."""
        self.scheduler.abort(request_id)

    def has_work(self) -> bool:
        """Requests to schedule or steps to process remain."""
        return self.scheduler.has_requests() or bool(self.batch_queue)

    def in_flight(self) -> list[SchedulerOutput]:
        """The unprocessed steps, oldest first."""
        return [so for so, _ in reversed(self.batch_queue)]

    # ------------------------------------------------------------ the two halves

    def can_schedule(self) -> bool:
        """``step_with_batch_queue`` would schedule: requests exist and the queue has room."""
        return self.scheduler.has_requests() and len(self.batch_queue) < self.batch_queue_size

    def must_process(self) -> bool:
        """``step_with_batch_queue`` would process: the queue is full or nothing is left to schedule."""
        return bool(self.batch_queue) and (
            len(self.batch_queue) >= self.batch_queue_size or not self.scheduler.has_requests())

    def schedule_step(self) -> SchedulerOutput:
        """Schedule a step, start the model on it, queue it.

        The call returns to its caller only if the queue has room and the step ran
        the model or requests remain; otherwise it goes on to process the oldest step.
        """
        scheduler_output = self.scheduler.schedule()
        self.batch_queue.appendleft((scheduler_output, self.model.execute_model(scheduler_output)))
        model_executed = bool(scheduler_output.scheduled)
        self.call_in_progress = len(self.batch_queue) >= self.batch_queue_size or not (
            model_executed or self.scheduler.has_requests())
        return scheduler_output

    def process_oldest(self) -> list[RequestOutput]:
        """Wait for the oldest step and process its output (the call then returns)."""
        scheduler_output, sampled = self.batch_queue.pop()
        self.call_in_progress = False
        return self.scheduler.update_from_output(scheduler_output, sampled)

    # ------------------------------------------------------------ the loop

    def step_with_batch_queue(self) -> list[RequestOutput]:
        """One call of vLLM's ``EngineCore.step_with_batch_queue``; outputs if a step was processed."""
        if self.scheduler.has_requests():
            assert len(self.batch_queue) < self.batch_queue_size
            self.schedule_step()
            if not self.call_in_progress:
                return []
        elif not self.batch_queue:
            return []
        return self.process_oldest()
