"""vLLM's OffloadingConnector (kv_both) as the KV connector: stores to a CPU tier, loads back, fences.

Models the scheduler half of ``OffloadingConnectorScheduler``
(vllm/distributed/kv_transfer/kv_connector/v1/offloading/scheduler.py) with a CPU tier
large enough for every block, one GPU block per offloaded chunk, request-level keys
(distinct prompts: a request only ever hits blocks it stored itself), over vLLM's
``Scheduler`` (``defer_block_free`` on with overlapping steps, as vLLM sets it for a
KV consumer):

* stores (``build_connector_meta``, inside ``schedule()`` before ``_update_after_schedule``):
  a scheduled request stores its full blocks up to ``min(C + n, N)`` tokens, a request
  finished since the last ``schedule()`` (``finished_req_ids``) up to ``min(C, N)``
  when aborted, else ``min(max(P, N - 1), N)``, all capped at P with ``offload_prompt_only``
  (``kv_offload_prompt_only``; True by default in vLLM 0.33.0, ``vllm/v1/kv_offload/base.py``);
  each block once
  (``offload_stored``);
  a store job reads its GPU blocks after the forward pass of the step that issued it;
* fences: a store job's blocks are watched once its request finished
  (``request_finished`` for jobs already issued, at issue for later ones); a step whose
  ``schedule()`` allocates a watched block, or preempts the job's request, lists the job
  in ``jobs_to_flush``: the worker stores it before that step's forward pass.  Frees are
  never delayed for a store (``request_finished`` returns False); the fence is the flush;
* completion: the worker's ``completed_jobs`` (``update_from_output stored=rN``: every
  job of rN the worker can have finished, i.e. issued before the step being processed,
  or flushed by it) ends the jobs; a preempted request with a store job not reported
  waits in ``waiting`` (``get_num_new_matched_tokens`` returns None);
* loads: a preempted request comes back with a CPU hit of every block it stored: an
  asynchronous load (``WAITING_FOR_REMOTE_KVS``, C = stored blocks x block_size) through
  ``spec/connector.py``'s path, reported by ``recv=rN`` (``finished_recving`` with the
  load job's completion); a hit of the whole sequence recomputes its last token.

The ghost ``store_breached`` records a step that writes (computes, or loads into) a block an
unflushed store job still reads; ``offload_accounting`` holds the counters to the tokens.
"""
from __future__ import annotations

from asyncspec.spec import events as ev
from asyncspec.spec import request as rq
from asyncspec.spec.config import SpecConfig
from asyncspec.spec.draft import Draft
from asyncspec.spec.state import KV_LOADING, EngineState, StoreJob, in_flight_steps, request_name
from asyncspec.spec.cites import models

STORED = "stored"  # a report kind stored=rN: the worker completed rN's store jobs (completed_jobs)
_SCHEDULER = "vllm.distributed.kv_transfer.kv_connector.v1.offloading.scheduler.OffloadingConnectorScheduler"


def pending_jobs(d: Draft | EngineState, req: int) -> bool:
    """Whether ``req`` has a store job not reported complete (``RequestOffloadState.transfer_jobs``)."""
    return any(job.req == req for job in d.store_jobs)


@models(f"{_SCHEDULER}.get_num_new_matched_tokens")
def lookup_delayed(cfg: SpecConfig, d: Draft, req: int) -> bool:
    """A waiting request with store jobs in flight is not looked up yet (None): it stays waiting."""
    return cfg.kv_offloading and d.counters[req].status != rq.WAITING_FOR_REMOTE_KVS and pending_jobs(d, req)


@models(f"{_SCHEDULER}.get_num_new_matched_tokens", f"{_SCHEDULER}._lookup")
def hit_tokens(cfg: SpecConfig, d: Draft, req: int) -> int:
    """Tokens the CPU tier holds for ``req``: every block it stored (all stores reported by then)."""
    return d.offload_stored[req] * cfg.block_size


