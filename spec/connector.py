"""A KV connector's scheduler half: asynchronous loads, load failures, sends that delay frees.

Models the connector paths of vLLM's ``Scheduler`` (vllm/v1/core/sched/scheduler.py)
with a connector whose requests say what it does (``SpecConfig.remote_loads`` /
``remote_sends``; the vLLM side is ``engine/vllm/toy_connector.py``):

* a request in ``remote_loads`` is, at its first admission, claimed by the connector
  for every prompt token but the last (all of them with ``kv_load_whole_prompt``, as
  vLLM's NixlConnector does; promotion then sets C = P - 1): its blocks are allocated, C = P - 1, status
  ``WAITING_FOR_REMOTE_KVS``, and it waits in ``kv_holding_waiting`` (drained before
  ``waiting``) until the worker reports the load;
* the worker's report rides on a step's output (``update_from_output recv=rN`` /
  ``fail=rN`` / ``sent=rN``): ``finished_recving`` lets the next ``schedule()``
  promote the request (it then computes its last prompt token, a new request);
  ``failed_recving`` (with ``finished_recving``) either resets C to 0, the
  blocks freed at promotion and the prompt recomputed (policy ``recompute``), or
  finishes the request with ``FINISHED_ERROR`` (policy ``fail``);
* with ``kv_invalid_blocks`` the worker may instead report the request's loaded
  blocks from block j on invalid (``invalid@j=rN``: ``invalid_block_ids``, with
  ``finished_recving``): C rolls back to the first invalid block, j x block_size,
  the valid prefix's blocks are kept at promotion and the rest of the prompt is
  recomputed (policy ``recompute``), or the request fails (policy ``fail``);
* a request in ``remote_sends`` that finishes having computed something keeps its
  blocks until ``finished_sending``; a request that finishes while its load is
  pending keeps them until ``finished_recving`` (``finish_requests``).

A load is started once per request; after it (or a preemption) the request computes
locally, except with ``kv_offloading`` (``spec/offload.py``: vLLM's OffloadingConnector loads a
preempted request back from what it stored, as often as it is preempted).  Modelled without
prefix caching, sliding windows and speculative decoding.
"""
from __future__ import annotations

from asyncspec.spec import blocks, offload
from asyncspec.spec import events as ev
from asyncspec.spec import request as rq
from asyncspec.spec.algebra import CONCRETE as A
from asyncspec.spec.config import SpecConfig
from asyncspec.spec.draft import Draft
from asyncspec.spec.state import (
    KV_DONE, KV_FAILED, KV_FAILED_RECVD, KV_LOADING, KV_NONE, KV_ORPHAN, KV_PROMOTED, KV_RECVD,
    KV_SENDING, EngineState,
)
from asyncspec.spec.cites import models

RECV, FAIL, SENT = "recv", "fail", "sent"
INVALID = "invalid"  # a report kind invalid@j: the request's loaded blocks from block index j on are invalid
Report = tuple[str, int]  # (kind, request): what the worker's KVConnectorOutput says about one request

_LOAD_PENDING = (KV_LOADING, KV_FAILED)  # started, finished_recving not yet seen
_INFLIGHT = (KV_LOADING, KV_RECVD, KV_FAILED, KV_FAILED_RECVD, KV_PROMOTED)


def report_choices(cfg: SpecConfig, s: EngineState) -> list[Report | None]:
    """What the worker may report on the output being processed: nothing, or one
    transfer it knows of (a pending load done or failed, a pending send done)."""
    out: list[Report | None] = [None]
    if not cfg.kv_connector:
        return out
    for req, t in enumerate(s.kv_transfer):
        if t in (KV_LOADING, KV_ORPHAN):  # the offloading worker never fails a load (it asserts success)
            out += [(RECV, req)] if cfg.kv_offloading else [(RECV, req), (FAIL, req)]
        if t == KV_LOADING and cfg.kv_invalid_blocks:  # C = the external tokens while loading
            loaded_blocks = cfg.blocks_for(s.counters[req].num_computed_tokens)
            out += [(invalid_kind(j), req) for j in range(loaded_blocks)]
        elif t == KV_SENDING:
            out.append((SENT, req))
    return out + list(offload.report_choices(cfg, s))


