"""vllm-neuron: the ``async_execution_buffer`` flow, the per-output lock, the output thread.

Models ``vllm_neuron/vllm/worker/neuron_model_runner.py`` as read at
vllm-project/vllm-neuron commit 9fc042eaa7e50fbfda292b75c980bf56a9a0e8b6
(``docs/worker.md`` has the function-by-function table and every difference):

* ``_guard`` -- ``NeuronModelRunner.execute_model``, the check before
  ``_update_states``: the scheduled request set differs from
  ``prev_req_ids_ordered`` => ``_materialize_pending_async_output`` and
  ``_batch_composition_changed``.  It runs on empty steps too
  (``execute_empty_step``);
* ``_update_states`` -- ``_update_states`` (vLLM's V1 code, copied verbatim):
  finished requests dropped, a request not in the persistent batch re-added
  with the scheduler's token history;
* ``_swap`` / ``_reuse_future`` -- ``_maybe_swap_async_input_ids``,
  ``_try_reuse_nonspec_future``, ``_maybe_remap_async_future``: same order =>
  the future (async); same set, other order => remapped clone (sync fallback);
* ``_materialize_after_decline`` / ``_fixup`` -- the declined-swap branch of
  ``execute_model`` (materialise, re-prep) and
  ``_apply_async_fallback_token_fixup``;
* ``_sample`` -- ``sample_tokens`` / ``_generate_model_runner_output``: the
  new future, ``prev_req_ids_ordered`` and the output, stored every step; a
  row's sample is discarded only when ``_get_partial_prefill_req_ids`` says so
  (its chunk ends inside the *prompt*), so a resumed request's recompute chunk
  that ends inside its old outputs keeps a re-sample (``RESAMPLED``);
* ``main_materialize`` / ``output_thread_step`` / ``_write_samples`` --
  ``AsyncNeuronModelRunnerOutput.get_output`` (one lock per output: the output
  thread and the main thread materialise it once) and
  ``_update_batch_state_with_samples`` (rows still in the batch).

Two tensor-parallel ranks: the output rank (``host``, its output thread,
the lock) and one other rank (``off_host``).  Every rank runs the same main
thread; only the output rank's outputs are materialised by vLLM's output
thread (``WorkerProc.worker_busy_loop`` calls ``handle_output`` on the output
rank alone), so the other rank's host history advances only when its main
thread materialises the buffer's output (``_off_materialize``).

The output thread (``async_output_busy_loop``) is two interleaved actions:
``output_wait`` (take the oldest undelivered output's lock, wait on the
device) and ``output_done`` (materialise, release, deliver).
"""
from __future__ import annotations

from asyncspec.spec.cites import NEURON_RUNNER, models, models_static
from asyncspec.spec.worker import (
    DISCARDED, PAD, RESAMPLED, W_ALREADY_ACTUALIZED, W_MATERIALIZE_MAIN, W_MISMATCH, W_REMAP,
    Buffer, OutputRec, Row, Token, WDraft, WorkerConfig, WorkerState, batch_orders, check_feed,
    count, finish_step, host_read, reset_host, shapes, step_events,
)

OUTPUT_WAIT = "output_wait"
OUTPUT_DONE = "output_done"


class Blocked(Exception):
    """The main thread would wait for the lock the output thread holds."""


# ---------------------------------------------------------------- materialisation


def _is_sample(token: Token) -> bool:
    """A kept sample (not a discarded partial-prefill row, not padding)."""
    return token[0] >= 0 or token == RESAMPLED


