"""Re-synchronisation: the spec state read from a live vLLM scheduler, right before a ``schedule()``.

Used when the twin starts checking again: after a sampled gap (checking every
Nth step), after a divergence, or once the requests the spec does not cover
are gone.  Everything the spec's ``EngineState`` holds is in vLLM at a call
start: the ``Request`` counters (vllm/v1/request.py), the queues and
``prev_step_scheduled_req_ids`` (vllm/v1/core/sched/scheduler.py), the block
tables and the free queue (vllm/v1/core/single_type_kv_cache_manager.py
``req_to_blocks``, vllm/v1/core/block_pool.py), and the steps in flight, read
from their ``SchedulerOutput``s (``num_scheduled_tokens``, each request's
``num_computed_tokens`` when it was scheduled).  Ghost counters (``spec/request.py``)
start at their neutral values.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from asyncspec.spec import request as rq
from asyncspec.spec.config import SpecConfig
from asyncspec.spec.state import BlockHash, DeferredFree, EngineState, Step, StepEntry

_STATUS = {"WAITING": rq.WAITING, "RUNNING": rq.RUNNING, "PREEMPTED": rq.PREEMPTED,
           "FINISHED_STOPPED": rq.FINISHED_STOPPED, "FINISHED_LENGTH_CAPPED": rq.FINISHED_LENGTH_CAPPED,
           "FINISHED_ABORTED": rq.FINISHED_ABORTED}


class CannotResync(Exception):
    """vLLM's state has something the spec cannot hold (one line)."""


def max_tokens_of(request: Any, max_model_len: int) -> int:
    """The spec's ``max_tokens``: vLLM also stops a request at ``max_model_len``."""
    limit = max_model_len - int(request.num_prompt_tokens)
    wanted = int(request.max_tokens) if request.max_tokens is not None else limit
    return max(1, min(wanted, limit))


def _counters(r: Any, cached_blocks: int, block_size: int) -> rq.RequestCounters:
    status = _STATUS.get(r.status.name)
    if status is None:
        raise CannotResync(f"request status {r.status.name}")
    return rq.RequestCounters(
        status=status, num_output_tokens=int(r.num_output_tokens), num_computed_tokens=int(r.num_computed_tokens),
        num_output_placeholders=int(r.num_output_placeholders), num_in_flight_tokens=int(r.num_in_flight_tokens),
        num_stale_output_tokens=int(r.num_stale_output_tokens), drop_stale_output=bool(r.drop_stale_output),
        last_sched_seq=int(r.last_sched_seq), is_prefill_chunk=bool(r.is_prefill_chunk),
        num_cached_tokens=cached_blocks * block_size, decode_wait=0, output_cached_tokens=0,
        num_wasted_steps=0, output_out_of_order=False,
    )


