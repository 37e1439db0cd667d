"""The adapter from ``asyncspec.reference`` (the conventional scheduler) to the engine's API.

``reference.reference_scheduler.Scheduler`` already speaks the engine's language: ``schedule()``
returns per request the tokens, the start position, the block table and the sampled
output position; ``update_from_output`` takes the real sampled token ids and stops a request
at its EOS *token id* (``check_stop``).  This module only renames: request ``i`` is
``Request("r{i}")`` with the workload's real prompt token ids, and environment actions get
the spec's guards (late arrivals in id order, ``forced_preemptions`` resets).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping, Sequence

from asyncspec.engine.torch.scheduler_api import ABORTED, ScheduledRow, ScheduledStep, StepOutcome
from asyncspec.reference.reference_harness import reference_config
from asyncspec.reference.outputs import RequestOutput, SchedulerOutput
from asyncspec.reference.reference_request import Request
from asyncspec.reference.reference_scheduler import Scheduler
from asyncspec.spec.config import SpecConfig

__all__ = ["ReferenceScheduler"]


def _index(request_id: str) -> int:
    """``"r12"`` -> 12."""
    return int(request_id[1:])


class ReferenceScheduler:
    """:class:`~asyncspec.engine.torch.scheduler_api.EngineScheduler` over the reference scheduler.

    Args:
        cfg: the run's constants (the reference's settings come from ``reference_config``).
        eos_token_id: the model's EOS token id.
        prompts: the real prompt token ids of each request.
    """

    def __init__(self, cfg: SpecConfig, eos_token_id: int, prompts: Sequence[Sequence[int]]) -> None:
        self.cfg = cfg
        self.scheduler = Scheduler(reference_config(cfg))
        self.requests = [
            Request(f"r{i}", list(p), m, cfg.block_size, eos_token_id)
            for i, (p, (_, m)) in enumerate(zip(prompts, cfg.requests))
        ]
        self.arrived = 0
        self.forced_preemptions_left = cfg.forced_preemptions
        self._in_flight: deque[SchedulerOutput] = deque()
        for _ in range(1 if cfg.late_arrivals else len(self.requests)):
            self.add_request(self.arrived)

    def has_requests(self) -> bool:
        """Some request is waiting or running."""
        return self.scheduler.has_requests()

    def schedule(self) -> tuple[ScheduledStep, StepOutcome]:
        """``Scheduler.schedule()``; its rows and the requests it preempted."""
        out = self.scheduler.schedule()
        self._in_flight.append(out)
        rows = tuple(
            ScheduledRow(_index(e.request_id), e.num_tokens, e.start_position, e.block_ids,
                         e.sampled_position)
            for e in out.scheduled
        )
        outcome = StepOutcome(
            preempted=tuple(_index(r) for r in out.preempted_req_ids),
            events=frozenset(self.scheduler.last_events),
        )
        return ScheduledStep(out.step_id, rows), outcome

    def update_from_output(self, step: ScheduledStep, sampled: Mapping[int, int]) -> StepOutcome:
        """``Scheduler.update_from_output`` for the oldest step, with real token ids."""
        out = self._in_flight.popleft()
        if out.step_id != step.index:
            raise RuntimeError(f"step {step.index} is not the oldest in flight ({out.step_id})")
        wasted_before = {r.req: self.requests[r.req].num_wasted_steps for r in step.rows}
        outputs = self.scheduler.update_from_output(
            out, {f"r{req}": [token] for req, token in sampled.items()})
        wasted = tuple(r.req for r in step.rows
                       if self.requests[r.req].num_wasted_steps > wasted_before[r.req])
        return StepOutcome(
            delivered=_delivered(outputs),
            finished=_finished(outputs),
            wasted=wasted,
            events=frozenset(self.scheduler.last_events),
        )

    def can_add(self, req: int) -> bool:
        """``req`` is the next request to arrive."""
        return req == self.arrived < len(self.requests)

    def add_request(self, req: int) -> StepOutcome:
        """``Scheduler.add_request``."""
        if not self.can_add(req):
            raise RuntimeError(f"r{req} cannot arrive now")
        self.scheduler.add_request(self.requests[req])
        self.arrived += 1
        return StepOutcome()

    def can_abort(self, req: int) -> bool:
        """``req`` arrived and is not finished."""
        return req < self.arrived and not bool(self.requests[req].is_finished())

    def abort(self, req: int) -> StepOutcome:
        """``finish_requests(req, FINISHED_ABORTED)``."""
        self.scheduler.abort(f"r{req}")
        return StepOutcome(finished=((req, ABORTED),), events=frozenset(self.scheduler.last_events))

    def can_reset_prefix_cache(self) -> bool:
        """Forced preemptions are left and some request runs."""
        return self.forced_preemptions_left > 0 and bool(self.scheduler.running)

    def reset_prefix_cache(self) -> StepOutcome:
        """``reset_prefix_cache(reset_running_requests=True)``."""
        self.forced_preemptions_left -= 1
        preempted = tuple(_index(r.request_id) for r in self.scheduler.running)
        self.scheduler.reset_prefix_cache(reset_running_requests=True)
        return StepOutcome(preempted=preempted, events=frozenset(self.scheduler.last_events))


def _delivered(outputs: list[RequestOutput]) -> tuple[tuple[int, int], ...]:
    """``(request, token)`` for every appended token."""
    return tuple((_index(o.request_id), t) for o in outputs for t in o.new_token_ids)


def _finished(outputs: list[RequestOutput]) -> tuple[tuple[int, str], ...]:
    """``(request, reason)`` for every request the step finished."""
    return tuple((_index(o.request_id), o.finish_reason) for o in outputs if o.finish_reason)
