"""vLLM's production engine (0.30.0 to 0.33.0), in-process on a CPU: ``EngineCore`` over the V1 model runner.

``EngineCoreDriver`` builds a real ``EngineCore`` (vllm/v1/engine/core.py)
whose executor is vLLM's ``UniProcExecutor`` over vLLM's ``CPUModelRunner``
(the V1 ``GPUModelRunner`` as vLLM hosts it on a CPU) with the oracle model
(``fake_model.py``) as its forward pass.  The caller plays the client and
``EngineCoreProc``'s busy loop: ``add_request``, ``abort`` (input-queue path,
between steps), ``abort_in_step`` (``aborts_queue``: drained inside the next
step that processes an output, after the model ran), ``reset_prefix_cache``,
and ``step`` (one ``step_fn()`` + ``post_step``, as ``_process_engine_step``).

Each ``step`` returns its *phases*: every ``schedule()`` and every
``update_from_output()`` vLLM ran inside the call, in order, each with what
the caller needs to compare it (the ``SchedulerOutput``, the outputs, and a
callback's snapshot taken right after the phase).  The calls themselves are
vLLM's; the driver only observes them.

Depth (``max_concurrent_batches``): 1 runs ``EngineCore.step`` (the
synchronous ``Scheduler``), 2 is what vLLM ships for async scheduling on one
GPU (``AsyncScheduler`` + ``step_with_batch_queue``), 3 is what Model Runner
V2 with pipeline parallelism 2 gives: the queue holds 3 batches and the
scheduler gets that configuration's decode stagger of 2
(``AsyncScheduler.decode_stagger``); the runner stays the V1 runner (two
pipeline ranks cannot run here), see docs/vllm-engine.md.

The surface the driver needs is probed first (``engine_config.needed_engine_capabilities``,
``surfaces.py``): a vLLM that lacks it raises ``capabilities.MissingCapability`` before
any engine is built.
"""
from __future__ import annotations

import contextlib
import itertools
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from asyncspec.engine.vllm import surfaces
from asyncspec.engine.vllm.encoder_model import image, item_id, stand_in_processor
from asyncspec.engine.vllm.engine_config import EngineDriverConfig, build_engine_config
from asyncspec.engine.vllm.oracle_encoder import image_data
from asyncspec.engine.vllm.vllm_environment import load_vllm
from asyncspec.engine.vllm.grammar import RECORDING_BACKEND, BitmaskOnlyBackend
from asyncspec.engine.vllm.oracle_worker import oracle_executor_class
from asyncspec.engine.vllm.scheduler_driver import give_empty_kv_holding_queue

SCHEDULE_PHASE = "schedule"
ABORTS_PHASE = "process_aborts_queue"  # aborts drained from aborts_queue, before an output is processed
OUTPUT_PHASE = "update_from_output"


@dataclass
class Phase:
    """One scheduler call inside an engine step."""

    kind: str  # SCHEDULE_PHASE, ABORTS_PHASE or OUTPUT_PHASE
    scheduler_output: Any  # the SchedulerOutput scheduled, or the one whose output was processed
    outputs: dict[str, Any] = field(default_factory=dict)  # OUTPUT_PHASE: req_id -> EngineCoreOutput
    aborted_before: tuple[str, ...] = ()  # OUTPUT_PHASE: aborts drained from aborts_queue first
    accepted: dict[str, int] = field(default_factory=dict)  # OUTPUT_PHASE: req_id -> drafts the worker accepted
    snapshot: Any = None  # what ``on_phase`` returned right after the call
    kv_report: tuple[str, str] | None = None  # OUTPUT_PHASE: the worker's KV report (kind, req_id), kv_report()


@dataclass
class StepRecord:
    """One engine-loop call."""

    phases: list[Phase]
    model_executed: bool
    returned_outputs: bool  # step_fn returned outputs (not None / not empty)


PhaseCallback = Callable[[Phase], Any]


