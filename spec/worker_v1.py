"""vLLM V1 GPU runner: previous tokens gathered by ``prev_req_id_to_index``.

Models ``vllm/v1/worker/gpu_model_runner.py``: ``_update_states`` (re-entering
requests take the scheduler's token history), ``_prepare_input_ids`` (CPU
``input_ids`` first, then every request present in ``prev_req_id_to_index``
gets its previous sample scattered into its last scheduled position) and
``_bookkeeping_sync`` (``prev_sampled_token_ids`` and ``prev_req_id_to_index``
for the non-discarded rows, a ``-1`` placeholder appended to the host history).

Its seeded bug, ``v1_feed_by_row`` (``checker/worker_mutants.py``), replaces
``_device_token`` to gather by the current row instead of the request's
previous row (feeding by slot position, not identity).
"""
from __future__ import annotations

from asyncspec.spec.cites import models
from asyncspec.spec.worker import (
    DISCARDED, PAD, STALE, W_CPU_ROW, Row, Token, WDraft, WorkerConfig, WorkerState, batch_orders,
    check_feed, count, finish_step, host_read, reset_host, shapes, step_events,
)


@models("vllm.v1.worker.gpu_model_runner.GPUModelRunner._prepare_input_ids")
def _device_token(ws: WorkerState, prev: dict[int, int], order: tuple[int, ...], row: int) -> Token:
    """The previous sample gathered for the request at ``row`` of ``order``, through ``prev_req_id_to_index``."""
    index = prev[order[row]]
    return ws.prev_sampled[index] if index < len(ws.prev_sampled) else STALE


@models("vllm.v1.worker.gpu_model_runner.GPUModelRunner.execute_model",
        "vllm.v1.worker.gpu_model_runner.GPUModelRunner.sample_tokens",
        "vllm.v1.worker.gpu_model_runner.GPUModelRunner._update_states",
        "vllm.v1.worker.gpu_model_runner.GPUModelRunner._prepare_input_ids",
        "vllm.v1.worker.gpu_model_runner.GPUModelRunner._bookkeeping_sync")
def execute(wcfg: WorkerConfig, ws: WorkerState, rows: tuple[Row, ...],
            finished: frozenset[int]) -> list[tuple[WorkerState, frozenset[str]]]:
    """One ``execute_model`` + ``sample_tokens`` per possible row order."""
    out = []
    # _update_states removes a resumed request from the persistent batch even when it ran
    # in the last step (reset_prefix_cache's same-step resume): remove_request pops it
    # from prev_req_id_to_index, so its row is not fed the stale sample.
    prev = {req: i for req, i in (ws.prev_map or ()) if not any(r.req == req and r.fresh for r in rows)}
    for order in batch_orders(wcfg, ws.slots, rows):
        d = WDraft.of(ws)
        d.events |= step_events(wcfg, ws.last, order, rows)
        reset_host(d, rows, finished, lambda r: r.fresh or r.req not in ws.slots)
        by_req = {r.req: r for r in rows}
        from_device = 0
        for i, req in enumerate(order):
            row = by_req[req]
            if req in prev:
                fed, from_device = _device_token(ws, prev, order, i), from_device + 1
            else:
                fed = host_read(d.host[req], row)
            check_feed(d, row, fed)
        if 0 < from_device < len(order):
            d.events.add(W_CPU_ROW)
        all_decode, in_shape = shapes(wcfg, rows)
        fed_all = ws.prev_map is not None and all_decode and from_device == len(order)
        sampled = tuple((req, by_req[req].sampled_position) for req in order)
        last = finish_step(wcfg, d, rows, order, in_shape if all_decode else len(order), fed_all)
        for req, pos in sampled:
            if pos > 0:
                d.host[req] = d.host[req] + (-1,)
        ws2 = d.freeze(
            slots=order,
            prev_map=tuple((req, i) for i, (req, pos) in enumerate(sampled) if pos > 0),
            prev_sampled=tuple((req, pos) if pos > 0 else DISCARDED for req, pos in sampled)
            + (PAD,) * ((in_shape if all_decode else len(order)) - len(order)),
            last=last, **count(ws, fed_all, fed_all))
        out.append((ws2, frozenset(d.events)))
    return out
