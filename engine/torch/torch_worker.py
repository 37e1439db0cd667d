"""The worker of the torch engine: builds each step's input and runs the model.

A planned step (``ScheduledStep``) becomes one forward pass.  Every position of a row
whose token the host already knows (prompt, or output the scheduler delivered) comes from
the host.  A decode row whose token was sampled by a step still in flight takes it from the
device, by *request identity*; three strategies, as in ``spec/worker_v*.py``:

* ``v2`` (Model Runner V2, default): a device tensor of last sampled tokens with one slot
  per request; a row reads ``last_sampled[slot[req]]``, and after sampling each sampling
  row writes its slot;
* ``v1`` (the V1 GPU runner): the previous step's sampled tensor and
  ``prev_req_id_to_index``; a row reads ``prev_sampled[prev_req_id_to_index[req]]``; a
  request absent from the previous step must be known on the host (true at depth <= 2);
* ``neuron`` (vllm-neuron): the previous step's sampled tensor is fed as is when the step
  has exactly the previous step's rows, all decoding (async step); on any other step, in
  particular a *composition change*, the pending outputs are materialised to the host
  first and the input is built on the host (sync fallback).

Planning happens on the main thread in step order; everything that touches device tensors
(gathers, the forward pass, the slot update) runs as one task on the in-order
:class:`DeviceStream`.  Sampled tokens never leave the device on the main thread.

Seeded bugs (``bug=``): ``feed_by_row`` (v1/v2: index the device tensor by the row's
position in the batch instead of the request's slot / previous index) and
``skip_materialize`` (neuron: skip the materialisation on a composition change, so the
host reads a stale slot).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Literal, Protocol

import torch

from asyncspec.engine.torch.scheduler_api import ScheduledRow, ScheduledStep
from asyncspec.engine.torch.device import (
    DeviceResult,
    DeviceStream,
    LateKVWriter,
    OutputThread,
    RecordingKVCache,
)
from asyncspec.engine.torch.batch import PagedBatch
from asyncspec.engine.torch.model import TinyTransformer

__all__ = [
    "STALE_TOKEN",
    "STRATEGIES",
    "FeedError",
    "FeedPlan",
    "StepHandle",
    "Strategy",
    "TorchWorker",
    "make_feedback",
]

Strategy = Literal["v1", "v2", "neuron"]
STRATEGIES: tuple[Strategy, ...] = ("v2", "v1", "neuron")
WORKER_BUGS = ("feed_by_row", "skip_materialize")

#: What a host slot holds when nobody wrote it (a token id, so the forward still runs).
STALE_TOKEN = 0


class FeedError(RuntimeError):
    """A row's input token is neither on the host nor reachable on the device."""


# ---------------------------------------------------------------- plans and handles


@dataclass
class FeedPlan:
    """How one step's input ids are assembled (built on the host, applied on the device).

    Attributes:
        host_ids: the flat input ids; positions fed from the device hold a placeholder.
        device_positions: flat indices fed from the strategy's device tensor ...
        device_sources: ... and the index read there for each of them.
        use_future: feed the previous step's sampled tensor as the whole input (neuron).
        sample_rows: rows whose sample is a real token (not a prefill chunk) ...
        sample_slots: ... and the V2 slot each of them writes.
    """

    host_ids: list[int]
    device_positions: list[int] = field(default_factory=list)
    device_sources: list[int] = field(default_factory=list)
    use_future: bool = False
    sample_rows: list[int] = field(default_factory=list)
    sample_slots: list[int] = field(default_factory=list)


@dataclass(eq=False)
class StepHandle:
    """A submitted step: its plan, its device future and its host-output future."""

    step: ScheduledStep
    device: Future[DeviceResult] | None
    host: Future[list[int]] | None

    def tokens(self) -> list[int]:
        """The sampled token id of every row (waits for the output thread)."""
        return [] if self.host is None else self.host.result()

    def sampled(self) -> dict[int, int]:
        """Request -> sampled token for the rows that sample."""
        rows = self.step.rows
        return {r.req: t for r, t in zip(rows, self.tokens()) if r.sampled_position > 0}


@dataclass(frozen=True)
class RowInput:
    """A row's input as the host sees it: known tokens and whether its last one is pending."""

    row: ScheduledRow
    host_tokens: list[int]  # tokens of positions [start, end) the host knows (all but maybe the last)
    pending_last: bool  # the last position's token was sampled by a step still in flight


