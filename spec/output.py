"""``update_from_output()`` for the oldest step in the batch queue.

Models ``Scheduler.update_from_output`` (vllm/v1/core/sched/scheduler.py,
vLLM 0.33.0): ``processed_step_seq`` and the deferred-free drain for a
non-empty step, then for each scheduled request in step order: the in-flight
and stale drains, output for a finished request ignored, stale output dropped
(drop mode) or delivered without touching C/H (deliver mode), one sampled
token appended with ``check_stop`` (then, with ``abort_mode = "deferred"``,
SGLang's pending abort honoured), and the finished request freed
(``_free_request``).  The model is deterministic: the token a step samples
for output position k is EOS iff k is the request's ``eos_position``.
"""
from __future__ import annotations

from asyncspec.spec import blocks, connector, encoder, offload, scheduler, streaming
from asyncspec.spec import events as ev
from asyncspec.spec import request as rq
from asyncspec.spec.algebra import CONCRETE as A
from asyncspec.spec.config import SpecConfig
from asyncspec.spec.draft import Draft
from asyncspec.spec.state import EngineState, Step, StepEntry
from asyncspec.spec.cites import models


@models("vllm.v1.core.sched.scheduler.Scheduler._free_request")
def free_finished(cfg: SpecConfig, d: Draft, req: int, orphan: bool = False) -> None:
    """``Scheduler._free_request``: leave the queues, free (or park) the blocks unless
    the KV connector keeps them (``orphan``: its load is still pending), and remember
    the id for the next ``SchedulerOutput.finished_req_ids``."""
    d.finished_pending = True
    for queue in (d.running, d.waiting, d.kv_holding):
        if req in queue:
            queue.remove(req)
    offload.request_finished(cfg, d, req)
    if not connector.keeps_blocks(cfg, d, req, orphan):
        blocks.free_request_blocks(cfg, d, req)
    encoder.free_request(cfg, d, req)


@models("vllm.v1.worker.gpu.input_batch.post_update", pr=32951)
def shift_in_flight(cfg: SpecConfig, d: Draft, req: int, rejected: int) -> None:
    """The worker's on-device correction after rejected drafts (Model Runner V2,
    ``post_update``; V1 runner since vllm#32951): ``req``'s later in-flight steps
    run ``rejected`` positions earlier than the scheduler planned, so they
    sample earlier output positions and write earlier KV slots."""
    d.batch_queue = [_shifted(cfg, d, step, req, rejected) for step in d.batch_queue]
    if d.deferred_step is not None:
        d.deferred_step = _shifted(cfg, d, d.deferred_step, req, rejected)