@models_static(NEURON_RUNNER, "NeuronModelRunner._get_partial_prefill_req_ids")
def _neuron_sample(row: Row) -> int:
    """What ``_get_partial_prefill_req_ids`` lets ``row`` sample: its position, 0, or ``RESAMPLED[1]``.

    vllm-neuron discards a row's sample only when ``num_computed_tokens +
    num_scheduled < num_prompt_tokens`` (the prompt alone; vLLM's runner
    compares with ``num_tokens``, as the spec's ``sampled_position`` does). A
    resumed request's recompute chunk that ends inside its old outputs is a
    non-final chunk for the scheduler but keeps its sample on Neuron: a fresh
    draw for a position whose token the request already has.
    """
    if row.sampled_position > 0 or row.last_pos + 1 < row.num_prompt:
        return row.sampled_position
    return RESAMPLED[1]


@models_static(NEURON_RUNNER, "NeuronModelRunner._update_batch_state_with_samples")
def _write_samples(d: WDraft, rec: OutputRec, batch: tuple[int, ...]) -> None:
    """``_update_batch_state_with_samples``: write at each row's cursor, skip rows gone."""
    for req, pos in rec.rows:
        if pos != 0 and req in batch:
            d.host[req] = d.host[req] + (pos,)


@models_static(NEURON_RUNNER, "AsyncNeuronModelRunnerOutput.get_output")
def _materialize(d: WDraft, i: int, batch: tuple[int, ...], waiter_done: bool) -> None:
    """Actualise ``d.outputs[i]`` (host write, counters); ``waiter_done``: a waiter leaves."""
    rec = d.outputs[i]
    _write_samples(d, rec, batch)
    d.outputs[i] = rec._replace(actualized=True, materializations=rec.materializations + 1,
                                waiters=rec.waiters - (1 if waiter_done else 0))


@models_static(NEURON_RUNNER, "AsyncNeuronModelRunnerOutput.get_output")
def already_actualized(rec: OutputRec) -> bool:
    """``get_output``'s first check under the lock: the output was already actualised."""
    return rec.actualized


@models_static(NEURON_RUNNER, "NeuronModelRunner._materialize_pending_async_output",
               "AsyncNeuronModelRunnerOutput.get_output")
def main_materialize(d: WDraft, step: int, batch: tuple[int, ...]) -> bool:
    """``_materialize_pending_async_output`` on the worker main thread.

    Returns False for an all-partial-prefill output (the main thread refuses).
    Raises ``Blocked`` when the output thread holds the lock (the step waits).
    """
    i = output_index(d, step)
    if i is None:
        return True  # already processed by the engine, hence delivered and actualised
    rec = d.outputs[i]
    if not rec.samples:
        return False
    if rec.thread_waiting:
        raise Blocked
    if already_actualized(rec):
        d.events.add(W_ALREADY_ACTUALIZED)
        return True
    d.events.add(W_MATERIALIZE_MAIN)
    _materialize(d, i, batch, waiter_done=False)
    return True


def output_index(d: WDraft, step: int) -> int | None:
    """Where step ``step``'s output is in ``d.outputs`` (None: the engine has processed it)."""
    return next((k for k, o in enumerate(d.outputs) if o.step == step), None)


# ---------------------------------------------------------------- execute_model + sample_tokens


OFF_RANK = " on TP rank 1 (not the output rank)"


@models("vllm.v1.executor.multiproc_executor.WorkerProc.worker_busy_loop")
@models_static(NEURON_RUNNER, "AsyncNeuronModelRunnerOutput.get_output",
               "NeuronModelRunner._update_batch_state_with_samples")
def _off_materialize(d: WDraft, buf: Buffer, batch: tuple[int, ...]) -> Buffer:
    """The non-output rank's ``get_output`` on its own copy of the buffer's output.

    No output thread materialises there (``worker_busy_loop`` hands outputs to
    ``handle_output`` only on the output rank), so this main-thread call is the
    only write its host history gets; the write cursor lags after async steps.
    """
    if buf.off_actualized:
        return buf
    for req, token in zip(buf.prev_req_ids_ordered, buf.future):
        if _is_sample(token) and req in batch:
            d.off_host[req] = d.off_host[req] + (token[1],)
    return buf._replace(off_actualized=True)


