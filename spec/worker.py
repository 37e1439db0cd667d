"""The worker half of async scheduling: device-side token feedback.

The scheduler spec (``spec/engine.py``) decides *what* each step computes; this
module models *how the worker builds the step's input*: the token that step N
samples stays on the device and must be written into step N+1's input row of
the same request.  Three published strategies are modelled, one module each:

* ``v1`` (``spec/worker_v1.py``) — vLLM's V1 GPU runner: the previous sampled
  tensor is gathered by ``prev_req_id_to_index``; rows of requests not in the
  previous batch are built on the CPU;
* ``v2`` (``spec/worker_v2.py``) — Model Runner V2: the last sampled token is
  kept per *request slot* on the device;
* ``neuron`` (``spec/worker_neuron.py``) — vllm-neuron: the
  ``async_execution_buffer`` (the future plus ``prev_req_ids_ordered``), the
  composition guard, swap / remap / mismatch decisions, the fallback token
  fixup, the per-output lock and the output thread, on the output TP rank and
  on one other rank (whose outputs no output thread materialises).

Tokens are identified as ``(request, output position)`` (position 0 = a prompt
token); the scheduler spec's ``StepEntry.sampled_position`` says which token a
step samples.  So "the input fed to a row" is a value that can be compared with
the token the request needs.  This module holds what the strategies share: the
row description derived from a scheduled step, the worker state, the persistent
batch (condense + reorder), the generic witnesses and the properties W1-W4.

Example:
    >>> from asyncspec.spec.config import SpecConfig
    >>> cfg = SpecConfig(name="x", requests=((2, 2), (2, 2)))
    >>> ws = initial_worker_state(cfg)
    >>> ws.steps, ws.buffer is None, condense((0, 1, 2), {1, 2})
    (0, True, (2, 1))
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Callable, Literal, NamedTuple

from asyncspec.spec import request as rq
from asyncspec.spec.algebra import CONCRETE as A
from asyncspec.spec.cites import NEURON_RUNNER, models, models_static
from asyncspec.spec.config import SpecConfig
from asyncspec.spec.state import EngineState, Step, request_name

Strategy = Literal["v1", "v2", "neuron"]
STRATEGIES: tuple[Strategy, ...] = ("v1", "v2", "neuron")
ReorderMode = Literal["none", "any"]

Token = tuple[int, int]  # (request, output position); position 0 = a prompt token
PLACEHOLDER: Token = (-1, -1)  # V1's -1 written into token_ids_cpu at bookkeeping
STALE: Token = (-1, -2)  # a host slot the worker never wrote (whatever was there)
PAD: Token = (-1, -3)  # a padding row of a padded device tensor
DISCARDED: Token = (-1, -4)  # the sample of a non-final prefill chunk (thrown away)
RESAMPLED: Token = (-1, -5)  # Neuron: a recompute chunk's fresh sample of an output the request already has
_SPECIAL = {PLACEHOLDER: "the -1 placeholder", STALE: "a stale host slot",
            PAD: "a padding row", DISCARDED: "a discarded partial-prefill sample",
            RESAMPLED: "a recompute chunk's re-sample of an output it already has"}


def prompt_token(req: int) -> Token:
    """The input of a row whose last scheduled position is a prompt token."""
    return (req, 0)


def token_name(t: Token) -> str:
    """Human-readable token: ``r0#2`` = output position 2 of r0."""
    if t in _SPECIAL:
        return _SPECIAL[t]
    return f"{request_name(t[0])}#{t[1]}" if t[1] > 0 else f"{request_name(t[0])} prompt"


# ---------------------------------------------------------------- events (witnesses)