def _shifted(cfg: SpecConfig, d: Draft, step: Step, req: int, rejected: int) -> Step:
    table = d.block_tables[req]
    entries = list(step.entries)
    for j, e in enumerate(entries):
        if e.req != req:
            continue
        start = e.start_position - rejected
        last = start + e.num_tokens - 1
        entries[j] = e._replace(
            start_position=start,
            sampled_position=e.sampled_position - rejected if e.sampled_position else 0,
            written_blocks=table[start // cfg.block_size: last // cfg.block_size + 1],
        )
    return step._replace(entries=tuple(entries))


@models("vllm.v1.sample.rejection_sampler.rejection_greedy_sample_kernel",
        "vllm.v1.sample.rejection_sampler.rejection_random_sample_kernel")
def takes_acceptance(s: EngineState, entry: StepEntry) -> bool:
    """Whether the environment chooses how many of ``entry``'s drafts the worker accepted:
    it scheduled real drafts (``pad_spec_decode``'s -1 padding is always rejected),
    and its output will not be ignored or dropped."""
    c = s.counters[entry.req]
    if entry.num_drafts == 0 or entry.padded_drafts or rq.is_finished(A, c):
        return False
    return not (c.num_stale_output_tokens > 0 and c.drop_stale_output)


@models("vllm.v1.core.sched.scheduler.Scheduler.update_from_output")
def process_entry(cfg: SpecConfig, d: Draft, entry: StepEntry, accepted: int) -> None:
    """One request's output in the processed step (``accepted`` drafts verified)."""
    req = entry.req
    c = d.counters[req]
    if rq.is_finished(A, c):
        if connector.held(d, req):  # still in Scheduler.requests (blocks kept): its share drains
            c, _ = rq.drain_in_flight(A, c, entry.num_tokens)
        d.counters[req] = rq.note_output_after_finish(A, c)
        if rq.wastes_output_after_finish(A, c):
            d.emit(ev.WASTED_STEP)
            if c.status == rq.FINISHED_ABORTED:
                d.emit(ev.DEFERRED_ABORT_WASTED_STEP)
        return
    c, stale = rq.drain_in_flight(A, c, entry.num_tokens)
    d.counters[req] = c
    if stale and c.drop_stale_output:
        d.emit(ev.STALE_DROP)
        return
    encoder.free_processed(cfg, d, req)  # before this step's placeholder is taken off H
    if entry.sampled_position == 0:
        return  # a non-final prefill chunk samples nothing
    if stale:
        d.emit(ev.STALE_DELIVERY)
    if entry.num_drafts:
        rejected = entry.num_drafts - accepted
        c = rq.reject_drafts(A, c, rejected, stale)
        d.emit(ev.SPEC_DECODE_REJECTION if rejected else ev.SPEC_DECODE_ALL_ACCEPTED)
        if rejected:
            shift_in_flight(cfg, d, req, rejected)
    frontier = c.num_cached_tokens
    c = rq.deliver_tokens(A, d.params[req], c, stale, entry.sampled_position, accepted, cfg.knobs)
    if cfg.abort_mode == "deferred" and c.abort_deferred:  # SGLang: Req.update_finish_state
        c = rq.honour_deferred_abort(A, c)
        d.emit(ev.DEFERRED_ABORT_DELIVERY)
    d.counters[req] = c
    blocks.record_hashes(cfg, d, req, frontier)
    if c.status == rq.FINISHED_LENGTH_CAPPED and c.num_output_tokens < d.params[req].max_tokens:
        d.emit(ev.MODEL_LEN_CAPPED)  # check_stop: N reached max_model_len before max_tokens
    if rq.is_finished(A, c) and not streaming.resumes_after_stop(cfg, d, req):
        free_finished(cfg, d, req)


@models("vllm.v1.core.sched.scheduler.Scheduler.update_from_output",
        "vllm.v1.engine.core.EngineCore.step_with_batch_queue")
def update_from_output(
    cfg: SpecConfig, s: EngineState, accepted: tuple[int, ...] = (), kv: connector.Report | None = None
) -> tuple[EngineState, frozenset[str]]:
    """Process the oldest step of the batch queue.

    ``accepted`` gives, in entry order, the accepted drafts of each entry that
    ``takes_acceptance``; the others accept none.  ``kv``: the KV connector's
    report riding on this output (failed loads first, finished transfers last).
    """
    choices = iter(accepted)
    per_entry = [next(choices, 0) if takes_acceptance(s, e) else 0 for e in s.batch_queue[0].entries]
    d = Draft.of(s)
    d.call_in_progress = False  # step_with_batch_queue returns after update_from_output
    step = d.batch_queue.pop(0)
    if cfg.defer_block_free and step.entries:
        blocks.step_processed(d)
    error = connector.failed_recving(cfg, d, kv)
    if error is None:
        error = connector.invalid_blocks(cfg, d, kv)
    for entry, n_accepted in zip(step.entries, per_entry):
        process_entry(cfg, d, entry, n_accepted)
    if error is not None:  # finish_requests(FINISHED_ERROR): the load has not reported finished yet
        d.counters[error] = rq.finish(A, d.counters[error], A.lit(rq.FINISHED_ERROR))
        free_finished(cfg, d, error, orphan=True)
    connector.xfer_finished(cfg, d, kv)
    offload.update_connector_output(cfg, d, kv)
    if d.deferred_step is not None:  # the grammar has advanced: sample the deferred step
        deferred, d.deferred_step = d.deferred_step, None
        scheduler.sample(d, deferred)
    return d.freeze(), frozenset(d.events)