def row_inputs(rows: Sequence[ScheduledRow], known: Mapping[int, Sequence[int]]) -> list[RowInput]:
    """Split each row's positions into host-known tokens and (at most) one pending token.

    Raises:
        FeedError: a row needs a pending token other than at its last position.
    """
    out: list[RowInput] = []
    for row in rows:
        seq = known[row.req]
        host = [int(seq[p]) for p in range(row.start, min(row.end, len(seq)))]
        pending = row.end - row.start - len(host)
        if pending > 1 or (pending == 1 and row.start + len(host) != row.end - 1):
            raise FeedError(
                f"r{row.req}: positions {row.start}..{row.end - 1} scheduled but only "
                f"{len(seq)} tokens known; more than the last token is pending"
            )
        out.append(RowInput(row, host, pending == 1))
    return out


# ---------------------------------------------------------------- feedback strategies


class Feedback(Protocol):
    """A strategy for feeding the previous step's sampled tokens into the next input."""

    name: Strategy

    def plan(self, inputs: list[RowInput]) -> FeedPlan:
        """Main thread: decide where every input id comes from (in step order)."""

    def source(self) -> torch.Tensor | None:
        """Device thread: the tensor ``device_sources`` index into."""

    def after_sample(self, plan: FeedPlan, sampled: torch.Tensor) -> None:
        """Device thread: keep what the next steps need from this step's samples."""

    def release(self, reqs: Sequence[int]) -> None:
        """Main thread: requests that finished or were preempted."""

    def executed(self, handle: StepHandle) -> None:
        """Main thread: a step was submitted (its outputs may have to be materialised)."""

    def processed(self, handle: StepHandle) -> None:
        """Main thread: the engine received ``handle``'s output."""


def _flat_host_ids(inputs: list[RowInput]) -> tuple[list[int], list[int]]:
    """Concatenated host ids (placeholder for pending tokens) and the pending flat indices."""
    ids: list[int] = []
    pending: list[int] = []
    for ri in inputs:
        ids.extend(ri.host_tokens)
        if ri.pending_last:
            pending.append(len(ids))
            ids.append(STALE_TOKEN)
    return ids, pending


def _sample_rows(inputs: list[RowInput]) -> list[int]:
    """Rows whose sample is a real token."""
    return [i for i, ri in enumerate(inputs) if ri.row.sampled_position > 0]


class V2Slots:
    """Model Runner V2: last sampled token per request slot, on the device."""

    name: Strategy = "v2"

    def __init__(self, capacity: int, device: torch.device, bug: str | None = None) -> None:
        self.slot: dict[int, int] = {}
        self.capacity = capacity
        self.bug = bug
        self.last_sampled = torch.zeros(capacity, dtype=torch.int64, device=device)

    def _assign(self, req: int) -> int:
        """A fresh row (new or resumed request) gets the lowest free slot."""
        self.slot.pop(req, None)
        used = set(self.slot.values())
        free = next((s for s in range(self.capacity) if s not in used), None)
        if free is None:
            raise FeedError(f"no free slot for r{req} (capacity {self.capacity})")
        self.slot[req] = free
        return free

    def plan(self, inputs: list[RowInput]) -> FeedPlan:
        """Pending tokens are read from ``last_sampled[slot[req]]``."""
        for ri in inputs:
            if ri.row.start == 0 or ri.row.req not in self.slot:
                self._assign(ri.row.req)
        ids, pending = _flat_host_ids(inputs)
        pending_rows = [i for i, ri in enumerate(inputs) if ri.pending_last]
        sources = [
            i if self.bug == "feed_by_row" else self.slot[inputs[i].row.req] for i in pending_rows
        ]
        rows = _sample_rows(inputs)
        return FeedPlan(ids, pending, sources, False, rows, [self.slot[inputs[i].row.req] for i in rows])

    def source(self) -> torch.Tensor | None:
        """The slot tensor."""
        return self.last_sampled

    def after_sample(self, plan: FeedPlan, sampled: torch.Tensor) -> None:
        """``post_update``: each sampling row writes its request's slot."""
        if plan.sample_rows:
            rows = torch.tensor(plan.sample_rows, dtype=torch.int64, device=sampled.device)
            slots = torch.tensor(plan.sample_slots, dtype=torch.int64, device=sampled.device)
            self.last_sampled.index_copy_(0, slots, sampled.index_select(0, rows))

    def release(self, reqs: Sequence[int]) -> None:
        """Free the slots of finished or preempted requests."""
        for req in reqs:
            self.slot.pop(req, None)

    def executed(self, handle: StepHandle) -> None:
        """Nothing to remember: the slots hold everything."""

    def processed(self, handle: StepHandle) -> None:
        """Nothing to do."""