@models(f"{_SCHEDULER}._calc_num_offloadable_tokens", f"{_SCHEDULER}._build_store_jobs")
def store_horizon(cfg: SpecConfig, d: Draft, req: int, num_scheduled: int, finished: bool) -> int:
    """The blocks ``req``'s stores reach after this step: its tokens after the batch, capped by N and,
    with ``offload_prompt_only`` (vLLM 0.33.0's default), by P, in whole blocks (an aborted request:
    C; a finished one: max(P, N - 1), its last sample's slot unstored)."""
    c, p = d.counters[req], d.params[req]
    num_tokens = rq.num_tokens(p, c)
    if not finished:
        after = c.num_computed_tokens + num_scheduled
    elif c.status == rq.FINISHED_ABORTED:
        after = c.num_computed_tokens
    else:
        after = max(p.num_prompt_tokens, num_tokens - 1)
    cap = p.num_prompt_tokens if cfg.kv_offload_prompt_only else num_tokens
    return min(after, num_tokens, cap) // cfg.block_size


@models(f"{_SCHEDULER}.request_finished")
def request_finished(cfg: SpecConfig, d: Draft, req: int) -> None:
    """``req`` finished (``_free_request``): its issued jobs' blocks are watched from now on; the
    connector keeps its block ids for the stores the next ``schedule()`` issues; no free waits."""
    if not cfg.kv_offloading:
        return
    d.store_jobs = [job._replace(registered=True) if job.req == req else job for job in d.store_jobs]
    d.offload_tables[req] = d.block_tables[req]
    d.offload_finished.append(req)


@models("vllm.v1.core.sched.scheduler.Scheduler._preempt_request", f"{_SCHEDULER}._build_connector_meta")
def preempted(cfg: SpecConfig, d: Draft, req: int) -> None:
    """``req`` was preempted (``reset_preempted_req_ids``, sent with the next ``schedule()``): that
    step flushes its store jobs, so their completion may ride on its output."""
    if not cfg.kv_offloading:
        return
    for k, job in enumerate(d.store_jobs):
        if job.req == req:
            d.store_jobs[k] = _flush(job, len(d.batch_queue) + (d.deferred_step is not None))
            d.emit(ev.OFFLOAD_FLUSH_PREEMPTED)


def _allocated(s: EngineState, d: Draft) -> set[int]:
    """Blocks this ``schedule()`` gave a request (``_current_batch_allocated_block_ids``)."""
    return {b for req, table in enumerate(d.block_tables) for b in table if b not in s.block_tables[req]}


def _flush(job: StoreJob, outputs_before: int) -> StoreJob:
    """``job`` in this step's ``jobs_to_flush``: stored before the step's forward pass, so its
    completion may ride on this step's output."""
    return job._replace(flushed=True, outputs_ahead=min(job.outputs_ahead, outputs_before))


@models(f"{_SCHEDULER}.build_connector_meta", f"{_SCHEDULER}._build_store_jobs",
        "vllm.v1.core.sched.scheduler.Scheduler.schedule")
def build_connector_meta(cfg: SpecConfig, s: EngineState, d: Draft, scheduled: list[tuple[int, int]]) -> None:
    """The step's metadata (a preempted request's jobs are flushed by ``preempted``): flush the watched
    jobs whose blocks were allocated again, then issue this step's store jobs (a finished request's new jobs are
    watched at once, and flushed if their blocks were allocated again)."""
    if not cfg.kv_offloading:
        return
    outputs_before = len(in_flight_steps(s))
    allocated = _allocated(s, d)
    for k, job in enumerate(d.store_jobs):
        if not job.flushed and job.registered and allocated.intersection(job.blocks):
            d.emit(ev.OFFLOAD_FLUSH)
            d.store_jobs[k] = _flush(job, outputs_before)
    issued = [(req, n, False) for req, n in scheduled] + [(req, 0, True) for req in d.offload_finished]
    for req, n, finished in issued:
        horizon = store_horizon(cfg, d, req, n, finished)
        table = d.offload_tables[req] if finished else d.block_tables[req]
        if horizon <= d.offload_stored[req]:
            continue
        job = StoreJob(req, tuple(table[d.offload_stored[req]:horizon]), outputs_before + 1, False, finished)
        d.offload_stored[req] = horizon
        d.emit(ev.OFFLOAD_STORE_FINISHED if finished else ev.OFFLOAD_STORE)
        if finished and allocated.intersection(job.blocks):
            d.emit(ev.OFFLOAD_FLUSH)
            job = _flush(job, outputs_before)
        d.store_jobs.append(job)
    for req in d.offload_finished:
        d.offload_tables[req] = ()
    d.offload_finished = []