class EngineCoreDriver:
    """Owns one ``EngineCore`` and observes every scheduler call it makes."""

    def __init__(self, config: EngineDriverConfig, on_phase: PhaseCallback | None = None,
                 scheduler_cls: type | str | None = None) -> None:
        """``scheduler_cls``: ``SchedulerConfig.scheduler_cls`` (e.g. the live monitor's class),
        which ``EngineCore.__init__`` and ``new_scheduler`` build instead of vLLM's choice."""
        v = load_vllm()
        from vllm.v1.engine.core import EngineCore

        self.config = config
        self.on_phase = on_phase
        self.on_update_start: Callable[[dict[str, int]], None] | None = None
        """Called with ``returned_tokens`` of the output just before each ``update_from_output``."""
        vllm_config = build_engine_config(config, oracle_executor_class())
        if scheduler_cls is not None:
            vllm_config.scheduler_config.scheduler_cls = scheduler_cls
        with _processor(config.images, MAX_IMAGE_TOKENS):  # the runner's and the scheduler's MultiModalBudget
            self.engine: Any = EngineCore(vllm_config, oracle_executor_class(), log_stats=True)  # as served by default
        self.worker: Any = self.engine.model_executor.driver_worker
        self.scheduler: Any = None
        self._phases: list[Phase] = []
        self._pending_aborts: list[str] = []
        self._arrivals = itertools.count(1)
        self.new_scheduler()
        del v

    def new_scheduler(self, decode_stagger: int = 1, defer_block_free: bool = False,
                      requires_kv_delivery: bool = False, encoder: EncoderBudget | None = None) -> None:
        """A fresh scheduler over the same engine and runner, between cases.

        Built exactly as ``EngineCore.__init__`` builds its scheduler; the engine
        must be idle and the runner's persistent batch empty (every request of
        the last case finished and was removed).  The oracle model's KV store
        is poisoned again and the runner's encoder outputs dropped (``Worker.reset_encoder_cache``:
        identifiers name items per case, and MRV2's ``EncoderRunner.prepare_mm_inputs`` encodes
        nothing its cache holds), so nothing a case computed can leak into the next.
        ``decode_stagger`` > 1 needs ``surfaces.DECODE_STAGGER`` (else ``MissingCapability``).
        ``encoder`` (an engine of ``images``): the case's encoder cache size and compute budget and its
        largest image, which the stand-in processor reports (``encoder_model.stand_in_processor``), set on
        ``SchedulerConfig`` as ``vllm_config.py`` does for the scheduler target.
        """
        from vllm.v1.core.kv_cache_utils import resolve_kv_cache_block_sizes

        engine = self.engine
        if self.scheduler is not None and (left := self.leftover()) is not None:
            raise RuntimeError(f"the engine is not idle: a case did not run to its end ({left})")
        old = self.scheduler if self.scheduler is not None else engine.scheduler
        vllm_config, kv_cache_config = engine.vllm_config, old.kv_cache_config
        block_size, hash_block_size = resolve_kv_cache_block_sizes(kv_cache_config, vllm_config)
        if self.config.images and encoder is None:
            encoder = EncoderBudget(MAX_IMAGE_TOKENS, MAX_IMAGE_TOKENS, MAX_IMAGE_TOKENS)
        if encoder is not None:  # init=False fields, read by Scheduler.__init__'s MultiModalBudget
            vllm_config.scheduler_config.encoder_cache_size = encoder.cache_size
            vllm_config.scheduler_config.max_num_encoder_input_tokens = encoder.compute_budget
        with _processor(encoder is not None, encoder.max_image_tokens if encoder is not None else 0):
            engine.scheduler = vllm_config.scheduler_config.get_scheduler_cls()(
                vllm_config=vllm_config, kv_cache_config=kv_cache_config,
                structured_output_manager=engine.structured_output_manager, include_finished_set=False,
                log_stats=engine.log_stats, block_size=block_size, hash_block_size=hash_block_size,
            )
        self.scheduler = engine.scheduler
        self.scheduler.defer_block_free = defer_block_free  # what a KV-consumer connector sets
        self.scheduler.requires_kv_delivery = requires_kv_delivery  # what a KV-producer connector sets
        give_empty_kv_holding_queue(self.scheduler)  # 0.30.0 has none: observers read it
        self._set_depth(self.config.depth)
        if decode_stagger > 1:
            surfaces.require(surfaces.DECODE_STAGGER)
            self._give_scheduler_pp_stagger(decode_stagger)
        self._watch_scheduler()
        self._use_recording_grammars()
        while not engine.aborts_queue.empty():
            engine.aborts_queue.get_nowait()
        self._pending_aborts = []
        self.worker.model.reset()
        if self.config.images:  # the fresh scheduler's encoder cache manager is empty: so is the runner's cache
            self.worker.reset_encoder_cache()

    # ---- configuration ---------------------------------------------------------

    def _use_recording_grammars(self) -> None:
        """Structured output with the recording grammar (``grammar.py``): xgrammar and a
        tokenizer are not installed.  Grammars compile synchronously, as vLLM does itself
        with the ``external_launcher`` backend for determinism
        (``StructuredOutputManager.__init__``)."""
        manager = self.engine.structured_output_manager
        manager.backend = BitmaskOnlyBackend(load_vllm().torch)
        if hasattr(manager, "backend_name"):  # 0.33.0: one backend per engine, named (absent in 0.32.0)
            manager.backend_name = RECORDING_BACKEND
        manager._use_async_grammar_compilation = False

    def _set_depth(self, depth: int) -> None:
        """Depth 1/2/3 as described in the module docstring (``EngineCore.__init__`` sets
        ``batch_queue`` and ``step_fn`` from ``max_concurrent_batches``)."""
        engine = self.engine
        if depth == 1:
            engine.batch_queue_size, engine.batch_queue = 1, None
            engine.step_fn = engine.step
            return
        engine.batch_queue_size = depth
        engine.batch_queue = deque(maxlen=depth)
        engine.step_fn = engine.step_with_batch_queue

    def _give_scheduler_pp_stagger(self, pp_size: int) -> None:
        """What ``AsyncScheduler.__init__`` sets with MRV2 and pipeline parallelism ``pp_size``.

        ``decode_stagger = pp_size``, applied in ``_update_after_schedule``
        only when ``use_v2_model_runner``; over the V1 runner that flag is
        presented to that one call (the rest of the scheduler keeps the V1
        runner's payload); over MRV2 it is on already.
        """
        sched = self.scheduler
        sched.pp_size = sched.decode_stagger = pp_size
        original, runner_is_v2 = sched._update_after_schedule, sched.use_v2_model_runner

        def update_after_schedule(scheduler_output: Any) -> None:
            sched.use_v2_model_runner = True
            try:
                original(scheduler_output)
            finally:
                sched.use_v2_model_runner = runner_is_v2

        sched._update_after_schedule = update_after_schedule

    def _watch_scheduler(self) -> None:
        """Record each ``schedule()`` / ``update_from_output()`` EngineCore makes."""
        sched = self.scheduler
        schedule, update = sched.schedule, sched.update_from_output

        def watched_schedule(*args: Any, **kwargs: Any) -> Any:
            out = schedule(*args, **kwargs)
            self._record(Phase(SCHEDULE_PHASE, out))
            return out

        def watched_update(scheduler_output: Any, model_output: Any) -> Any:
            drained, self._pending_aborts = tuple(self._pending_aborts), []
            if drained:  # EngineCore has just run _process_aborts_queue
                self._record(Phase(ABORTS_PHASE, scheduler_output, aborted_before=drained))
            accepted = _accepted_drafts(scheduler_output, model_output)
            report = kv_report(sched, getattr(model_output, "kv_connector_output", None))
            if self.on_update_start is not None:
                self.on_update_start(returned_tokens(model_output))
            result = update(scheduler_output, model_output)
            outputs = {o.request_id: o for eco in result.values() for o in eco.outputs}
            self._record(Phase(OUTPUT_PHASE, scheduler_output, outputs, drained, accepted, kv_report=report))
            return result

        sched.schedule = watched_schedule
        sched.update_from_output = watched_update
        sched.get_grammar_bitmask = _one_fill_per_call(sched, sched.get_grammar_bitmask)

    def _record(self, phase: Phase) -> None:
        if self.on_phase is not None:
            phase.snapshot = self.on_phase(phase)
        self._phases.append(phase)

    # ---- the client --------------------------------------------------------------

    def add_request(self, req_id: str, prompt: Sequence[int], max_tokens: int, ignore_eos: bool = False,
                    stop_token_ids: Sequence[int] = (), structured: bool = False,
                    frequency_penalty: float = 0.0, period: int = 0, resumable: bool = False,
                    kv_transfer_params: dict[str, Any] | None = None,
                    images: Sequence[tuple[int, int, int]] = (), logprobs: int = 0) -> None:
        """``EngineCore.preprocess_add_request`` + ``add_request``, as the input thread does.

        ``structured``: the request carries a grammar (a regex), compiled by the
        recording backend into a ``RecordingGrammar``; ``frequency_penalty``: the
        sampler reads the request's output history (``apply_penalties``);
        ``period`` > 0: the oracle model continues it periodically (``fake_model.py``);
        ``resumable``: a streaming-input session's chunk (``EngineCoreRequest.resumable``): a
        second request with a session's id is its next input, a non-resumable one the end of
        its input stream (``Scheduler.add_request``); ``kv_transfer_params``: what the KV connector
        reads (``SamplingParams.extra_args["kv_transfer_params"]``, ``Request.__init__``); ``images``: its
        encoder inputs, (offset, length, item) each, as ``MultiModalFeatureSpec``s with their data
        (``oracle_encoder.image_data``), sorted by offset, as a processor's output reaches ``EngineCore``;
        ``logprobs`` k > 0: ``SamplingParams(logprobs=k, prompt_logprobs=k)`` (which skips the prefix cache).
        """
        from vllm.sampling_params import SamplingParams, StructuredOutputsParams
        from vllm.v1.engine import EngineCoreRequest

        grammar = None
        if structured:
            surfaces.require(surfaces.STRUCTURED_OUTPUT)
            grammar = StructuredOutputsParams(regex="[a-z]*")
            grammar._backend = RECORDING_BACKEND
        params = SamplingParams(max_tokens=max_tokens, temperature=0.0, ignore_eos=ignore_eos,
                                stop_token_ids=list(stop_token_ids), structured_outputs=grammar,
                                frequency_penalty=frequency_penalty, logprobs=logprobs or None,
                                prompt_logprobs=logprobs or None,
                                extra_args={"kv_transfer_params": kv_transfer_params} if kv_transfer_params else None)
        params.update_from_generation_config({}, eos_token_id=self.config.eos_token_id)
        session: dict[str, Any] = {"resumable": True} if resumable else {}
        request = EngineCoreRequest(
            request_id=req_id, prompt_token_ids=list(prompt), mm_features=_features(images),
            sampling_params=params, pooling_params=None, arrival_time=float(next(self._arrivals)),
            lora_request=None, cache_salt=None, data_parallel_rank=None,
            **session,
        )
        if period:
            self.worker.model.periods[req_id] = period
        req, wave = self.engine.preprocess_add_request(request)
        self.engine.add_request(req, wave)

    def abort(self, req_ids: Sequence[str]) -> None:
        """A client abort through the input queue: handled between engine steps."""
        self.engine.abort_requests(list(req_ids))

    def abort_in_step(self, req_ids: Sequence[str]) -> None:
        """A client abort that arrives while a step runs (``EngineCore.aborts_queue``)."""
        self._pending_aborts.extend(req_ids)
        self.engine.aborts_queue.put(list(req_ids))

    def aborts_pending(self) -> bool:
        """An ``abort_in_step`` has not been drained by a step yet."""
        return bool(self._pending_aborts)

    def reset_prefix_cache(self) -> bool:
        """``EngineCore.reset_prefix_cache(reset_running_requests=True)``."""
        return bool(self.engine.reset_prefix_cache(reset_running_requests=True))

    def pause(self, mode: str, clear_cache: bool) -> None:
        """``EngineCore.pause_scheduler(mode, clear_cache)``, in process: ``abort`` finishes every
        request, then ``PAUSED_NEW``; ``keep`` ``PAUSED_ALL``; then ``_finish_pause`` (the worker's
        ``synchronize_device`` and, with ``clear_cache``, ``reset_prefix_cache(reset_running_requests=True)``
        and the multimodal and encoder caches).  Steps in flight stay in the batch queue."""
        surfaces.require(surfaces.ENGINE_PAUSE)
        self.engine.pause_scheduler(mode=mode, clear_cache=clear_cache)

    def resume(self) -> None:
        """``EngineCore.resume_scheduler()``."""
        self.engine.resume_scheduler()

    def paused(self) -> bool:
        """``EngineCore.is_scheduler_paused()``."""
        return bool(self.engine.is_scheduler_paused())

    # ---- the busy loop -----------------------------------------------------------

    def has_work(self) -> bool:
        """What ``EngineCoreProc`` asks before another step."""
        return bool(self.scheduler.has_requests() or self.engine.batch_queue)

    def schedules_next(self) -> bool:
        """Whether the next ``step_with_batch_queue`` calls ``schedule()`` (``has_requests()``)."""
        return bool(self.scheduler.has_requests())

    def leftover(self) -> str | None:
        """What the engine still holds after a case, or None when it is idle: work the scheduler or
        the batch queue has (``has_work``), or requests the runner's persistent batch keeps."""
        runner = self.worker.runner
        held = runner.req_states.req_id_to_index if hasattr(runner, "req_states") else runner.requests  # MRV2 / V1
        if self.has_work():
            return (f"the scheduler holds {sorted(self.scheduler.requests)}, "
                    f"{len(self.engine.batch_queue or ())} step(s) in the batch queue")
        if held:
            return f"the model runner still holds {sorted(held)}"
        return None

    def step(self) -> StepRecord:
        """One ``step_fn()`` and ``post_step`` (``EngineCoreProc._process_engine_step``)."""
        self._phases = []
        outputs, model_executed = self.engine.step_fn()
        self.engine.post_step(model_executed)
        phases, self._phases = self._phases, []
        return StepRecord(phases, bool(model_executed), bool(outputs))

    def take_phases(self) -> list[Phase]:
        """The phases of a step that raised, up to the failure."""
        phases, self._phases = self._phases, []
        return phases

    def fed_rows(self, start: int = 0) -> list[list[Any]]:
        """Per forward pass from pass ``start`` on: what the runner fed each request (``FedRow``s)."""
        return list(self.worker.model.fed[start:])

    def in_flight(self) -> int:
        """Steps scheduled whose output has not been processed."""
        queue = self.engine.batch_queue
        return len(queue) if queue is not None else 0