@models_static(NEURON_RUNNER, "NeuronModelRunner._materialize_pending_async_output")
def materialize_pending(d: WDraft, buf: Buffer, batch: tuple[int, ...]) -> tuple[bool, Buffer]:
    """``_materialize_pending_async_output`` on both ranks: (it returned True, the buffer)."""
    if not main_materialize(d, buf.step, batch):
        return False, buf
    return True, _off_materialize(d, buf, batch)


@models_static(NEURON_RUNNER, "NeuronModelRunner.execute_model",
               "NeuronModelRunner._materialize_pending_async_output")
def _guard_materialize(d: WDraft, buf: Buffer, batch: tuple[int, ...]) -> Buffer:
    """The guard's ``_materialize_pending_async_output("batch composition changed")``."""
    return materialize_pending(d, buf, batch)[1]


@models_static(NEURON_RUNNER, "NeuronModelRunner.execute_model")
def _guard(d: WDraft, ws: WorkerState, curr: set[int]) -> tuple[bool, Buffer | None]:
    """The check before ``_update_states``: (``_batch_composition_changed``, the buffer)."""
    buf = ws.buffer
    if buf is None or curr == set(buf.prev_req_ids_ordered):
        return False, buf
    buf = _guard_materialize(d, buf, ws.slots)
    pending = next((o for o in d.outputs if o.step == buf.step), None)
    if pending is not None and pending.samples and not pending.actualized:
        d.error("w3", f"composition changed ({sorted(buf.prev_req_ids_ordered)} -> {sorted(curr)}) "
                      f"but step {buf.step}'s output was not materialised before _update_states")
    return True, buf


@models("vllm.v1.worker.gpu_model_runner.GPUModelRunner._update_states")
@models_static(NEURON_RUNNER, "NeuronModelRunner._update_states")
def _update_states(d: WDraft, ws: WorkerState, rows: tuple[Row, ...], finished: frozenset[int]) -> None:
    """``_update_states`` on both ranks (vLLM's V1 code, copied verbatim by vllm-neuron).

    Finished requests drop their state; a request not in the persistent batch
    (new, resumed, or absent from the last executed step) is re-added with the
    scheduler's token history (``all_token_ids``), densely on every rank.
    """
    def readded(r: Row) -> bool:
        return r.fresh or r.req not in ws.slots

    reset_host(d, rows, finished, readded)
    for req in finished:
        d.off_host[req] = ()
    for r in rows:
        if readded(r):
            d.off_host[r.req] = d.host[r.req]


@models_static(NEURON_RUNNER, "NeuronModelRunner._try_reuse_nonspec_future",
               "NeuronModelRunner._maybe_remap_async_future")
def _reuse_future(d: WDraft, buf: Buffer, order: tuple[int, ...]) -> tuple[list[Token], bool, bool]:
    """``_try_reuse_nonspec_future`` / ``_maybe_remap_async_future``: (fed, counted async, device fed)."""
    if order == buf.prev_req_ids_ordered:
        return list(buf.future[: len(order)]), True, True
    d.events.add(W_REMAP)
    prev = buf.prev_req_ids_ordered
    return [buf.future[prev.index(req)] for req in order], False, False


@models_static(NEURON_RUNNER, "NeuronModelRunner.execute_model",
               "NeuronModelRunner._materialize_pending_async_output")
def _materialize_after_decline(d: WDraft, buf: Buffer | None, order: tuple[int, ...],
                               changed: bool, all_decode: bool) -> tuple[bool, Buffer | None]:
    """``execute_model`` after a declined swap: materialise the pending output (then re-prep)."""
    if buf is None:
        return False, buf
    if all_decode and not changed:
        d.events.add(W_MISMATCH)
    return materialize_pending(d, buf, order)


@models_static(NEURON_RUNNER, "NeuronModelRunner._apply_async_fallback_token_fixup")
def _fixup(buf: Buffer, order: tuple[int, ...], fed: list[Token]) -> list[Token]:
    """``_apply_async_fallback_token_fixup``: each decode row takes its request's previous token."""
    prev = {req: token for req, token in zip(buf.prev_req_ids_ordered, buf.future) if _is_sample(token)}
    return [prev.get(req, token) for req, token in zip(order, fed)]


