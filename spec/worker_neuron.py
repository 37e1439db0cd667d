"""vllm-neuron: the ``async_execution_buffer`` flow, the per-output lock, the output thread.

Models ``vllm_neuron/vllm/worker/neuron_model_runner.py``:

* ``execute_model``'s guard before ``_update_states``: the scheduled request
  set differs from ``prev_req_ids_ordered`` => ``_materialize_pending_async_output``
  and ``_batch_composition_changed``;
* ``_update_states`` (persistent batch: drop unscheduled/finished rows,
  ``condense``, add rows; new/resumed rows copy the host history) and
  ``_prepare_model_input`` (CPU ids read ``token_ids_cpu``; decode steps pad
  to a bucket);
* ``_maybe_swap_async_input_ids`` / ``_try_reuse_nonspec_future`` /
  ``_maybe_remap_async_future``: same order => the future (async); same set,
  other order => remapped clone (sync fallback); shape mismatch =>
  materialise and rebuild (sync fallback); otherwise CPU ids (fallback, after
  materialising and rebuilding when the set is unchanged);
* ``_generate_model_runner_output`` / ``sample_tokens``: reinstatement — the
  new future, ``prev_req_ids_ordered`` and the output are stored every step;
* ``AsyncNeuronModelRunnerOutput.get_output``: one lock per output, so the
  output thread and the main thread materialise it once
  (``_update_batch_state_with_samples`` writes rows still in the batch).

The output thread (``async_output_busy_loop``) is two interleaved actions:
``output_wait`` (take the oldest undelivered output's lock, wait on the
device) and ``output_done`` (materialise, release, deliver).
"""
from __future__ import annotations

from .worker import (
    DISCARDED, PAD, W_ALREADY_ACTUALIZED, W_MATERIALIZE_MAIN, W_MISMATCH, W_REMAP,
    Buffer, OutputRec, Row, Token, WDraft, WorkerConfig, WorkerState, batch_orders, check_feed,
    count, finish_step, host_read, reset_host, shapes, step_events,
)

OUTPUT_WAIT = "output_wait"
OUTPUT_DONE = "output_done"


class Blocked(Exception):
    """The main thread would wait for the lock the output thread holds."""


# ---------------------------------------------------------------- materialisation


def _write_samples(d: WDraft, rec: OutputRec, batch: tuple[int, ...]) -> None:
    """``_update_batch_state_with_samples``: write at each row's cursor, skip rows gone."""
    for req, pos in rec.rows:
        if pos > 0 and req in batch:
            d.host[req] = d.host[req] + (pos,)


def _materialize(d: WDraft, i: int, batch: tuple[int, ...], waiter_done: bool) -> None:
    """Actualise ``d.outputs[i]`` (host write, counters); ``waiter_done``: a waiter leaves."""
    rec = d.outputs[i]
    _write_samples(d, rec, batch)
    d.outputs[i] = rec._replace(actualized=True, materializations=rec.materializations + 1,
                                waiters=rec.waiters - (1 if waiter_done else 0))


def main_materialize(wcfg: WorkerConfig, d: WDraft, step: int, batch: tuple[int, ...]) -> bool:
    """``_materialize_pending_async_output`` on the worker main thread.

    Returns False for an all-partial-prefill output (the main thread refuses).
    Raises ``Blocked`` when the output thread holds the lock (the step waits).
    """
    i = next((k for k, o in enumerate(d.outputs) if o.step == step), None)
    if i is None:
        return True  # already processed by the engine, hence delivered and actualised
    rec = d.outputs[i]
    if not rec.samples:
        return False
    if rec.thread_waiting and wcfg.mutant != "neuron_no_lock":
        raise Blocked
    if rec.actualized and wcfg.mutant != "neuron_materialize_twice":
        d.events.add(W_ALREADY_ACTUALIZED)
        return True
    if rec.thread_waiting:  # mutant: a second waiter on the same execution
        d.outputs[i] = rec._replace(waiters=rec.waiters + 1)
        d.error("w2", f"step {step}'s execution has two waiters (output thread and main thread)")
        rec = d.outputs[i]
    d.events.add(W_MATERIALIZE_MAIN)
    _materialize(d, i, batch, waiter_done=rec.thread_waiting)
    return True


# ---------------------------------------------------------------- execute_model + sample_tokens


def _guard(wcfg: WorkerConfig, d: WDraft, ws: WorkerState, curr: set[int]) -> bool:
    """The check before ``_update_states``; returns ``_batch_composition_changed``."""
    buf = ws.buffer
    if buf is None or curr == set(buf.prev_req_ids_ordered):
        return False
    if wcfg.mutant != "neuron_skip_guard_materialize":
        main_materialize(wcfg, d, buf.step, ws.slots)
    pending = next((o for o in d.outputs if o.step == buf.step), None)
    if pending is not None and pending.samples and not pending.actualized:
        d.error("w3", f"composition changed ({sorted(buf.prev_req_ids_ordered)} -> {sorted(curr)}) "
                      f"but step {buf.step}'s output was not materialised before _update_states")
    return True


