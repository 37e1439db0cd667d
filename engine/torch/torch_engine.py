"""A small but real torch engine: scheduler, batch queue of depth D, worker, output thread.

The loop is vLLM's ``EngineCore.step_with_batch_queue`` (D = 1 is the synchronous
``EngineCore.step``), exactly as the spec's ``exact`` loop (``spec/engine.py``):

* **schedule** while requests exist and the batch queue has fewer than D steps: the
  scheduler plans a step (block tables included), the worker builds its input (host tokens,
  plus each pending decode token gathered on the device by request identity) and submits the
  forward pass to the in-order device stream; the step's sampled tokens stay on the device,
  and the output thread starts copying them to the host (a future);
* **process** the oldest step once the queue is full or no request is left: wait for its
  host tokens, let the KV connector's late writes of that step land (if there is one), and
  hand the real token ids to the scheduler's ``update_from_output``, which appends them,
  stops a request at the EOS token id or at ``max_tokens`` and frees (or parks) its blocks.

Environment actions (arrivals, aborts, forced preemptions) happen at engine *ticks* (one
tick per engine action), so the same workload runs at any depth.  Every action is recorded
in the spec's vocabulary, so a run can be replayed on the spec (``engine/torch/torch_oracle.py``).

Seeded bugs (``EngineConfig.bug``): ``free_while_writing`` (a KV connector writes late, but
blocks are freed at once instead of behind a step fence), ``feed_by_row`` (the previous
token is gathered by row position, not by request) and ``skip_materialize`` (the neuron
strategy does not materialise pending outputs on a composition change).

Example:
    >>> w = Workload(prompts=((5, 9, 13), (17, 4)), max_tokens=(4, 3))
    >>> a = run_workload(w, EngineConfig(depth=1))
    >>> b = run_workload(w, EngineConfig(depth=2))
    >>> a.outputs == b.outputs
    True
"""

from __future__ import annotations

import time
from collections import Counter, deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal


from asyncspec.engine.torch.scheduler_api import (
    EOS,
    LENGTH,
    EngineScheduler,
    ScheduledStep,
    SpecScheduler,
    StepOutcome,
    spec_config,
)
from asyncspec.engine.torch.model import TinyTransformer
from asyncspec.engine.torch.torch_reference import ReferenceScheduler
from asyncspec.engine.torch.weights import TinyConfig
from asyncspec.engine.torch.torch_worker import StepHandle, Strategy, TorchWorker
from asyncspec.spec import engine as spec_engine
from asyncspec.spec.config import SpecConfig, StaleMode
from asyncspec.spec.engine import Action

__all__ = [
    "ENGINE_BUGS",
    "EngineConfig",
    "EngineError",
    "RunResult",
    "TorchEngine",
    "Workload",
    "default_model",
    "run_workload",
]

ENGINE_BUGS = ("free_while_writing", "feed_by_row", "skip_materialize")
SchedulerKind = Literal["spec", "reference"]

#: Engine ticks after which a run is declared stuck.
MAX_TICKS = 200_000


class EngineError(RuntimeError):
    """The engine cannot make progress or was misconfigured."""


# ---------------------------------------------------------------- configuration