@models_static(NEURON_RUNNER, "NeuronModelRunner._maybe_swap_async_input_ids")
def _swap(wcfg: WorkerConfig, d: WDraft, buf: Buffer | None, rows: tuple[Row, ...], order: tuple[int, ...],
          changed: bool) -> tuple[list[Token], list[Token], bool, bool]:
    """``_maybe_swap_async_input_ids`` and the rebuild.

    Returns (fed on the output rank, fed on the other rank, counted async, device fed).
    """
    all_decode, in_shape = shapes(wcfg, rows)
    if buf is not None and all_decode and not changed and len(buf.future) == in_shape:
        fed, counted_async, device_fed = _reuse_future(d, buf, order)
        return fed, fed, counted_async, device_fed
    materialized, buf = _materialize_after_decline(d, buf, order, changed, all_decode)
    by_req = {r.req: r for r in rows}
    fed = [host_read(d.host[req], by_req[req]) for req in order]
    fed_off = [host_read(d.off_host[req], by_req[req]) for req in order]
    if buf is not None and materialized and all_decode:
        fed, fed_off = _fixup(buf, order, fed), _fixup(buf, order, fed_off)
    return fed, fed_off, False, False


@models_static(NEURON_RUNNER, "NeuronModelRunner.execute_model", "NeuronModelRunner.sample_tokens")
def execute(wcfg: WorkerConfig, ws: WorkerState, rows: tuple[Row, ...],
            finished: frozenset[int]) -> list[tuple[WorkerState, frozenset[str]]]:
    """One ``execute_model`` + ``sample_tokens`` per possible row order, on both ranks.

    Returns no successor while the main thread would block on the output
    thread's lock (the step runs once the output thread is done).
    """
    out = []
    by_req = {r.req: r for r in rows}
    for order in batch_orders(wcfg, ws.slots, rows):
        d = WDraft.of(ws)
        d.events |= step_events(wcfg, ws.last, order, rows)
        try:
            changed, buf = _guard(d, ws, set(by_req))
            _update_states(d, ws, rows, finished)
            fed, fed_off, counted_async, device_fed = _swap(wcfg, d, buf, rows, order, changed)
        except Blocked:
            return []  # the main thread waits for the output thread: not enabled yet
        for req, token, token_off in zip(order, fed, fed_off):
            check_feed(d, by_req[req], token)
            check_feed(d, by_req[req], token_off, OFF_RANK)
        out.append(_sample(wcfg, d, ws, rows, order, counted_async, device_fed))
    return out


@models_static(NEURON_RUNNER, "NeuronModelRunner.sample_tokens", "NeuronModelRunner._bookkeeping_sync",
               "NeuronModelRunner._generate_model_runner_output")
def _sample(wcfg: WorkerConfig, d: WDraft, ws: WorkerState, rows: tuple[Row, ...],
            order: tuple[int, ...], counted_async: bool, device_fed: bool) -> tuple[WorkerState, frozenset[str]]:
    """``sample_tokens``: the new future, the output record, reinstatement, counters."""
    by_req = {r.req: r for r in rows}
    out_shape = _future_shape(wcfg, rows, order)
    snapshot = tuple((req, _neuron_sample(by_req[req])) for req in order)
    future = tuple((req, pos) if pos > 0 else RESAMPLED if pos < 0 else DISCARDED for req, pos in snapshot)
    future += (PAD,) * (out_shape - len(order))
    step = ws.steps + 1
    d.outputs.append(OutputRec(step, snapshot, False, 0, 0, False, False))
    last = finish_step(wcfg, d, rows, order, out_shape, counted_async)
    ws2 = d.freeze(slots=order, buffer=Buffer(future, order, step), last=last,
                   **count(ws, counted_async, device_fed))
    return ws2, frozenset(d.events)