def _swap(wcfg: WorkerConfig, d: WDraft, ws: WorkerState, rows: tuple[Row, ...],
          order: tuple[int, ...], changed: bool) -> tuple[list[Token], bool, bool]:
    """``_maybe_swap_async_input_ids`` and the rebuild: (fed tokens, counted async, device fed)."""
    buf = ws.buffer
    by_req = {r.req: r for r in rows}
    all_decode, in_shape = shapes(wcfg, rows)
    if buf is not None and all_decode and not changed:
        if len(buf.future) == in_shape:
            same_order = order == buf.prev_req_ids_ordered
            if same_order or wcfg.mutant == "neuron_reuse_without_remap":
                return list(buf.future[: len(order)]), True, same_order
            d.events.add(W_REMAP)
            prev = buf.prev_req_ids_ordered
            fed = [buf.future[prev.index(req)] for req in order]
            return fed, wcfg.mutant == "neuron_remap_counted_async", False
        d.events.add(W_MISMATCH)
        if wcfg.mutant != "neuron_no_materialize_on_mismatch":
            main_materialize(wcfg, d, buf.step, order)
    elif buf is not None and not changed and wcfg.mutant != "neuron_no_rebuild_on_mixed_step":
        main_materialize(wcfg, d, buf.step, order)  # declined swap on a prefill/mixed step
    return [host_read(d.host[req], by_req[req]) for req in order], False, False


def execute(wcfg: WorkerConfig, ws: WorkerState, rows: tuple[Row, ...],
            finished: frozenset[int]) -> list[tuple[WorkerState, frozenset[str]]]:
    """One ``execute_model`` + ``sample_tokens`` per possible row order.

    Returns no successor while the main thread would block on the output
    thread's lock (the step runs once the output thread is done).
    """
    out = []
    for order in batch_orders(wcfg, ws.slots, rows):
        d = WDraft.of(ws)
        d.events |= step_events(wcfg, ws.last, order, rows)
        try:
            changed = _guard(wcfg, d, ws, {r.req for r in rows})
            reset_host(d, rows, finished, lambda r: r.fresh)
            fed, counted_async, device_fed = _swap(wcfg, d, ws, rows, order, changed)
        except Blocked:
            return []  # the main thread waits for the output thread: not enabled yet
        by_req = {r.req: r for r in rows}
        for req, token in zip(order, fed):
            check_feed(d, by_req[req], token)
        out.append(_sample(wcfg, d, ws, rows, order, counted_async, device_fed))
    return out


def _sample(wcfg: WorkerConfig, d: WDraft, ws: WorkerState, rows: tuple[Row, ...],
            order: tuple[int, ...], counted_async: bool, device_fed: bool) -> tuple[WorkerState, frozenset[str]]:
    """``sample_tokens``: the new future, the output record, reinstatement, counters."""
    by_req = {r.req: r for r in rows}
    all_decode, in_shape = shapes(wcfg, rows)
    out_shape = in_shape if all_decode and wcfg.mutant != "neuron_trim_future" else len(order)
    snapshot = tuple((req, by_req[req].sampled_position) for req in order)
    future = tuple((req, pos) if pos > 0 else DISCARDED for req, pos in snapshot)
    future += (PAD,) * (out_shape - len(order))
    step = ws.steps + 1
    d.outputs.append(OutputRec(step, snapshot, False, 0, 0, False, False))
    last = finish_step(wcfg, d, rows, order, out_shape, counted_async)
    buffer: Buffer | None = Buffer(future, order, step)
    if wcfg.mutant == "neuron_no_reinstate" and not counted_async:
        buffer = None
    ws2 = d.freeze(slots=order, buffer=buffer, last=last, **count(ws, counted_async, device_fed))
    return ws2, frozenset(d.events)


def execute_empty(ws: WorkerState) -> WorkerState:
    """An empty step: nothing executes; its (empty) output is delivered at once."""
    return ws._replace(outputs=ws.outputs + (OutputRec(0, (), True, 0, 0, False, True),))


# ---------------------------------------------------------------- output thread


def output_thread_actions(ws: WorkerState) -> list[str]:
    """The output thread's enabled action: wait on the oldest undelivered output, or finish it."""
    rec = next((o for o in ws.outputs if not o.delivered), None)
    if rec is None:
        return []
    return [OUTPUT_DONE if rec.thread_waiting else OUTPUT_WAIT]


def output_thread_step(wcfg: WorkerConfig, ws: WorkerState, action: str) -> tuple[WorkerState, frozenset[str]]:
    """``get_output`` on the output thread: take the lock and wait, then materialise."""
    d = WDraft.of(ws)
    i = next(k for k, o in enumerate(d.outputs) if not o.delivered)
    rec = d.outputs[i]
    if action == OUTPUT_WAIT:
        if rec.actualized and wcfg.mutant != "neuron_materialize_twice":
            d.events.add(W_ALREADY_ACTUALIZED)
            d.outputs[i] = rec._replace(delivered=True)
        else:
            d.outputs[i] = rec._replace(thread_waiting=True, waiters=rec.waiters + 1)
        return d.freeze(), frozenset(d.events)
    _materialize(d, i, ws.slots, waiter_done=True)
    d.outputs[i] = d.outputs[i]._replace(thread_waiting=False, delivered=True)
    return d.freeze(), frozenset(d.events)


def engine_processed(ws: WorkerState) -> WorkerState:
    """The engine processed the oldest step: drop its output; W2 if not materialised once."""
    d = WDraft.of(ws)
    rec = d.outputs.pop(0)
    if rec.step > 0 and rec.materializations != 1:
        d.error("w2", f"step {rec.step}'s output reached the engine after "
                      f"{rec.materializations} materialisations")
    return d.freeze()


def can_deliver(ws: WorkerState) -> bool:
    """The engine core's wait on the oldest step returns (the output thread delivered it)."""
    return bool(ws.outputs) and ws.outputs[0].delivered

