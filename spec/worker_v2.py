"""vLLM Model Runner V2: the last sampled token kept per request slot.

Models ``vllm/v1/worker/gpu/input_batch.py``: a request gets a slot when it
is added (new or resumed; ``prefill_len`` = prompt plus the tokens the
scheduler resends), rows map to slots through ``idx_mapping``;
``combine_sampled_and_draft_tokens`` feeds a row past ``prefill_len`` from
``last_sampled_tokens[slot]`` and ``post_update`` writes the new sample into
that slot, all on the device.  Rows up to ``prefill_len`` come from the
request's ``all_token_ids`` (correct by construction here).

Its seeded bug, ``v2_feed_by_row`` (``checker/worker_mutants.py``), calls
``_fed`` with an identity ``idx_mapping``: the kernel indexes
``last_sampled_tokens`` by batch row instead of by request slot.
"""
from __future__ import annotations

from asyncspec.spec.cites import models
from asyncspec.spec.worker import (
    STALE, Row, Token, WDraft, WorkerConfig, WorkerState, batch_orders, check_feed, count,
    finish_step, forget_dropped_samples, shapes, step_events,
)


@models("vllm.v1.worker.gpu.states.RequestState.add_request",
        "vllm.v1.worker.gpu.states.RequestState.remove_request",
        "vllm.v1.worker.gpu.model_runner.GPUModelRunner.add_requests",
        "vllm.v1.worker.gpu.model_runner.GPUModelRunner.finish_requests")
def _assign_slots(ws: WorkerState, rows: tuple[Row, ...], finished: frozenset[int]) -> tuple[list[int], list[int]]:
    """Free finished/re-added requests' slots, give fresh rows the lowest free slot."""
    slot, plen = list(ws.req_slot), list(ws.prefill_len)
    for req in finished:
        slot[req] = -1
    for r in rows:
        if r.fresh:
            slot[r.req] = -1
    for r in rows:
        if r.fresh:
            used = set(slot)
            slot[r.req] = next(i for i in range(len(slot)) if i not in used)
            plen[r.req] = r.num_prompt + r.known_outputs
    return slot, plen


@models("vllm.v1.worker.gpu.input_batch.combine_sampled_and_draft_tokens",
        "vllm.v1.worker.gpu.input_batch._combine_sampled_and_draft_tokens_kernel",
        "vllm.v1.worker.gpu.input_batch.prepare_prefill_inputs")
def _fed(ws: WorkerState, row: Row, idx_mapping: tuple[int, ...], index: int, plen: int) -> tuple[Token, bool]:
    """The last input token of ``row`` at batch row ``index``, and whether it came from ``last_sampled_tokens``.

    ``idx_mapping`` maps each batch row to its request slot.
    """
    if row.last_pos < plen:
        return row.expected, False  # prompt / resent history: all_token_ids on the device
    slot = idx_mapping[index]
    return (ws.slot_tokens[slot] if slot < len(ws.slot_tokens) else STALE), True


@models("vllm.v1.worker.gpu.model_runner.GPUModelRunner.execute_model",
        "vllm.v1.worker.gpu.model_runner.GPUModelRunner.sample_tokens",
        "vllm.v1.worker.gpu.input_batch.post_update")
def execute(wcfg: WorkerConfig, ws: WorkerState, rows: tuple[Row, ...],
            finished: frozenset[int]) -> list[tuple[WorkerState, frozenset[str]]]:
    """One step per possible row order; everything stays on the device."""
    out = []
    slot, plen = _assign_slots(ws, rows, finished)
    by_req = {r.req: r for r in rows}
    for order in batch_orders(wcfg, ws.slots, rows):
        d = WDraft.of(ws)
        d.events |= step_events(wcfg, ws.last, order, rows)
        forget_dropped_samples(d, rows)
        from_device = 0
        idx_mapping = tuple(slot[req] for req in order)
        for i, req in enumerate(order):
            fed, dev = _fed(ws, by_req[req], idx_mapping, i, plen[req])
            from_device += dev
            check_feed(d, by_req[req], fed)
        all_decode, in_shape = shapes(wcfg, rows)
        fed_all = all_decode and from_device == len(order)
        tokens = list(ws.slot_tokens)
        for req in order:
            if by_req[req].sampled_position > 0:
                tokens[slot[req]] = (req, by_req[req].sampled_position)
        last = finish_step(wcfg, d, rows, order, in_shape if all_decode else len(order), fed_all)
        out.append((d.freeze(slots=order, req_slot=tuple(slot), prefill_len=tuple(plen),
                             slot_tokens=tuple(tokens), last=last, **count(ws, fed_all, fed_all)),
                    frozenset(d.events)))
    return out