W_REORDER = "worker_reorder"  # same request set as the previous step, different row order
W_COMPOSITION = "worker_composition_change"  # the scheduled request set changed
W_BUCKET = "worker_bucket_change"  # a decode-only step's padded shape differs from the held future
W_PREFILL_TO_DECODE = "worker_prefill_to_decode"  # same set, previous step had a prefill row, now all decode
W_ASYNC = "worker_async_step"  # the input came straight from the device
W_CPU_ROW = "worker_cpu_row"  # V1: some rows from the device, some built on the CPU
W_REMAP = "worker_remap"  # Neuron: same-set reorder, future remapped (sync fallback)
W_MISMATCH = "worker_shape_mismatch"  # Neuron: future shape differs, materialise + rebuild
W_MATERIALIZE_MAIN = "worker_materialize_main"  # Neuron: main thread materialised a pending output
W_ALREADY_ACTUALIZED = "worker_already_actualized"  # Neuron: get_output found the output actualised

WORKER_EVENTS: tuple[str, ...] = (
    W_REORDER, W_COMPOSITION, W_BUCKET, W_PREFILL_TO_DECODE, W_ASYNC, W_CPU_ROW,
    W_REMAP, W_MISMATCH, W_MATERIALIZE_MAIN, W_ALREADY_ACTUALIZED,
)
GENERIC_WITNESSES: tuple[str, ...] = (W_REORDER, W_COMPOSITION, W_BUCKET, W_PREFILL_TO_DECODE, W_ASYNC)
REQUIRED_WITNESSES: dict[str, tuple[str, ...]] = {
    "v1": GENERIC_WITNESSES + (W_CPU_ROW,),
    "v2": GENERIC_WITNESSES,
    "neuron": GENERIC_WITNESSES + (W_REMAP, W_MISMATCH, W_MATERIALIZE_MAIN, W_ALREADY_ACTUALIZED),
}
"""Witnesses a strategy's small configs must reach (else its properties are vacuous)."""


# ---------------------------------------------------------------- configuration


@dataclass(frozen=True)
class WorkerConfig:
    """Worker constants: strategy, padded decode buckets, reorder freedom (bugs: ``checker/worker_mutants.py``)."""

    strategy: Strategy
    decode_buckets: tuple[int, ...] = (1, 4)  # Neuron decode batch buckets (padded shapes)
    reorder: ReorderMode = "any"  # "any": the runner may reorder rows (nondeterministic choice)

    @models_static(NEURON_RUNNER, "NeuronModelRunner._prepare_model_input")
    def bucket(self, n: int) -> int:
        """The padded decode batch size for ``n`` real rows."""
        return next((b for b in sorted(self.decode_buckets) if b >= n), n)


# ---------------------------------------------------------------- rows of a step


class Row(NamedTuple):
    """One request's share of a step, as the worker sees it."""

    req: int
    num_tokens: int
    first_pos: int  # first scheduled sequence position (0-based)
    last_pos: int  # last scheduled sequence position: its token is the row's fed input
    num_prompt: int
    sampled_position: int  # output position the step samples (0 = non-final chunk)
    known_outputs: int  # scheduler's num_output_tokens at scheduling (what it can resend)

    @property
    @models_static(NEURON_RUNNER, "NeuronModelRunner._is_decode_row")
    def is_decode(self) -> bool:
        """One token at an output position (vllm-neuron ``_is_decode_row``)."""
        return self.first_pos >= self.num_prompt and self.num_tokens == 1

    @property
    def fresh(self) -> bool:
        """New or resumed: the row starts at position 0 (``scheduled_new_reqs``)."""
        return self.first_pos == 0

    @property
    def needs(self) -> int:
        """Output position of the row's last input token (<= 0: a prompt token)."""
        return self.last_pos - self.num_prompt + 1

    @property
    def expected(self) -> Token:
        """The token that must be fed at the row's last position."""
        return (self.req, self.needs) if self.needs > 0 else prompt_token(self.req)


@models("vllm.v1.core.sched.output.SchedulerOutput")
def rows_of(step: Step, post: EngineState) -> tuple[Row, ...]:
    """The rows of ``step`` given the scheduler state right after scheduling it."""
    rows = []
    for e in step.entries:
        c = post.counters[e.req]
        last = c.num_computed_tokens - 1
        rows.append(Row(e.req, e.num_tokens, last - e.num_tokens + 1, last,
                        post.params[e.req].num_prompt_tokens, e.sampled_position,
                        c.num_output_tokens))
    return tuple(rows)