@models_static(NEURON_RUNNER, "NeuronModelRunner._generate_model_runner_output")
def _future_shape(wcfg: WorkerConfig, rows: tuple[Row, ...], order: tuple[int, ...]) -> int:
    """Rows of the new future: the padded bucket on a decode step (no trim under async), else one per row."""
    all_decode, in_shape = shapes(wcfg, rows)
    return in_shape if all_decode else len(order)


@models("vllm.v1.engine.core.EngineCore.step_with_batch_queue")
@models_static(NEURON_RUNNER, "NeuronModelRunner.execute_model")
def execute_empty_step(ws: WorkerState, finished: frozenset[int]) -> tuple[WorkerState, frozenset[str]] | None:
    """An empty step still runs ``execute_model`` up to its early return.

    ``step_with_batch_queue`` submits an empty ``SchedulerOutput`` too. The
    guard sees an empty request set (a composition change whenever the buffer
    is set) and materialises the pending output; ``_update_states`` then drops
    every row (all unscheduled), and ``EMPTY_MODEL_RUNNER_OUTPUT`` is returned
    before the swap: no counter moves and the buffer is kept. None while the
    main thread would wait for the output thread's lock.
    """
    d = WDraft.of(ws)
    try:
        _, buf = _guard(d, ws, set())
    except Blocked:
        return None
    _update_states(d, ws, (), finished)
    d.outputs.append(OutputRec(0, (), True, 0, 0, False, True))
    return d.freeze(slots=(), buffer=buf), frozenset(d.events)


# ---------------------------------------------------------------- output thread


@models("vllm.v1.executor.multiproc_executor.WorkerProc.async_output_busy_loop")
def output_thread_actions(ws: WorkerState) -> list[str]:
    """The output thread's enabled action: wait on the oldest undelivered output, or finish it."""
    rec = next((o for o in ws.outputs if not o.delivered), None)
    if rec is None:
        return []
    return [OUTPUT_DONE if rec.thread_waiting else OUTPUT_WAIT]


@models("vllm.v1.executor.multiproc_executor.WorkerProc.async_output_busy_loop")
@models_static(NEURON_RUNNER, "AsyncNeuronModelRunnerOutput.get_output")
def output_thread_step(ws: WorkerState, action: str) -> tuple[WorkerState, frozenset[str]]:
    """``get_output`` on the output thread: take the lock and wait, then materialise."""
    d = WDraft.of(ws)
    i = next(k for k, o in enumerate(d.outputs) if not o.delivered)
    rec = d.outputs[i]
    if action == OUTPUT_WAIT:
        if already_actualized(rec):
            d.events.add(W_ALREADY_ACTUALIZED)
            d.outputs[i] = rec._replace(delivered=True)
        else:
            d.outputs[i] = rec._replace(thread_waiting=True, waiters=rec.waiters + 1)
        return d.freeze(), frozenset(d.events)
    _materialize(d, i, ws.slots, waiter_done=True)
    d.outputs[i] = d.outputs[i]._replace(thread_waiting=False, delivered=True)
    return d.freeze(), frozenset(d.events)


@models("vllm.v1.engine.core.EngineCore.step_with_batch_queue")
def engine_processed(ws: WorkerState) -> WorkerState:
    """The engine processed the oldest step: drop its output; W2 if not materialised once."""
    d = WDraft.of(ws)
    rec = d.outputs.pop(0)
    if rec.step > 0 and rec.materializations != 1:
        d.error("w2", f"step {rec.step}'s output reached the engine after "
                      f"{rec.materializations} materialisations")
    return d.freeze()


@models("vllm.v1.engine.core.EngineCore.step_with_batch_queue")
def can_deliver(ws: WorkerState) -> bool:
    """The engine core's wait on the oldest step returns (the output thread delivered it)."""
    return bool(ws.outputs) and ws.outputs[0].delivered