@dataclass(frozen=True)
class Workload:
    """Requests, engine limits and the environment of one run (independent of D).

    Attributes:
        prompts: prompt token ids per request (request ``i`` is ``r{i}``).
        max_tokens: output limit per request.
        arrivals: tick at which each request arrives (non-decreasing, first 0); empty = all
            at the start.
        aborts: ``(tick, request)`` client aborts (skipped when not applicable then).
        resets: ticks of ``reset_prefix_cache`` forced preemptions.
        kv_connector: a KV-consumer connector: KV writes land late, frees wait for fences.
        stale_mode: output of steps in flight at a KV-pressure preemption: deliver or drop.
    """

    prompts: tuple[tuple[int, ...], ...]
    max_tokens: tuple[int, ...]
    arrivals: tuple[int, ...] = ()
    aborts: tuple[tuple[int, int], ...] = ()
    resets: tuple[int, ...] = ()
    token_budget: int = 16
    max_num_seqs: int = 4
    block_size: int = 4
    num_blocks: int = 16
    enable_chunked_prefill: bool = True
    enable_prefix_caching: bool = True
    kv_connector: bool = False
    stale_mode: StaleMode = "deliver"

    def __post_init__(self) -> None:
        if len(self.prompts) != len(self.max_tokens) or not self.prompts:
            raise ValueError("prompts and max_tokens need one entry per request (at least one)")
        if self.arrivals:
            if len(self.arrivals) != len(self.prompts) or self.arrivals[0] != 0:
                raise ValueError("arrivals: one tick per request, the first 0")
            if any(b < a for a, b in zip(self.arrivals, self.arrivals[1:])):
                raise ValueError("arrivals must be non-decreasing (requests arrive in id order)")
        longest = max(len(p) + m for p, m in zip(self.prompts, self.max_tokens))
        if not self.enable_chunked_prefill and longest > self.token_budget:
            # vLLM requires max_num_batched_tokens >= max_model_len without chunked prefill;
            # otherwise a preempted request (prompt + output) could never be readmitted.
            raise ValueError(
                f"without chunked prefill token_budget must be >= prompt + max_tokens "
                f"({longest})"
            )

    @property
    def late_arrivals(self) -> bool:
        """Some request arrives after the start."""
        return any(t > 0 for t in self.arrivals)

    def spec_config(
        self,
        depth: int,
        *,
        eos_positions: Sequence[int] | None = None,
        defer: bool | None = None,
        decode_stagger: int | None = None,
    ) -> SpecConfig:
        """The spec constants of this workload at depth ``depth``.

        ``decode_stagger`` None is the spec's default (D - 1 at D > 2: the V2 runner + PP).
        """
        return spec_config(
            f"torch-d{depth}",
            [(len(p), m) for p, m in zip(self.prompts, self.max_tokens)],
            depth=depth,
            eos_positions=eos_positions,
            token_budget=self.token_budget,
            max_num_seqs=self.max_num_seqs,
            block_size=self.block_size,
            num_blocks=self.num_blocks,
            enable_chunked_prefill=self.enable_chunked_prefill,
            enable_prefix_caching=self.enable_prefix_caching,
            defer_block_free=self.kv_connector if defer is None else defer,
            stale_mode=self.stale_mode,
            aborts=bool(self.aborts),
            late_arrivals=self.late_arrivals,
            forced_preemptions=len(self.resets),
            decode_stagger=decode_stagger,
        )


@dataclass(frozen=True)
class EngineConfig:
    """How the engine runs a workload.

    Attributes:
        depth: batch-queue depth D (1 = synchronous).
        strategy: the worker's feedback strategy (``v2``, ``v1``, ``neuron``).
        device: ``cpu`` or ``cuda``.
        scheduler: ``spec`` (the executable spec) or ``reference`` (``asyncspec.reference``).
        poison_freed: fill freed blocks with NaN (only without prefix-cache hits).
        bug: a seeded engine bug from :data:`ENGINE_BUGS`, or None.
    """

    depth: int = 1
    strategy: Strategy = "v2"
    device: str = "cpu"
    scheduler: SchedulerKind = "spec"
    poison_freed: bool = False
    bug: str | None = None

    def __post_init__(self) -> None:
        if self.depth < 1:
            raise ValueError("depth must be >= 1")
        if self.bug is not None and self.bug not in ENGINE_BUGS:
            raise ValueError(f"unknown bug {self.bug!r} (choose from {ENGINE_BUGS})")