def _step(so: Any, index_of: dict[str, int], requests: dict[str, Any], tables: Sequence[tuple[int, ...]],
          block_size: int) -> Step:
    """An in-flight ``SchedulerOutput`` as the spec's ``Step`` (entries in scheduling order)."""
    starts = {n.req_id: int(n.num_computed_tokens) for n in so.scheduled_new_reqs}
    cached = so.scheduled_cached_reqs
    starts.update({rid: int(cached.num_computed_tokens[i]) for i, rid in enumerate(cached.req_ids)})
    entries = []
    for rid, n in so.num_scheduled_tokens.items():
        r, index, first = requests[rid], index_of[rid], starts[rid]
        last = first + int(n) - 1
        if last + 1 != int(r.num_computed_tokens):
            raise CannotResync(f"request {rid} was scheduled again after an in-flight step")
        chunk = bool(r.is_prefill_chunk)
        sampled = 0 if chunk else last + 1 - int(r.num_prompt_tokens) + 1
        written = tables[index][first // block_size: last // block_size + 1]
        entries.append(StepEntry(index, int(n), sampled, written, 0, first, False))
    return Step(tuple(entries), 0)


def state_from_vllm(cfg: SpecConfig, sched: Any, in_flight: Sequence[Any],
                    by_id: dict[str, Any]) -> tuple[EngineState, list[str], frozenset[int]]:
    """(state, request ids by index, ``prev_step_scheduled_req_ids`` as indices)."""
    ids = list(sched.requests)
    for so in in_flight:
        ids += [rid for rid in so.num_scheduled_tokens if rid not in sched.requests and rid not in ids]
    missing = [rid for rid in ids if rid not in sched.requests and rid not in by_id]
    if missing:
        raise CannotResync(f"request {missing[0]} of an in-flight step is unknown")
    requests = {rid: sched.requests.get(rid) or by_id[rid] for rid in ids}
    index_of = {rid: i for i, rid in enumerate(ids)}
    manager = sched.kv_cache_manager.coordinator.single_type_managers[0]
    block_size = int(cfg.block_size)
    tables = [tuple(b.block_id - 1 for b in manager.req_to_blocks.get(rid, ())) if rid in sched.requests else ()
              for rid in ids]
    max_len = int(sched.max_model_len)
    state = EngineState(
        params=tuple(rq.RequestParams(int(requests[rid].num_prompt_tokens), max_tokens_of(requests[rid], max_len), 0)
                     for rid in ids),
        counters=tuple(_counters(requests[rid], int(manager.num_cached_block.get(rid, 0)), block_size) for rid in ids),
        block_tables=tuple(tables),
        waiting=tuple(index_of[r.request_id] for r in sched.waiting),
        running=tuple(index_of[r.request_id] for r in sched.running),
        batch_queue=_fenced(cfg, [_step(so, index_of, requests, tables, block_size) for so in in_flight],
                            int(sched.sched_step_seq)),
        deferred_step=None,
        free_blocks=tuple(b.block_id - 1 for b in sched.kv_cache_manager.block_pool.free_block_queue.get_all_free_blocks()),
        block_hashes=_hashes(cfg, sched, requests, index_of),
        deferred_frees=tuple(_deferred(fence, blocks) for fence, blocks in sched.deferred_frees),
        sched_step_seq=int(sched.sched_step_seq), processed_step_seq=int(sched.processed_step_seq),
        finished_pending=bool(sched.finished_req_ids), forced_preemptions_left=cfg.forced_preemptions,
    )
    previous = frozenset(index_of[r] for r in sched.prev_step_scheduled_req_ids if r in index_of)
    return state, ids, previous


def _fenced(cfg: SpecConfig, steps: list[Step], sched_step_seq: int) -> tuple[Step, ...]:
    """With deferral each non-empty step got the next ``sched_step_seq``: the newest has it now."""
    if not cfg.defer_block_free:
        return tuple(steps)
    out, seq = [], sched_step_seq
    for step in reversed(steps):
        if step.entries:
            out.append(step._replace(seq=seq))
            seq -= 1
        else:
            out.append(step)
    return tuple(reversed(out))


def _deferred(fence: int, blocks: Sequence[Any]) -> DeferredFree:
    """An entry of ``Scheduler.deferred_frees``: hashed blocks go to the back of the free
    queue when returned, unhashed ones to the front (``BlockPool.free_blocks``)."""
    first = tuple(b.block_id - 1 for b in blocks if b.block_hash is None)
    last = tuple(b.block_id - 1 for b in blocks if b.block_hash is not None)
    return DeferredFree(int(fence), first, last)


def _hashes(cfg: SpecConfig, sched: Any, requests: dict[str, Any],
            index_of: dict[str, int]) -> tuple[BlockHash | None, ...]:
    """Each hashed block as (request, block index) of the request whose tokens it caches;
    a block of a request the twin does not hold can never be hit: a hash of its own."""
    pool = sched.kv_cache_manager.block_pool
    hashes: list[BlockHash | None] = [None] * cfg.num_blocks
    if not cfg.enable_prefix_caching:
        return tuple(hashes)
    from vllm.v1.core.kv_cache_utils import make_block_hash_with_group_id

    owner = {make_block_hash_with_group_id(h, 0): BlockHash(index_of[rid], k)
             for rid, r in requests.items() for k, h in enumerate(r.block_hashes)}
    for b in pool.blocks:
        if not b.is_null and b.block_hash is not None:
            hashes[b.block_id - 1] = owner.get(b.block_hash, BlockHash(-b.block_id, 0))
    return tuple(hashes)
