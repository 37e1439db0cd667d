"""What the scheduler tells the worker: a ``SchedulerOutput``'s payload, normalized, and the spec's expectation.

One entry per scheduled request, sorted by request:
``(req, kind, num_computed_tokens, token_ids, block_ids, num_output_tokens)``

* ``kind`` — ``new`` (``scheduled_new_reqs``: ``NewRequestData``), ``resumed``
  (``CachedRequestData.resumed_req_ids``: back from preemption) or
  ``running``;
* ``num_computed_tokens`` — what the worker starts this step's tokens at;
* ``token_ids`` — a new request's prompt; for a cached request the whole
  history (``all_token_ids``) when the V1 runner must rebuild it, i.e. the
  request was not scheduled in the previous step
  (``Scheduler._make_cached_request_data``), else nothing;
* ``block_ids`` — spec block ids (vLLM's minus its null block): all of a new
  request's blocks, a cached request's newly allocated ones;
* ``num_output_tokens`` — a cached request's output count
  (``CachedRequestData.num_output_tokens``): the tokens it has plus those in
  flight, ``O + H`` before this step's placeholders are added
  (``AsyncScheduler._update_after_schedule`` runs after the payload is built);
  a new request carries none (0).

``payload_of`` reads it from vLLM; ``expected_payload`` derives it from the
spec's state before and after ``schedule()``.  Both the scheduler target
(``vllm``) and the engine target (``vllm-engine``) compare it after every
``schedule()``; the spec target computes the expectation.
"""
from __future__ import annotations

from collections.abc import Callable, Collection
from typing import Any

from asyncspec.spec import request as rq
from asyncspec.spec.state import EngineState

from asyncspec.statemachine_tests.scheduler.vllm_observer import req_index

NEW, RESUMED, RUNNING = "new", "resumed", "running"

PayloadEntry = tuple[int, str, int, tuple[int, ...], tuple[int, ...], int]


def second_group(s: EngineState, req: int) -> tuple[int, ...]:
    """``req``'s blocks in the spec's second KV-cache group: the sliding window's or the Mamba
    group's (``spec/mamba.py``), ``NULL_BLOCK`` (-1) where vLLM's table holds its null block."""
    if s.swa_block_tables:
        return s.swa_block_tables[req]
    return s.mamba_tables[req] if s.mamba_tables else ()


def _spec_blocks(groups: Any) -> tuple[int, ...]:
    """Block ids of every KV-cache group, as spec ids, the groups one after another
    (full attention, then the sliding window's or the Mamba group's, whose null block reads as -1)."""
    if groups is None:
        return ()
    return tuple(int(b) - 1 for group in groups for b in group)


def _new_tokens(new: Any) -> Any:
    """A new request's tokens: ``prefill_token_ids`` where the scheduler sends them (Model Runner V2:
    the whole history), else the prompt."""
    return new.prefill_token_ids if new.prefill_token_ids is not None else (new.prompt_token_ids or ())


def as_mrv2(entries: tuple[PayloadEntry, ...]) -> tuple[PayloadEntry, ...]:
    """The payload above as the scheduler sends it to Model Runner V2 (``Scheduler.schedule`` and
    ``_make_cached_request_data`` under ``use_v2_model_runner``): a resumed request comes as a new
    one whose ``prefill_token_ids`` are its whole history, with all its blocks; a running request
    never carries its history (MRV2 keeps it on the device)."""
    return tuple(sorted((req, NEW, computed, tokens, blocks, 0) if kind == RESUMED
                        else (req, kind, computed, () if kind == RUNNING else tokens, blocks, outputs)
                        for req, kind, computed, tokens, blocks, outputs in entries))


def payload_of(scheduler_output: Any) -> tuple[PayloadEntry, ...]:
    """The normalized payload of a vLLM ``SchedulerOutput`` (vllm/v1/core/sched/output.py)."""
    entries: list[PayloadEntry] = [
        (req_index(new.req_id), NEW, int(new.num_computed_tokens), tuple(int(t) for t in _new_tokens(new)),
         _spec_blocks(new.block_ids), 0)
        for new in scheduler_output.scheduled_new_reqs
    ]
    cached = scheduler_output.scheduled_cached_reqs
    for i, req_id in enumerate(cached.req_ids):
        kind = RESUMED if req_id in cached.resumed_req_ids else RUNNING
        history = tuple(int(t) for t in cached.all_token_ids.get(req_id, ()))
        entries.append((req_index(req_id), kind, int(cached.num_computed_tokens[i]), history,
                        _spec_blocks(cached.new_block_ids[i]), int(cached.num_output_tokens[i])))
    return tuple(sorted(entries))


def expected_payload(before: EngineState, after: EngineState, scheduled: Collection[tuple[int, int, int]],
                     prompt_of: Callable[[int], tuple[int, ...]], outputs: Callable[[int], tuple[int, ...]],
                     previous_step: Collection[int]) -> tuple[PayloadEntry, ...]:
    """The payload the spec says ``schedule()`` sends, for the step ``before`` -> ``after``.

    ``scheduled``: the step's (req, tokens, sampled position) entries;
    ``outputs(req)``: the tokens delivered to ``req`` so far;
    ``previous_step``: the requests the previous ``schedule()`` scheduled.
    """
    entries: list[PayloadEntry] = []
    for req, num_tokens, _ in scheduled:
        status = before.counters[req].status
        computed = after.counters[req].num_computed_tokens - num_tokens
        blocks = after.block_tables[req]
        swa = second_group(after, req)  # a Mamba group's table: its null padding and its state blocks
        # an offloading load follows a preemption: promoted PREEMPTED, the request runs resumed
        reloaded = status == rq.WAITING_FOR_REMOTE_KVS and bool(before.offload_stored)
        if status in (rq.WAITING, rq.WAITING_FOR_REMOTE_KVS) and not reloaded:  # a loaded request is new when it runs
            entries.append((req, NEW, computed, prompt_of(req), blocks + swa, 0))
            continue
        kind = RESUMED if status == rq.PREEMPTED or reloaded else RUNNING
        history = prompt_of(req) + outputs(req) if req not in previous_step else ()
        swa_new = swa[len(second_group(before, req)):] if swa else ()
        c = before.counters[req]  # O + H as _make_cached_request_data reads them, before this step's
        outputs_sent = c.num_output_tokens + c.num_output_placeholders  # placeholders are added
        new_blocks = blocks if kind == RESUMED else blocks[len(before.block_tables[req]):]  # resumed: the whole
        entries.append((req, kind, computed, history, new_blocks + swa_new, outputs_sent))  # table (loaded blocks too)
    return tuple(sorted(entries))