def invalid_kind(first_invalid_block: int) -> str:
    """The report kind ``invalid@j``: blocks j, j + 1, ... of the request's load are invalid."""
    return f"{INVALID}@{first_invalid_block}"


def invalid_from(kind: str) -> int | None:
    """The first invalid block index of an ``invalid@j`` report kind, or None for another kind."""
    head, sep, index = kind.partition("@")
    return int(index) if head == INVALID and sep and index.isdigit() else None


def is_report_kind(kind: str) -> bool:
    """Whether ``kind`` names a worker report (``recv``, ``fail``, ``sent``, ``invalid@j``, ``stored``)."""
    return kind in (RECV, FAIL, SENT, offload.STORED) or invalid_from(kind) is not None


@models("vllm.v1.core.sched.scheduler.Scheduler._holds_kv_blocks")
def holds_kv_blocks(d: Draft, req: int) -> bool:
    """A skipped request goes back to ``kv_holding_waiting`` if it holds blocks."""
    c = d.counters[req]
    return bool(c.num_computed_tokens > 0 or c.status == rq.WAITING_FOR_REMOTE_KVS)


@models("vllm.v1.core.sched.scheduler.Scheduler._handle_blocked_waiting_request",
        "vllm.v1.core.sched.scheduler.Scheduler._update_waiting_for_remote_kv",
        "vllm.v1.core.kv_cache_manager.KVCacheManager.free")
def ready_to_schedule(cfg: SpecConfig, d: Draft, req: int) -> bool:
    """A loading request is skipped until ``finished_recving``; then promoted to
    WAITING (PREEMPTED if it was ever preempted: every offloading load): after a failed
    load (C = 0) its blocks are freed at once (no fence)."""
    c = d.counters[req]
    if c.status != rq.WAITING_FOR_REMOTE_KVS:
        return True
    t = d.kv_transfer[req]
    if t not in (KV_RECVD, KV_FAILED_RECVD):
        return False
    if t == KV_FAILED_RECVD and c.num_computed_tokens > 0:  # invalid blocks: the valid prefix stays
        d.emit(ev.KV_PARTIAL_RECOMPUTE)
    if c.num_computed_tokens == 0:
        first, last = blocks._split_by_hash(cfg, d, req)
        d.block_tables[req] = ()
        blocks.return_to_pool(d, first, last)
    elif c.num_computed_tokens == rq.num_tokens(d.params[req], c):
        c = c._replace(num_computed_tokens=c.num_computed_tokens - 1)
    # num_preemptions > 0: PREEMPTED (an offloading load follows a preemption), else WAITING
    d.counters[req] = c._replace(status=rq.PREEMPTED if cfg.kv_offloading else rq.WAITING)
    d.kv_transfer[req] = KV_PROMOTED
    return True


@models("vllm.distributed.kv_transfer.kv_connector.v1.base.KVConnectorBase_V1.get_num_new_matched_tokens")
def starts_load(cfg: SpecConfig, d: Draft, req: int) -> bool:
    """The connector claims P - 1 external tokens, asynchronously, at a first lookup; the
    offloading connector claims what it stored of the request, at any lookup from C = 0."""
    c = d.counters[req]
    if cfg.kv_offloading:
        return (d.kv_transfer[req] in (KV_NONE, KV_DONE) and c.status != rq.WAITING_FOR_REMOTE_KVS
                and c.num_computed_tokens == 0 and external_tokens(cfg, d, req) > 0)
    return (cfg.kv_connector and req in cfg.remote_loads and d.kv_transfer[req] == KV_NONE
            and c.num_computed_tokens == 0 and external_tokens(cfg, d, req) > 0)


@models("vllm.distributed.kv_transfer.kv_connector.v1.base.KVConnectorBase_V1.get_num_new_matched_tokens",
        "vllm.distributed.kv_transfer.kv_connector.v1.nixl.pull_scheduler.NixlPullConnectorScheduler"
        ".get_num_new_matched_tokens")