@models("vllm.v1.core.sched.output.SchedulerOutput")
def finished_requests(post: EngineState) -> frozenset[int]:
    """Requests the scheduler has finished (the worker drops their state)."""
    return frozenset(i for i, c in enumerate(post.counters) if rq.is_finished(A, c))


# ---------------------------------------------------------------- worker state


class OutputRec(NamedTuple):
    """One executed step's ``AsyncNeuronModelRunnerOutput`` (Neuron only)."""

    step: int  # worker step number (1-based); 0 = an empty step (nothing executed)
    rows: tuple[tuple[int, int], ...]  # snapshot (req, sampled position; 0 = discarded, <0 = RESAMPLED)
    actualized: bool  # the tensor was replaced by lists (some get_output ran)
    materializations: int  # ghost: how many times it was materialised
    waiters: int  # threads currently waiting on this execution
    thread_waiting: bool  # the output thread holds the lock and waits on the device
    delivered: bool  # the output thread handed it to the engine core

    @property
    @models_static(NEURON_RUNNER, "AsyncNeuronModelRunnerOutput.is_all_partial_prefill")
    def samples(self) -> bool:
        """Some row samples a token (not an all-partial-prefill output)."""
        return any(pos != 0 for _, pos in self.rows)


class Buffer(NamedTuple):
    """vllm-neuron ``async_execution_buffer`` (non-spec keys)."""

    future: tuple[Token, ...]  # futures_sampled_token_ids, padded rows
    prev_req_ids_ordered: tuple[int, ...]
    step: int  # the OutputRec that is async_output
    off_actualized: bool = False  # the non-output TP rank's copy of async_output was materialised


class LastExec(NamedTuple):
    """Ghost: the previous executed step, for witnesses and the efficiency property."""

    order: tuple[int, ...]
    all_decode: bool
    in_shape: int
    out_shape: int
    had_prefill: bool


class Errors(NamedTuple):
    """Ghost: the first violation of each worker property (None = none yet)."""

    w1: str | None = None
    w2: str | None = None
    w3: str | None = None
    w4: str | None = None


class WorkerState(NamedTuple):
    """The worker: persistent batch, host tokens, device-held tokens, counters."""

    slots: tuple[int, ...]  # InputBatch.req_ids: rows of the last executed step
    host: tuple[tuple[int, ...], ...]  # per request: output positions on the host (< 0: a special token)
    last_sampled: tuple[int, ...]  # ghost: per request, position its latest executed step sampled
    prev_map: tuple[tuple[int, int], ...] | None  # V1 prev_req_id_to_index (req, row)
    prev_sampled: tuple[Token, ...]  # V1 prev_sampled_token_ids, by row
    req_slot: tuple[int, ...]  # V2: request -> slot (-1 = none)
    prefill_len: tuple[int, ...]  # V2: per request, prompt + resent outputs
    slot_tokens: tuple[Token, ...]  # V2 last_sampled_tokens, by slot
    buffer: Buffer | None  # Neuron async_execution_buffer (None = empty)
    outputs: tuple[OutputRec, ...]  # Neuron: one per queued step, oldest first
    steps: int  # ghost: non-empty steps executed
    async_steps: int  # _async_steps
    sync_fallback_steps: int  # _sync_fallback_steps
    device_fed_steps: int  # ghost: steps fed straight from the device, nothing forced
    last: LastExec | None
    errors: Errors
    off_host: tuple[tuple[int, ...], ...] = ()  # Neuron: a non-output TP rank's host history


@models("vllm.v1.worker.gpu_model_runner.GPUModelRunner.__init__",
        "vllm.v1.worker.gpu.model_runner.GPUModelRunner.__init__")