@dataclass
class RunResult:
    """What one run produced and measured.

    Attributes:
        outputs: tokens delivered per request.
        reasons: finish reason per finished request (``stop``, ``length``, ``abort``).
        eos_positions: output position where the model emitted EOS (0 = never), per request.
        wasted: forward rows computed for a request the engine had already finished.
        forward_passes: non-empty steps run on the model.
        trace: every action, in the spec's vocabulary (replayable on the spec).
        scheduled: ``(request, tokens)`` of each schedule() call.
        events: the spec events the scheduler exercised, counted.
        wall_s, device_busy_s, device_idle_s: timings of the run.
    """

    outputs: dict[int, list[int]]
    reasons: dict[int, str]
    eos_positions: tuple[int, ...]
    wasted: int
    forward_passes: int
    trace: list[Action]
    scheduled: list[tuple[tuple[int, int], ...]]
    events: Counter[str] = field(default_factory=Counter)
    wall_s: float = 0.0
    device_busy_s: float = 0.0
    device_idle_s: float = 0.0
    late_writes_landed: int = 0

    @property
    def steps_per_s(self) -> float:
        """Forward passes per second of wall time."""
        return self.forward_passes / self.wall_s if self.wall_s > 0 else 0.0


_MODELS: dict[tuple[str, TinyConfig], TinyTransformer] = {}


def default_model(device: str = "cpu", config: TinyConfig | None = None) -> TinyTransformer:
    """The tiny model (default config) on ``device``, built once per process."""
    cfg = config if config is not None else TinyConfig()
    key = (device, cfg)
    if key not in _MODELS:
        _MODELS[key] = TinyTransformer(cfg, device)
    return _MODELS[key]


# ---------------------------------------------------------------- the engine