class V1PrevMap:
    """V1 GPU runner: ``prev_sampled_token_ids`` + ``prev_req_id_to_index``."""

    name: Strategy = "v1"

    def __init__(self, device: torch.device, bug: str | None = None) -> None:
        self.prev_index: dict[int, int] = {}
        self.bug = bug
        self.prev_sampled: torch.Tensor = torch.zeros(0, dtype=torch.int64, device=device)

    def plan(self, inputs: list[RowInput]) -> FeedPlan:
        """Pending tokens are scattered from the previous step's row of the same request."""
        ids, pending = _flat_host_ids(inputs)
        sources: list[int] = []
        for i, ri in enumerate(inputs):
            if not ri.pending_last:
                continue
            if ri.row.req not in self.prev_index:
                raise FeedError(
                    f"V1 runner: r{ri.row.req} needs its token at position {ri.row.end - 1}, "
                    "which the host does not know and the previous step did not sample "
                    "(the depth-3 limitation of prev_req_id_to_index, docs/worker.md)"
                )
            sources.append(i if self.bug == "feed_by_row" else self.prev_index[ri.row.req])
        rows = _sample_rows(inputs)
        self.prev_index = {inputs[i].row.req: i for i in rows}
        return FeedPlan(ids, pending, sources, False, rows)

    def source(self) -> torch.Tensor | None:
        """The previous step's sampled tensor."""
        return self.prev_sampled

    def after_sample(self, plan: FeedPlan, sampled: torch.Tensor) -> None:
        """``_bookkeeping_sync``: keep this step's samples for the next step."""
        self.prev_sampled = sampled

    def release(self, reqs: Sequence[int]) -> None:
        """Finished requests leave the map (``finished_req_ids``)."""
        for req in reqs:
            self.prev_index.pop(req, None)

    def executed(self, handle: StepHandle) -> None:
        """Nothing to remember beyond the map."""

    def processed(self, handle: StepHandle) -> None:
        """Nothing to do."""


class NeuronBuffer:
    """vllm-neuron: swap in the previous future, or materialise and rebuild on the host."""

    name: Strategy = "neuron"

    def __init__(self, prompt_lens: Sequence[int], device: torch.device, bug: str | None = None) -> None:
        self.prompt_lens = list(prompt_lens)
        self.bug = bug
        self.prev_order: tuple[int, ...] | None = None  # prev_req_ids_ordered
        self.prev_all_sample = False
        self.future: torch.Tensor = torch.zeros(0, dtype=torch.int64, device=device)
        self.pending: list[StepHandle] = []  # executed steps not materialised yet
        self.host: dict[int, dict[int, int]] = {}  # materialised tokens by request, position
        self.async_steps = 0
        self.fallback_steps = 0

    def plan(self, inputs: list[RowInput]) -> FeedPlan:
        """Async step if nothing but the previous rows decode in the same order, else rebuild."""
        order = tuple(ri.row.req for ri in inputs)
        rows = _sample_rows(inputs)
        previous, previous_all_sampled = self.prev_order, self.prev_all_sample
        self.prev_order, self.prev_all_sample = order, len(rows) == len(inputs)
        decode_only = all(ri.pending_last and ri.row.num_tokens == 1 for ri in inputs)
        if previous == order and previous_all_sampled and decode_only:
            self.async_steps += 1
            return FeedPlan([STALE_TOKEN] * len(inputs), use_future=True, sample_rows=rows)
        self.fallback_steps += 1
        composition_changed = previous is not None and set(previous) != set(order)
        if not (composition_changed and self.bug == "skip_materialize"):
            self._materialize()
        ids: list[int] = []
        for ri in inputs:
            ids.extend(ri.host_tokens)
            if ri.pending_last:
                ids.append(self.host.get(ri.row.req, {}).get(ri.row.end - 1, STALE_TOKEN))
        return FeedPlan(ids, sample_rows=rows)

    def _materialize(self, upto: StepHandle | None = None) -> None:
        """Write pending outputs' tokens to the host by request id, oldest first.

        All of them (waiting for the device), or only up to ``upto`` (an output the engine
        has already received).
        """
        while self.pending:
            handle = self.pending.pop(0)
            for row, token in zip(handle.step.rows, handle.tokens()):
                if row.sampled_position > 0:
                    pos = self.prompt_lens[row.req] + row.sampled_position - 1
                    self.host.setdefault(row.req, {})[pos] = token
            if handle is upto:
                return

    def source(self) -> torch.Tensor | None:
        """The previous step's sampled tensor (the future)."""
        return self.future

    def after_sample(self, plan: FeedPlan, sampled: torch.Tensor) -> None:
        """Re-arm the buffer with this step's future."""
        self.future = sampled

    def release(self, reqs: Sequence[int]) -> None:
        """Finished requests drop their host state."""
        for req in reqs:
            self.host.pop(req, None)

    def executed(self, handle: StepHandle) -> None:
        """Remember the step until its output is materialised."""
        self.pending.append(handle)

    def processed(self, handle: StepHandle) -> None:
        """The output thread delivered ``handle`` to the engine: its tokens reach the host."""
        if any(h is handle for h in self.pending):
            self._materialize(upto=handle)