@models_static(NEURON_RUNNER, "NeuronModelRunner.__init__")
def initial_worker_state(cfg: SpecConfig) -> WorkerState:
    """A warmed-up worker: empty batch, empty buffer, zero counters."""
    n = len(cfg.requests)
    return WorkerState(
        slots=(), host=tuple(() for _ in range(n)), last_sampled=(0,) * n,
        prev_map=None, prev_sampled=(), req_slot=(-1,) * n, prefill_len=(0,) * n,
        slot_tokens=(PAD,) * n, buffer=None, outputs=(), steps=0, async_steps=0,
        sync_fallback_steps=0, device_fed_steps=0, last=None, errors=Errors(),
        off_host=tuple(() for _ in range(n)),
    )


@dataclass
class WDraft:
    """Mutable working copy of a ``WorkerState`` inside one worker action."""

    base: WorkerState
    host: list[tuple[int, ...]]
    last_sampled: list[int]
    outputs: list[OutputRec]
    errors: dict[str, str | None]
    off_host: list[tuple[int, ...]]
    events: set[str] = field(default_factory=set)

    @classmethod
    def of(cls, ws: WorkerState) -> WDraft:
        """A working copy of ``ws``."""
        return cls(ws, list(ws.host), list(ws.last_sampled), list(ws.outputs), ws.errors._asdict(),
                   list(ws.off_host))

    def error(self, prop: str, message: str) -> None:
        """Record the first violation of ``prop`` ("w1".."w4")."""
        if self.errors[prop] is None:
            self.errors[prop] = message

    def freeze(self, **changes: object) -> WorkerState:
        """The new state: the draft's lists plus ``changes`` to other fields."""
        ws = self.base._replace(host=tuple(self.host), last_sampled=tuple(self.last_sampled),
                                outputs=tuple(self.outputs), errors=Errors(**self.errors),
                                off_host=tuple(self.off_host))
        return ws._replace(**changes)  # type: ignore[arg-type]


# ---------------------------------------------------------------- shared mechanics


@models("vllm.v1.worker.gpu_input_batch.InputBatch.condense")
def condense(prev: tuple[int, ...], keep: set[int] | frozenset[int]) -> tuple[int, ...]:
    """Drop rows not in ``keep``, then fill each hole with the last row (``InputBatch.condense``)."""
    rows: list[int | None] = [r if r in keep else None for r in prev]
    i = 0
    while i < len(rows):
        while rows and rows[-1] is None:
            rows.pop()
        if i < len(rows) and rows[i] is None:
            rows[i] = rows.pop()
        i += 1
    return tuple(r for r in rows if r is not None)


@models("vllm.v1.worker.gpu_input_batch.InputBatch.condense",
        "vllm.v1.worker.gpu_input_batch.InputBatch.add_request",
        "vllm.v1.worker.gpu_model_runner.GPUModelRunner._may_reorder_batch")
def batch_orders(wcfg: WorkerConfig, prev: tuple[int, ...], rows: tuple[Row, ...]) -> list[tuple[int, ...]]:
    """Row orders the runner may produce: condense, append new rows, then maybe reorder.

    The first order is the one without a reorder (``_may_reorder_batch`` a no-op).
    """
    curr = [r.req for r in rows]
    base = condense(prev, set(curr))
    base += tuple(r for r in curr if r not in base)
    if wcfg.reorder == "none":
        return [base]
    return [base] + [p for p in itertools.permutations(base) if p != base]


@models("vllm.v1.worker.gpu_model_runner.GPUModelRunner._prepare_inputs")
@models_static(NEURON_RUNNER, "NeuronModelRunner._prepare_model_input")
def host_read(host: tuple[int, ...], row: Row) -> Token:
    """What a CPU-built row reads for its last position from host ``token_ids_cpu``."""
    if row.needs <= 0:
        return prompt_token(row.req)
    if len(host) < row.needs:
        return STALE
    value = host[row.needs - 1]
    return (-1, value) if value < 0 else (row.req, value)  # -1: PLACEHOLDER, -5: RESAMPLED