class TorchEngine:
    """One engine instance over one workload (use :func:`run_workload`)."""

    def __init__(
        self, workload: Workload, config: EngineConfig, model: TinyTransformer | None = None
    ) -> None:
        self.workload = workload
        self.config = config
        self.model = model if model is not None else default_model(config.device)
        self.eos = self.model.config.eos_token_id
        defer = workload.kv_connector and config.bug != "free_while_writing"
        self.spec_cfg = workload.spec_config(config.depth, defer=defer)
        self.scheduler = self._make_scheduler()
        worker_bug = config.bug if config.bug in ("feed_by_row", "skip_materialize") else None
        self.worker = TorchWorker(
            self.model,
            num_blocks=workload.num_blocks,
            block_size=workload.block_size,
            strategy=config.strategy,
            capacity=len(workload.prompts),
            prompt_lens=[len(p) for p in workload.prompts],
            kv_connector=workload.kv_connector,
            bug=worker_bug,
        )
        n = len(workload.prompts)
        self.tokens: dict[int, list[int]] = {i: list(p) for i, p in enumerate(workload.prompts)}
        self.outputs: dict[int, list[int]] = {i: [] for i in range(n)}
        self.reasons: dict[int, str] = {}
        self.eos_positions = [0] * n
        self.queue: deque[tuple[ScheduledStep, StepHandle]] = deque()
        self.trace: list[Action] = []
        self.scheduled: list[tuple[tuple[int, int], ...]] = []
        self.events: Counter[str] = Counter()
        self.wasted = 0
        self._resets_due = 0  # resets whose tick has come, waiting for a call boundary
        self._in_call = False  # the step_with_batch_queue call goes on to process the oldest step
        self._next_arrival = 1 if workload.late_arrivals else n

    def _make_scheduler(self) -> EngineScheduler:
        """The scheduler the config names."""
        if self.config.scheduler == "reference":
            return ReferenceScheduler(self.spec_cfg, self.eos, self.workload.prompts)
        return SpecScheduler(self.spec_cfg, self.eos)

    # -------------------------------------------------------------- loop

    def run(self) -> RunResult:
        """Run the workload to completion; always stops the worker's threads."""
        start = time.perf_counter()
        try:
            self._loop()
            wall = time.perf_counter() - start
            timing = self.worker.stream.finish_timing()
        finally:
            self.worker.close()
        connector = self.worker.connector
        return RunResult(
            outputs=self.outputs,
            reasons=self.reasons,
            eos_positions=tuple(self.eos_positions),
            wasted=self.wasted,
            forward_passes=self.worker.forward_passes,
            trace=self.trace,
            scheduled=self.scheduled,
            events=self.events,
            wall_s=wall,
            device_busy_s=timing.busy(),
            device_idle_s=timing.idle_between_steps(),
            late_writes_landed=0 if connector is None else connector.landed,
        )

    def _loop(self) -> None:
        """``step_with_batch_queue`` until every request finished and the queue is empty."""
        depth = self.config.depth
        for tick in range(MAX_TICKS):
            self._environment(tick)
            has = self.scheduler.has_requests()
            if has and len(self.queue) < depth:
                self._schedule()
            elif self.queue and (len(self.queue) >= depth or not has):
                self._process()
            elif self._next_arrival >= len(self.workload.prompts):
                return
        raise EngineError(f"no progress after {MAX_TICKS} engine ticks")

    def _schedule(self) -> None:
        """Plan a step, submit it to the worker, queue it."""
        step, outcome = self.scheduler.schedule()
        self._record(Action(spec_engine.SCHEDULE), outcome)
        self.scheduled.append(tuple((r.req, r.num_tokens) for r in step.rows))
        self.queue.append((step, self.worker.execute(step, self.tokens)))
        model_executed = any(r.num_tokens for r in step.rows)
        # step_with_batch_queue returns only if the queue has room and the step ran the
        # model or requests remain (spec/scheduler.call_goes_on)
        self._in_call = len(self.queue) >= self.config.depth or not (model_executed or self.scheduler.has_requests())

    def _process(self) -> None:
        """Process the oldest step: late KV writes land, tokens go to the scheduler."""
        step, handle = self.queue.popleft()
        self.worker.step_processed(handle)
        sampled = handle.sampled()
        self.wasted += sum(1 for r in step.rows if self.reasons.get(r.req) in (EOS, LENGTH))
        outcome = self.scheduler.update_from_output(step, sampled)
        self._record(Action(spec_engine.UPDATE_FROM_OUTPUT), outcome)
        self._in_call = False

    # -------------------------------------------------------------- environment

    def _environment(self, tick: int) -> None:
        """Arrivals, aborts and forced preemptions due at ``tick``.

        Aborts apply at any tick.  New requests and ``reset_prefix_cache`` come
        through the engine's input queue, which is read only between engine-loop
        calls (after a schedule that filled the queue, or an empty step with no
        request left, the call goes on to process): they wait for such a
        boundary (``spec.engine.at_call_boundary``).
        """
        w = self.workload
        boundary = not self._in_call
        while boundary and self._next_arrival < len(w.prompts) and w.arrivals[self._next_arrival] <= tick:
            req = self._next_arrival
            if not self.scheduler.can_add(req):
                break
            self._record(Action(spec_engine.ADD_REQUEST, req), self.scheduler.add_request(req))
            self._next_arrival += 1
        for when, req in w.aborts:
            if when == tick and self.scheduler.can_abort(req):
                self._record(Action(spec_engine.ABORT, req), self.scheduler.abort(req))
        self._resets_due += sum(1 for when in w.resets if when == tick)
        if boundary and self._resets_due:
            self._resets_due -= 1
            if self.scheduler.can_reset_prefix_cache():
                outcome = self.scheduler.reset_prefix_cache()
                self._record(Action(spec_engine.RESET_PREFIX_CACHE), outcome)

    # -------------------------------------------------------------- bookkeeping

    def _record(self, action: Action, outcome: StepOutcome) -> None:
        """Apply an outcome to the engine's host state and log the action."""
        self.trace.append(action)
        self.events.update(outcome.events)
        for req, token in outcome.delivered:
            self.outputs[req].append(token)
            self.tokens[req].append(token)
        for req, reason in outcome.finished:
            self.reasons[req] = reason
            if reason == EOS:
                self.eos_positions[req] = len(self.outputs[req])
        self.worker.release([r for r, _ in outcome.finished] + list(outcome.preempted))
        if self.config.poison_freed:
            self.worker.poison(outcome.freed_blocks)


def run_workload(
    workload: Workload, config: EngineConfig, model: TinyTransformer | None = None
) -> RunResult:
    """Run ``workload`` once under ``config``."""
    return TorchEngine(workload, config, model).run()