def make_feedback(
    strategy: Strategy,
    *,
    capacity: int,
    prompt_lens: Sequence[int],
    device: torch.device,
    bug: str | None = None,
) -> Feedback:
    """The feedback strategy ``strategy`` (``v2``, ``v1`` or ``neuron``)."""
    if strategy == "v2":
        return V2Slots(capacity, device, bug)
    if strategy == "v1":
        return V1PrevMap(device, bug)
    if strategy == "neuron":
        return NeuronBuffer(prompt_lens, device, bug)
    raise ValueError(f"unknown worker strategy {strategy!r} (choose from {STRATEGIES})")


# ---------------------------------------------------------------- the worker


class TorchWorker:
    """Runs planned steps on the model (see the module docstring).

    Args:
        model: the tiny transformer (its device is the engine's device).
        num_blocks, block_size: the paged KV cache (block ids come from the scheduler).
        strategy: the feedback strategy.
        capacity: V2 slots (at least the number of requests alive at once).
        prompt_lens: prompt length per request (the neuron strategy's host positions).
        kv_connector: record each step's KV writes and land them again late (out of order).
        bug: a seeded worker bug (``feed_by_row``, ``skip_materialize``) or None.
    """

    def __init__(
        self,
        model: TinyTransformer,
        *,
        num_blocks: int,
        block_size: int,
        strategy: Strategy = "v2",
        capacity: int = 64,
        prompt_lens: Sequence[int] = (),
        kv_connector: bool = False,
        bug: str | None = None,
    ) -> None:
        self.model = model
        c = model.config
        self.kv = RecordingKVCache(
            num_blocks, block_size, c.layers, c.heads, c.head_dim, model.device, model.dtype
        )
        self.stream = DeviceStream(model.device)
        self.output = OutputThread()
        self.feedback = make_feedback(
            strategy, capacity=capacity, prompt_lens=prompt_lens, device=model.device, bug=bug
        )
        self.connector = LateKVWriter(self.stream, self.kv) if kv_connector else None
        self.forward_passes = 0
        if self.stream.is_cuda:
            torch.cuda.synchronize(model.device)

    def execute(self, step: ScheduledStep, known: Mapping[int, Sequence[int]]) -> StepHandle:
        """Plan ``step`` on the host and submit it to the device; returns at once."""
        if not step.rows:
            return StepHandle(step, None, None)
        plan = self.feedback.plan(row_inputs(step.rows, known))
        batch_meta = (
            tuple(r.num_tokens for r in step.rows),
            tuple(r.start for r in step.rows),
            tuple(r.block_table for r in step.rows),
            tuple(f"r{r.req}" for r in step.rows),
        )
        device = self.stream.submit(lambda: self.stream.timed(lambda: self._run(plan, batch_meta)))
        handle = StepHandle(step, device, self.output.submit(device))
        self.forward_passes += 1
        self.feedback.executed(handle)
        return handle

    def _run(
        self,
        plan: FeedPlan,
        meta: tuple[tuple[int, ...], tuple[int, ...], tuple[tuple[int, ...], ...], tuple[str, ...]],
    ) -> DeviceResult:
        """Device thread: assemble the input, run the model, keep the samples on the device."""
        dev = self.model.device
        source = self.feedback.source()
        if plan.use_future and source is not None:
            ids = source.clone()
        else:
            ids = torch.tensor(plan.host_ids, dtype=torch.int64, device=dev)
            if plan.device_positions and source is not None:
                where = torch.tensor(plan.device_positions, dtype=torch.int64, device=dev)
                index = torch.tensor(plan.device_sources, dtype=torch.int64, device=dev)
                ids.index_copy_(0, where, source.index_select(0, index))
        batch = PagedBatch(ids, *meta)
        if self.connector is not None:
            self.kv.start_recording()
        sampled = self.model.forward_paged(batch, self.kv)
        writes = self.kv.stop_recording() if self.connector is not None else []
        self.feedback.after_sample(plan, sampled)
        result = self.stream.copy_to_host(sampled)
        result.late_writes = writes
        return result

    def step_processed(self, handle: StepHandle) -> None:
        """The engine processes ``handle``'s output: the connector's late writes land now."""
        self.feedback.processed(handle)
        if self.connector is not None and handle.device is not None:
            self.connector.land(handle.device.result().late_writes)

    def release(self, reqs: Sequence[int]) -> None:
        """Requests that finished or were preempted leave the worker's state."""
        if reqs:
            self.feedback.release(reqs)

    def poison(self, blocks: Sequence[int]) -> None:
        """Fill freed blocks with NaN (in stream order), so a read of a freed block shows."""
        if blocks:
            ids = list(blocks)
            self.stream.submit(lambda: self.kv.poison(ids))

    def close(self) -> None:
        """Drain and stop the device and output threads."""
        self.stream.close()
        self.output.close()