def check_feed(d: WDraft, row: Row, fed: Token, where: str = "") -> None:
    """W1: the row's input is the token last sampled for its request (``where``: e.g. a TP rank)."""
    want = row.expected
    if fed != want:
        who = "another request's token" if fed[0] >= 0 and fed[0] != row.req else token_name(fed)
        d.error("w1", f"{request_name(row.req)} fed {token_name(fed)} ({who}) but needs "
                      f"{token_name(want)}{where}")
    elif row.is_decode and d.last_sampled[row.req] != row.needs:
        d.error("w1", f"{request_name(row.req)} fed {token_name(fed)} but the last token sampled "
                      f"for it is #{d.last_sampled[row.req]}")


@models_static(NEURON_RUNNER, "NeuronModelRunner._prepare_model_input", "NeuronModelRunner._is_decode")
def shapes(wcfg: WorkerConfig, rows: tuple[Row, ...]) -> tuple[bool, int]:
    """(all rows decode, padded input shape): decode steps pad to a bucket."""
    all_decode = all(r.is_decode for r in rows)
    return all_decode, wcfg.bucket(len(rows)) if all_decode else sum(r.num_tokens for r in rows)


def step_events(wcfg: WorkerConfig, last: LastExec | None, order: tuple[int, ...],
                rows: tuple[Row, ...]) -> set[str]:
    """The generic witnesses of executing ``rows`` in ``order`` after ``last``."""
    if last is None:
        return set()
    all_decode, in_shape = shapes(wcfg, rows)
    if set(order) != set(last.order):
        return {W_COMPOSITION}
    out = set()
    if order != last.order:
        out.add(W_REORDER)
    if all_decode and last.had_prefill:
        out.add(W_PREFILL_TO_DECODE)
    if all_decode and in_shape != last.out_shape:
        out.add(W_BUCKET)
    return out


def finish_step(wcfg: WorkerConfig, d: WDraft, rows: tuple[Row, ...], order: tuple[int, ...],
                out_shape: int, counted_async: bool) -> LastExec:
    """Counters, W4 checks and the sampled-token ghost after one execution."""
    all_decode, in_shape = shapes(wcfg, rows)
    last = d.base.last
    steady = (last is not None and last.all_decode and all_decode and last.order == order
              and last.in_shape == in_shape)
    if steady and not counted_async:
        d.error("w4", f"steady decode step (same batch {list(order)}, shape {in_shape}) "
                      "was not async")
    if counted_async:
        d.events.add(W_ASYNC)
    for r in rows:
        if r.sampled_position > 0:
            d.last_sampled[r.req] = r.sampled_position
    return LastExec(order, all_decode, in_shape, out_shape, not all_decode)


@models_static(NEURON_RUNNER, "NeuronModelRunner.execute_model")
def count(ws: WorkerState, counted_async: bool, device_fed: bool) -> dict[str, int]:
    """The counter fields after one more executed step."""
    return {
        "steps": ws.steps + 1,
        "async_steps": ws.async_steps + (1 if counted_async else 0),
        "sync_fallback_steps": ws.sync_fallback_steps + (0 if counted_async else 1),
        "device_fed_steps": ws.device_fed_steps + (1 if device_fed else 0),
    }


@models("vllm.v1.worker.gpu_model_runner.GPUModelRunner._update_states",
        "vllm.v1.worker.gpu_input_batch.InputBatch.remove_request",
        "vllm.v1.worker.gpu_input_batch.InputBatch.add_request")
@models_static(NEURON_RUNNER, "NeuronModelRunner._update_states")
def reset_host(d: WDraft, rows: tuple[Row, ...], finished: frozenset[int],
               refresh: Callable[[Row], bool]) -> None:
    """``_update_states``: drop finished requests; rows with ``refresh`` get the scheduler's tokens."""
    for req in finished:
        d.host[req] = ()
        d.last_sampled[req] = 0
    for r in rows:
        if refresh(r):
            d.host[r.req] = tuple(range(1, r.known_outputs + 1))
    forget_dropped_samples(d, rows)