@dataclass(frozen=True)
class EncoderBudget:
    """A case's encoder settings (``SchedulerConfig``'s and the stand-in processor's)."""

    max_image_tokens: int  # what the stand-in processor reports per image: the case's largest
    cache_size: int  # SchedulerConfig.encoder_cache_size
    compute_budget: int  # SchedulerConfig.max_num_encoder_input_tokens


MAX_IMAGE_TOKENS = 4
"""What the stand-in processor reports while the engine is built (the runner's ``MultiModalBudget``, used
only for profiling, which the worker skips): the largest image a case draws (``workload_draw.IMAGE_LENGTHS``)."""


def _processor(images: bool, max_image_tokens: int) -> Any:
    """The stand-in multimodal processor while a multimodal engine or scheduler is built; nothing else."""
    return stand_in_processor(max_image_tokens) if images else contextlib.nullcontext()


def _features(images: Sequence[tuple[int, int, int]]) -> list[Any] | None:
    """A request's ``mm_features``: one image per (offset, length, item), with its data; None without images."""
    return [image(item_id(item), offset, length, image_data(item, length))
            for offset, length, item in sorted(images)] or None


def returned_tokens(model_output: Any) -> dict[str, int]:
    """Per request the output returns tokens for: how many (its sampled row's length)."""
    sampled = getattr(model_output, "sampled_token_ids", None) or []
    index = getattr(model_output, "req_id_to_index", None) or {}
    return {req_id: len(sampled[row]) for req_id, row in index.items() if row < len(sampled) and len(sampled[row])}