def external_tokens(cfg: SpecConfig, d: Draft, req: int) -> int:
    """Prompt tokens the connector loads: all P (NixlConnector, decode side) or P - 1 (ours); the
    offloading connector: every block it stored (``offload.hit_tokens``)."""
    if cfg.kv_offloading:
        return offload.hit_tokens(cfg, d, req)
    return int(d.params[req].num_prompt_tokens) - (0 if cfg.kv_load_whole_prompt else 1)


@models("vllm.v1.core.sched.scheduler.Scheduler._inflight_prefill_reserved_blocks",
        "vllm.v1.core.sched.scheduler.Scheduler._request_remaining_blocks")
def inflight_prefill_reserved_blocks(cfg: SpecConfig, d: Draft) -> int:
    """Blocks the in-flight prefills (running prefill chunks, loads not yet scheduled)
    still need for their whole sequence."""
    total = 0
    for req, c in enumerate(d.counters):
        loading = bool(d.kv_transfer) and d.kv_transfer[req] in _INFLIGHT and not rq.is_finished(A, c)
        if loading or (c.status == rq.RUNNING and c.is_prefill_chunk):
            total += blocks.blocks_needed(cfg, d, req, rq.num_tokens(d.params[req], c))
    return total


@models("vllm.v1.core.sched.scheduler.Scheduler.schedule",
        "vllm.v1.core.kv_cache_manager.KVCacheManager.allocate_slots")
def admit_async_load(cfg: SpecConfig, d: Draft, req: int) -> bool:
    """The waiting pass starts an asynchronous load: the whole sequence must fit the pool
    (``full_sequence_must_fit``), the external tokens' blocks must fit what the in-flight
    prefills leave (``reserved_blocks``); then C = P - 1, status WAITING_FOR_REMOTE_KVS."""
    c = d.counters[req]
    external = external_tokens(cfg, d, req)
    if cfg.reserve_full_isl and blocks.blocks_needed(cfg, d, req, rq.num_tokens(d.params[req], c)) > len(d.free_blocks):
        return False
    need = blocks.blocks_needed(cfg, d, req, external)
    if need > len(d.free_blocks) - inflight_prefill_reserved_blocks(cfg, d):
        return False
    blocks._take(cfg, d, req, need, 0, d.block_tables[req])
    d.counters[req] = c._replace(status=A.lit(rq.WAITING_FOR_REMOTE_KVS), num_computed_tokens=external)
    d.kv_transfer[req] = KV_LOADING
    d.emit(ev.OFFLOAD_LOAD if cfg.kv_offloading else ev.KV_ASYNC_LOAD)
    return True


@models("vllm.v1.core.sched.scheduler.Scheduler.update_from_output")
def held(d: Draft, req: int) -> bool:
    """A finished request the connector keeps in ``Scheduler.requests`` (blocks held for a
    send or a pending load): ``update_from_output`` still drains its in-flight share."""
    return bool(d.kv_transfer) and d.kv_transfer[req] in (KV_SENDING, KV_ORPHAN)


def scheduled(d: Draft, req: int) -> None:
    """``_update_after_schedule``: a promoted request leaves the in-flight prefills once scheduled."""
    if d.kv_transfer and d.kv_transfer[req] == KV_PROMOTED:
        d.kv_transfer[req] = KV_DONE


@models("vllm.v1.core.sched.scheduler.Scheduler.finish_requests")
def load_pending(cfg: SpecConfig, d: Draft, req: int) -> bool:
    """``finish_requests`` of a WAITING_FOR_REMOTE_KVS request whose load has not reported:
    its blocks wait for ``finished_recving``."""
    return (cfg.kv_connector and d.counters[req].status == rq.WAITING_FOR_REMOTE_KVS
            and d.kv_transfer[req] in _LOAD_PENDING)


@models("vllm.v1.core.sched.scheduler.Scheduler._free_request",
        "vllm.v1.core.sched.scheduler.Scheduler._connector_finished",
        "vllm.distributed.kv_transfer.kv_connector.v1.base.SupportsHMA.request_finished_all_groups")