def forget_dropped_samples(d: WDraft, rows: tuple[Row, ...]) -> None:
    """Ghost: a new or resumed row restarts from the scheduler's known outputs.

    A step in flight when its request was preempted in drop mode sampled positions
    that the scheduler drops and samples again; they are not "the token last
    sampled" for the resumed request (W1's cross-check).
    """
    for r in rows:
        if r.fresh:
            d.last_sampled[r.req] = r.known_outputs


# ---------------------------------------------------------------- properties W1-W4


class WorkerAlways(NamedTuple):
    """A worker safety property, checked on every reachable joint state."""

    name: str
    check: Callable[[WorkerState], str | None]
    applies: Callable[[Strategy], bool]
    why: str


@models("vllm.v1.worker.gpu_model_runner.GPUModelRunner._prepare_input_ids",
        "vllm.v1.worker.gpu.input_batch.combine_sampled_and_draft_tokens")
@models_static(NEURON_RUNNER, "NeuronModelRunner._maybe_swap_async_input_ids")
def w1_feed(ws: WorkerState) -> str | None:
    """W1: every row is fed exactly the token last sampled for its request."""
    return ws.errors.w1


@models("vllm.v1.executor.multiproc_executor.WorkerProc.async_output_busy_loop")
@models_static(NEURON_RUNNER, "AsyncNeuronModelRunnerOutput.get_output")
def w2_materialized_once(ws: WorkerState) -> str | None:
    """W2: each output materialised at most once (exactly once when delivered); <= 1 waiter."""
    if ws.errors.w2 is not None:
        return ws.errors.w2
    for o in ws.outputs:
        if o.materializations > 1:
            return f"step {o.step}'s output materialised {o.materializations} times"
        if o.waiters > 1:
            return f"step {o.step}'s execution has {o.waiters} waiters"
        if o.delivered and o.step > 0 and o.materializations != 1:
            return f"step {o.step}'s output delivered after {o.materializations} materialisations"
    return None


@models_static(NEURON_RUNNER, "NeuronModelRunner.execute_model",
               "NeuronModelRunner._materialize_pending_async_output")
def w3_guard(ws: WorkerState) -> str | None:
    """W3: on a composition change the pending output is actualised before ``_update_states``."""
    return ws.errors.w3


@models_static(NEURON_RUNNER, "NeuronModelRunner.execute_model",
               "NeuronModelRunner._maybe_swap_async_input_ids")
def w4_counters(ws: WorkerState) -> str | None:
    """W4: async + fallback == steps; async == steps fed from the device; steady decode is async."""
    if ws.async_steps + ws.sync_fallback_steps != ws.steps:
        return (f"async_steps {ws.async_steps} + sync_fallback_steps {ws.sync_fallback_steps} "
                f"!= {ws.steps} steps")
    if ws.async_steps != ws.device_fed_steps:
        return (f"async_steps {ws.async_steps} but {ws.device_fed_steps} step(s) were fed "
                "straight from the device")
    return ws.errors.w4


WORKER_ALWAYS: tuple[WorkerAlways, ...] = (
    WorkerAlways("W1_feed_is_last_sampled", w1_feed, lambda s: True,
                 "a wrong input token gives silently wrong text on a healthy server"),
    WorkerAlways("W2_materialized_once", w2_materialized_once, lambda s: s == "neuron",
                 "double materialisation duplicates tokens; a second waiter hangs the runtime"),
    WorkerAlways("W3_materialize_before_update", w3_guard, lambda s: s == "neuron",
                 "add_request copies host history: it must hold the last sampled token"),
    WorkerAlways("W4_counters_and_efficiency", w4_counters, lambda s: True,
                 "the async/fallback counters are how production measures the async path"),
)


def worker_properties(strategy: Strategy) -> tuple[WorkerAlways, ...]:
    """The worker properties that apply to ``strategy``."""
    return tuple(p for p in WORKER_ALWAYS if p.applies(strategy))