@models(f"{_SCHEDULER}._build_connector_meta", "vllm.distributed.kv_transfer.kv_connector.v1.offloading.worker"
        ".OffloadingConnectorWorker.handle_preemptions")
def check_store_reads(cfg: SpecConfig, s: EngineState, d: Draft, written: dict[int, set[int]]) -> None:
    """Ghost: the new step writes ``written[req]`` (its computed blocks, its loads' blocks); a store
    job it did not flush reads after its forward pass, so must not read a block it writes (a job
    issued by this very step may read what the step writes for the job's own request)."""
    if not cfg.kv_offloading:
        return
    old = len(s.store_jobs)
    for k, job in enumerate(d.store_jobs):
        if job.flushed:
            continue
        hit = {b for req, blocks in written.items() if k < old or req != job.req for b in blocks}
        if hit.intersection(job.blocks):
            d.store_breached = True


def loads_started(s: EngineState, d: Draft) -> dict[int, set[int]]:
    """The blocks of the loads this ``schedule()`` started (written before its forward pass)."""
    return {req: set(d.block_tables[req]) for req, t in enumerate(d.kv_transfer)
            if t == KV_LOADING and s.kv_transfer[req] != KV_LOADING}


def report_choices(cfg: SpecConfig, s: EngineState) -> list[tuple[str, int]]:
    """``stored=rN`` for each request with a store job the worker may have finished."""
    if not cfg.kv_offloading:
        return []
    return [(STORED, req) for req in sorted({job.req for job in s.store_jobs if job.outputs_ahead == 0})]


@models(f"{_SCHEDULER}.update_connector_output", f"{_SCHEDULER}._update_connector_output")
def update_connector_output(cfg: SpecConfig, d: Draft, report: tuple[str, int] | None) -> None:
    """``completed_jobs`` of this output: ``stored=rN`` ends rN's finished store jobs; every other job
    comes one output nearer to the output that may report it."""
    if not cfg.kv_offloading:
        return
    done = report[1] if report is not None and report[0] == STORED else None
    if done is not None:
        d.emit(ev.OFFLOAD_STORE_DONE)
    d.store_jobs = [job._replace(outputs_ahead=max(job.outputs_ahead - 1, 0)) for job in d.store_jobs
                    if not (job.req == done and job.outputs_ahead == 0)]


@models(f"{_SCHEDULER}._build_connector_meta", "vllm.v1.core.sched.scheduler.Scheduler.schedule")
def store_reads_fenced(cfg: SpecConfig, s: EngineState) -> str | None:
    """No step wrote a block that a store job issued before it, not in its ``jobs_to_flush``, still reads."""
    return "a step wrote a block an unflushed store job still reads" if s.store_breached else None


@models(f"{_SCHEDULER}._build_store_jobs", f"{_SCHEDULER}.update_state_after_alloc")
def offload_accounting(cfg: SpecConfig, s: EngineState) -> str | None:
    """Stored blocks never exceed a request's full blocks of tokens; a loading request counts as
    computed exactly the blocks it stored, and holds a block for each (a load lands only in its own
    blocks); a store job reads blocks no other request's table holds unless it was flushed."""
    for req, stored in enumerate(s.offload_stored):
        c = s.counters[req]
        if stored > rq.num_tokens(s.params[req], c) // cfg.block_size:
            return f"{request_name(req)}: {stored} blocks stored, more than its tokens fill"
        if s.kv_transfer[req] == KV_LOADING and c.num_computed_tokens != stored * cfg.block_size:
            return f"{request_name(req)}: loading {c.num_computed_tokens} tokens, {stored} blocks stored"
        if s.kv_transfer[req] == KV_LOADING and len(s.block_tables[req]) < stored:
            return f"{request_name(req)}: loading {stored} blocks into {len(s.block_tables[req])} it holds"
    for job in s.store_jobs:
        others = {b for req, t in enumerate(s.block_tables) if req != job.req for b in t}
        if not job.flushed and others.intersection(job.blocks):
            return f"{request_name(job.req)}: an unflushed store job reads a block another request holds"
    return None


def offloading_only(cfg: SpecConfig) -> bool:
    """The offloading properties apply to ``kv_offloading`` configs."""
    return cfg.kv_offloading