def kv_report(sched: Any, output: Any) -> tuple[str, str] | None:
    """The worker's ``KVConnectorOutput`` as one load report (kind, req_id), read before
    ``update_from_output`` sees it: ``recv``, ``fail`` (in ``failed_recving`` too) or
    ``invalid@j`` (``invalid_block_ids`` holds the request's blocks from block index j on, in
    its first KV cache group's block ids); None without a finished load.  The toy worker
    reports one load per step (``toy_connector.py``); a second would raise."""
    recving = sorted(getattr(output, "finished_recving", None) or ())
    if not recving:
        return None
    if len(recving) > 1:
        raise RuntimeError(f"the worker reported {len(recving)} loads in one step: {recving}")
    req_id = recving[0]
    if req_id in (output.failed_recving or ()):
        return "fail", req_id
    invalid = output.invalid_block_ids or set()
    if invalid:
        (block_ids, *_) = sched.kv_cache_manager.get_block_ids(req_id)
        first = min(i for i, b in enumerate(block_ids) if b in invalid)
        return f"invalid@{first}", req_id
    return "recv", req_id


def _accepted_drafts(scheduler_output: Any, model_output: Any) -> dict[str, int]:
    """Per request with drafts scheduled in the step: how many the worker accepted.

    What ``update_from_output`` itself derives: the tokens the worker sampled
    for the request, less the one it samples after the accepted drafts.
    """
    sampled = getattr(model_output, "sampled_token_ids", None) or []
    index = getattr(model_output, "req_id_to_index", None) or {}
    out: dict[str, int] = {}
    for req_id in scheduler_output.scheduled_spec_decode_tokens:
        row = index.get(req_id)
        if row is not None and row < len(sampled) and sampled[row]:
            out[req_id] = len(sampled[row]) - 1
    return out


def _one_fill_per_call(sched: Any, get_grammar_bitmask: Callable[..., Any]) -> Callable[..., Any]:
    """``Scheduler.get_grammar_bitmask``, keeping one entry per call in each ``RecordingGrammar.fills``.

    With drafts a request gets one bitmask row per draft position plus one
    (its grammar tentatively accepts the drafts, then rolls them back): the
    rows must see the grammar at consecutive token counts.  Only the first
    row's count is kept (what the sampled position is constrained from, as
    ``scheduler_driver.grammar_bitmask`` reads it); rows out of sequence keep
    -1 instead, which no position matches.
    """
    def watched(*args: Any, **kwargs: Any) -> Any:
        grammars = [g for r in sched.requests.values()
                    if (g := getattr(r.structured_output_request, "grammar", None)) is not None and hasattr(g, "fills")]
        before = [len(g.fills) for g in grammars]
        result = get_grammar_bitmask(*args, **kwargs)
        for g, n in zip(grammars, before):
            rows = g.fills[n:]
            if len(rows) > 1:
                g.fills[n:] = [rows[0] if rows == list(range(rows[0], rows[0] + len(rows))) else -1]
        return result

    return watched
