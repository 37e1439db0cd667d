"""``update_from_output()`` for the oldest step in the batch queue.

Models ``Scheduler.update_from_output`` (vllm/v1/core/sched/scheduler.py,
vLLM 0.33.0): ``processed_step_seq`` and the deferred-free drain for a
non-empty step, then for each scheduled request in step order: the in-flight
and stale drains, output for a finished request ignored, stale output dropped
(drop mode) or delivered without touching C/H (deliver mode), one sampled
token appended with ``check_stop``, and the finished request freed
(``_free_request``).  The model is deterministic: the token a step samples
for output position k is EOS iff k is the request's ``eos_position``.
"""
from __future__ import annotations

from . import blocks
from . import events as ev
from . import request as rq
from .algebra import CONCRETE as A
from .config import SpecConfig
from .draft import Draft
from .state import EngineState, StepEntry


def free_finished(cfg: SpecConfig, d: Draft, req: int) -> None:
    """``Scheduler._free_request``: leave the queues, free (or park) the blocks,
    and remember the id for the next ``SchedulerOutput.finished_req_ids``."""
    d.finished_pending = True
    if req in d.running:
        d.running.remove(req)
    if req in d.waiting:
        d.waiting.remove(req)
    blocks.free_request_blocks(cfg, d, req)


def process_entry(cfg: SpecConfig, d: Draft, entry: StepEntry) -> None:
    """One request's output in the processed step."""
    req = entry.req
    c = d.counters[req]
    if rq.is_finished(A, c):
        d.counters[req] = rq.note_output_after_finish(A, c)
        if rq.is_stopped_by_engine(A, c):
            d.emit(ev.WASTED_STEP)
        return
    c, stale = rq.drain_in_flight(A, c, entry.num_tokens)
    d.counters[req] = c
    if stale and c.drop_stale_output:
        d.emit(ev.STALE_DROP)
        return
    if entry.sampled_position == 0:
        return  # a non-final prefill chunk samples nothing
    if stale:
        d.emit(ev.STALE_DELIVERY)
    frontier = c.num_cached_tokens
    c = rq.deliver_token(A, d.params[req], c, stale, entry.sampled_position, cfg.knobs)
    d.counters[req] = c
    blocks.record_hashes(cfg, d, req, frontier)
    if rq.is_finished(A, c):
        free_finished(cfg, d, req)


def update_from_output(cfg: SpecConfig, s: EngineState) -> tuple[EngineState, frozenset[str]]:
    """Process the oldest step of the batch queue."""
    d = Draft.of(s)
    step = d.batch_queue.pop(0)
    if cfg.defer_block_free and step.entries:
        blocks.step_processed(d)
    for entry in step.entries:
        process_entry(cfg, d, entry)
    return d.freeze(), frozenset(d.events)