def keeps_blocks(cfg: SpecConfig, d: Draft, req: int, orphan: bool) -> bool:
    """Whether the finished ``req`` keeps its blocks for the connector: a pending load
    (``orphan``), or a send of a request that computed something (and is not loading)."""
    if not cfg.kv_connector:
        return False
    t = d.kv_transfer[req]
    if orphan:
        d.kv_transfer[req] = KV_ORPHAN
        d.emit(ev.KV_ABORT_DURING_LOAD)
        return True
    if req in cfg.remote_sends and t not in _LOAD_PENDING and d.counters[req].num_computed_tokens > 0:
        d.kv_transfer[req] = KV_SENDING
        d.emit(ev.KV_SEND_DELAYED_FREE)
        return True
    d.kv_transfer[req] = KV_DONE
    return False


@models("vllm.v1.core.sched.scheduler.Scheduler._handle_failed_recving")
def failed_recving(cfg: SpecConfig, d: Draft, report: Report | None) -> int | None:
    """Top of ``update_from_output``: a failed load of a loading request resets C to 0
    (policy recompute) or is returned to be finished with FINISHED_ERROR (policy fail)."""
    if report is None or report[0] != FAIL:
        return None
    req = report[1]
    if d.counters[req].status != rq.WAITING_FOR_REMOTE_KVS:
        return None
    d.emit(ev.KV_LOAD_FAILED)
    if cfg.kv_load_failure_policy == "fail":
        return req
    d.counters[req] = d.counters[req]._replace(num_computed_tokens=0)
    d.kv_transfer[req] = KV_FAILED
    return None


@models("vllm.v1.core.sched.scheduler.Scheduler._handle_invalid_blocks",
        "vllm.v1.core.sched.scheduler.Scheduler._update_requests_with_invalid_blocks")
def invalid_blocks(cfg: SpecConfig, d: Draft, report: Report | None) -> int | None:
    """Top of ``update_from_output``, after ``failed_recving``: an ``invalid@j`` report of a
    loading request (in ``kv_holding_waiting``, WAITING_FOR_REMOTE_KVS; not scheduled, so
    none of its tokens are in the step) truncates C at its first invalid block, C = j x
    block_size (``_update_requests_with_invalid_blocks`` runs under either policy), and marks
    the load failed (policy recompute), or returns the request to be finished with
    FINISHED_ERROR (policy fail).  A finished request's blocks are not scanned."""
    first_invalid = None if report is None else invalid_from(report[0])
    if report is None or first_invalid is None:
        return None
    req = report[1]
    c = d.counters[req]
    if c.status != rq.WAITING_FOR_REMOTE_KVS or first_invalid >= cfg.blocks_for(c.num_computed_tokens):
        return None
    d.emit(ev.KV_INVALID_BLOCKS)
    d.counters[req] = c._replace(num_computed_tokens=first_invalid * cfg.block_size)  # under either policy
    if cfg.kv_load_failure_policy == "fail":
        return req
    d.kv_transfer[req] = KV_FAILED
    return None


@models("vllm.v1.core.sched.scheduler.Scheduler._update_from_kv_xfer_finished",
        "vllm.v1.core.sched.scheduler.Scheduler._free_blocks")
def xfer_finished(cfg: SpecConfig, d: Draft, report: Report | None) -> None:
    """End of ``update_from_output``: ``finished_recving`` marks a loading request ready
    for promotion, or frees a finished one's blocks; ``finished_sending`` frees them."""
    if report is None or report[0] == offload.STORED:
        return
    kind, req = report
    t = d.kv_transfer[req]
    if kind != SENT and d.counters[req].status == rq.WAITING_FOR_REMOTE_KVS:
        d.kv_transfer[req] = KV_FAILED_RECVD if t == KV_FAILED else KV_RECVD
        return
    if t in (KV_ORPHAN, KV_SENDING, KV_LOADING, KV_FAILED):
        blocks.free_request_blocks(cfg, d, req)
        d.kv_transfer[req] = KV_DONE
