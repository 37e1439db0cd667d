"""A thin driver over vLLM's real scheduler classes (0.30.0 to 0.33.0), runnable on a CPU-only host.

The driver builds a real ``vllm.v1.core.sched.async_scheduler.AsyncScheduler`` (or the
synchronous ``vllm.v1.core.sched.scheduler.Scheduler``) offline: no GPU, no weights,
no tokenizer, no hub.  It exposes the three engine-side operations the async
pipeline is made of (``schedule``, ``deliver`` = process one step's output, ``abort``)
plus an immutable, sorted ``snapshot`` of the counters the spec talks about.

The driver does not run an engine loop.  The caller plays
``EngineCore.step_with_batch_queue`` (vllm/v1/engine/core.py): keep at most
``depth`` steps scheduled but undelivered, deliver them oldest first, and apply
aborts just before a delivery.  Depth 2 with one request (P=10, M=3)::

    >>> from asyncspec.engine.vllm.scheduler_driver import DriverConfig, VllmDriver
    >>> drv = VllmDriver(DriverConfig(async_scheduling=True))
    >>> drv.add_request("r0", prompt_len=10, max_tokens=3)
    >>> s1 = drv.schedule()            # prefill: 10 tokens
    >>> s2 = drv.schedule()            # decode of a still-unknown token: 1 token
    >>> (s1.num_scheduled_tokens["r0"], s2.num_scheduled_tokens["r0"])
    (10, 1)
    >>> drv.snapshot().requests["r0"].num_output_placeholders
    2
    >>> res = drv.deliver(s1, {"r0": [7]})   # the output of the first step
    >>> res.new_token_ids["r0"]
    (7,)
    >>> drv.snapshot().requests["r0"].num_output_placeholders
    1

Before it builds anything the driver checks the surface it needs
(``surfaces.py``; ``vllm_config.needed_capabilities``) and raises
``capabilities.MissingCapability`` when this vLLM lacks it.

Install notes: ``engine/vllm/install.md``; the installer is ``.ci/install-vllm``.
"""

from __future__ import annotations

import itertools
from contextlib import nullcontext
from collections import deque
from collections.abc import Iterable, Mapping
from typing import Any

from asyncspec.engine.vllm.encoder_model import image, item_id, stand_in_processor
from asyncspec.engine.vllm.vllm_config import (
    DriverConfig, configs_for, default_prompt, mrv2_environment, scheduler_block_size,
)
from asyncspec.engine.vllm import surfaces
from asyncspec.engine.vllm.vllm_environment import load_vllm
from asyncspec.engine.vllm.grammar import BitmaskOnlyBackend, recording_grammar_class
from asyncspec.engine.vllm.records import DeliveryResult, RequestSnapshot, ScheduledStep, SchedulerSnapshot

_DRIVER_IDS = itertools.count(1)

class VllmDriver:
    """Owns one real vLLM scheduler and a FIFO of its undelivered steps."""

    def __init__(self, config: DriverConfig | None = None) -> None:
        """Build ``AsyncScheduler`` or ``Scheduler`` (vllm/v1/core/sched/scheduler.py,
        ``Scheduler.__init__``) from cached configs; cheap after the first call."""
        self.config = config if config is not None else DriverConfig()
        self._v = load_vllm()
        vllm_config, kv_cache_config = configs_for(self.config)
        cls = self._v.AsyncScheduler if self.config.async_scheduling else self._v.Scheduler
        processor = stand_in_processor(self.config.max_image_tokens) if self.config.max_image_tokens else nullcontext()
        with mrv2_environment(self.config.mrv2_pp), processor:
            self._scheduler: Any = cls(
                vllm_config=vllm_config,
                kv_cache_config=kv_cache_config,
                structured_output_manager=self._v.StructuredOutputManager(vllm_config),
                block_size=scheduler_block_size(self.config),  # the groups' LCM with a Mamba group
                **({"hash_block_size": self.config.block_size} if self.config.mamba_cache_mode else {}),
                log_stats=True,  # as vLLM serves by default: make_stats and the prefix-cache stats run
            )
        self._scheduler.defer_block_free = self.config.defer_block_free
        give_empty_kv_holding_queue(self._scheduler)
        self._block_hasher: Any = self._v.block_hasher(
            self.config.block_size, self._v.hash_fn
        )
        self._id = next(_DRIVER_IDS)
        # Structured output without a backend or tokenizer: the manager only
        # needs somewhere to allocate bitmask rows; every grammar is a RecordingGrammar.
        self._scheduler.structured_output_manager.backend = BitmaskOnlyBackend(self._v.torch)
        self.grammars: dict[str, Any] = {}  # req id -> RecordingGrammar
        self._pending: deque[int] = deque()
        self._next_index = 0
        self._num_added = 0

    # ---- raw access --------------------------------------------------------------

    @property
    def scheduler(self) -> Any:
        """The wrapped vLLM scheduler (for checks the snapshot does not cover)."""
        return self._scheduler

    @property
    def num_pending_steps(self) -> int:
        """Steps scheduled but not yet delivered (the engine's batch-queue length)."""
        return len(self._pending)

    # ---- operations --------------------------------------------------------------

    def add_request(
        self,
        req_id: str,
        prompt_len: int,
        max_tokens: int,
        prompt_token_ids: list[int] | None = None,
        structured_output: bool = False,
        kv_transfer_params: dict[str, Any] | None = None,
        priority: int = 0,
        resumable: bool = False,
        images: Iterable[tuple[int, int, int]] = (),
        stop_token_ids: list[int] | None = None,
        min_tokens: int = 0,
        repetition: tuple[int, int, int] | None = None,
        skip_reading_prefix_cache: bool = False,
    ) -> None:
        """Queue a new request; wraps ``Scheduler.add_request`` (scheduler.py).

        EOS is configured as the engine does, through
        ``SamplingParams.update_from_generation_config`` (vllm/sampling_params.py).
        With ``structured_output`` the request carries a grammar (a regex in its
        ``StructuredOutputsParams``) whose compiled form is a ``RecordingGrammar``:
        installed at once, as if compilation had finished, so the request waits in
        ``WAITING_FOR_STRUCTURED_OUTPUT_GRAMMAR`` only until the next schedule().
        ``MissingCapability`` when it does and this vLLM lacks ``STRUCTURED_OUTPUT``.
        ``resumable``: a streaming-input session's chunk (``Request.resumable``); a second
        request with a session's id is its next input, a non-resumable one the end of its
        stream (``Scheduler.add_request``); ``MissingCapability`` without ``STREAMING_INPUT``.
        ``images``: its encoder inputs, (offset, length, item) each, as ``MultiModalFeatureSpec``s
        sorted by offset (the driver must be built with ``max_image_tokens``).
        ``stop_token_ids``, ``min_tokens`` and ``repetition`` (min_pattern_size, max_pattern_size,
        min_count of a ``RepetitionDetectionParams``): the stops ``check_stop`` tests besides EOS
        (vllm/v1/core/sched/utils.py); ``MissingCapability`` without ``STOP_CONDITIONS``.
        ``skip_reading_prefix_cache``: ``SamplingParams.skip_reading_prefix_cache`` (what prompt logprobs
        set): the request never starts from a prefix-cache hit (``KVCacheManager.prefix_cache_lookup_enabled``).
        """
        if structured_output:
            surfaces.require(surfaces.STRUCTURED_OUTPUT)
        session = {"resumable": True} if resumable else {}
        if resumable:
            surfaces.require(surfaces.STREAMING_INPUT)
        if prompt_token_ids is None:
            prompt_token_ids = default_prompt(req_id, prompt_len, self.config.eos_token_id)
        elif len(prompt_token_ids) != prompt_len:
            raise ValueError(
                f"prompt_len={prompt_len} but {len(prompt_token_ids)} prompt ids given"
            )
        structured = self._v.StructuredOutputsParams(regex="[a-z]*") if structured_output else None
        extra = {"kv_transfer_params": kv_transfer_params} if kv_transfer_params else None
        stops = self._stop_params(stop_token_ids, min_tokens, repetition)
        skip = {"skip_reading_prefix_cache": True} if skip_reading_prefix_cache else {}
        params = self._v.SamplingParams(max_tokens=max_tokens, structured_outputs=structured, extra_args=extra,
                                        **stops, **skip)
        params.update_from_generation_config({}, eos_token_id=self.config.eos_token_id)
        self._num_added += 1
        request = self._v.Request(
            request_id=req_id,
            prompt_token_ids=list(prompt_token_ids),
            sampling_params=params,
            pooling_params=None,
            arrival_time=float(self._num_added),
            priority=priority,
            block_hasher=self._block_hasher,
            mm_features=[image(item_id(item), offset, length) for offset, length, item in sorted(images)] or None,
            **session,
        )
        if structured_output:
            grammar = recording_grammar_class()(req_id)
            request.structured_output_request.grammar = grammar
            self.grammars[req_id] = grammar
        self._scheduler.add_request(request)

    @staticmethod
    def _stop_params(stop_token_ids: list[int] | None, min_tokens: int,
                     repetition: tuple[int, int, int] | None) -> dict[str, Any]:
        """The ``SamplingParams`` keywords of a request's stops besides EOS (none: an empty dict)."""
        if stop_token_ids is None and not min_tokens and repetition is None:
            return {}
        surfaces.require(surfaces.STOP_CONDITIONS)
        from vllm.sampling_params import RepetitionDetectionParams

        out: dict[str, Any] = {"min_tokens": min_tokens}
        if stop_token_ids is not None:
            out["stop_token_ids"] = list(stop_token_ids)
        if repetition is not None:
            low, high, count = repetition
            out["repetition_detection"] = RepetitionDetectionParams(
                max_pattern_size=high, min_pattern_size=low, min_count=count)
        return out

    def schedule(self) -> ScheduledStep:
        """Run one ``Scheduler.schedule()`` (scheduler.py; the async override of
        ``_update_after_schedule`` is in async_scheduler.py) and record the step."""
        out = self._scheduler.schedule()
        counts = {rid: int(n) for rid, n in sorted(out.num_scheduled_tokens.items())}
        requests = self._scheduler.requests
        chunk = {rid: bool(requests[rid].is_prefill_chunk) for rid in counts}
        step = ScheduledStep(
            index=self._next_index,
            num_scheduled_tokens=counts,
            is_prefill_chunk=chunk,
            new_req_ids=tuple(sorted(r.req_id for r in out.scheduled_new_reqs)),
            resumed_req_ids=tuple(sorted(out.scheduled_cached_reqs.resumed_req_ids)),
            preempted_req_ids=tuple(sorted(out.preempted_req_ids or ())),
            finished_req_ids=tuple(sorted(out.finished_req_ids)),
            total_num_scheduled_tokens=int(out.total_num_scheduled_tokens),
            num_scheduled_drafts={
                rid: len(ids) for rid, ids in sorted(out.scheduled_spec_decode_tokens.items())
            },
            pending_structured_output_tokens=bool(out.pending_structured_output_tokens),
            _raw=out,
            _driver_id=self._id,
        )
        self._next_index += 1
        self._pending.append(step.index)
        return step

    def deliver(self, step: ScheduledStep, sampled: Mapping[str, list[int]],
                kv_output: Any = None) -> DeliveryResult:
        """Process the output of the oldest undelivered step; wraps
        ``Scheduler.update_from_output`` (scheduler.py).

        ``sampled`` must give the tokens of every scheduled request that was not a
        prefill chunk (``[]`` is allowed, e.g. for an aborted request); prefill-chunk
        requests always get ``[]`` whatever ``sampled`` says, as the model runner
        returns no token for a partial prefill.  Steps must be delivered in the order
        they were scheduled (vLLM's ``sched_step_seq``/``processed_step_seq`` rely on it).
        ``kv_output``: the worker's KV connector report riding on this output.
        """
        self._check_deliverable(step)
        output = self._model_runner_output(step, sampled)
        output.kv_connector_output = kv_output  # a KVConnectorOutput (vllm/v1/outputs.py) or None
        engine_outputs = self._scheduler.update_from_output(step._raw, output)
        self._pending.popleft()
        return _delivery_result(step.index, engine_outputs)

    def abort(self, req_ids: Iterable[str]) -> None:
        """Abort requests; wraps ``Scheduler.finish_requests(ids, FINISHED_ABORTED)``.
        Unknown or already finished ids are ignored, as vLLM does."""
        ids = list(req_ids)
        if ids:
            self._scheduler.finish_requests(ids, self._v.RequestStatus.FINISHED_ABORTED)

    def pause(self, mode: str) -> None:
        """``EngineCore.pause_scheduler(mode, clear_cache=False)``'s effect on the scheduler
        (vllm/v1/engine/core.py): ``abort`` finishes every request ABORTED, then
        ``PAUSED_NEW``; ``wait`` (``EngineCoreProc``'s) ``PAUSED_NEW``; ``keep`` ``PAUSED_ALL``."""
        surfaces.require(surfaces.PAUSE)
        from vllm.v1.core.sched.interface import PauseState

        if mode == "abort":
            self._scheduler.finish_requests(None, self._v.RequestStatus.FINISHED_ABORTED)
        self._scheduler.set_pause_state(PauseState.PAUSED_ALL if mode == "keep" else PauseState.PAUSED_NEW)

    def resume(self) -> None:
        """``EngineCore.resume_scheduler``: ``set_pause_state(UNPAUSED)``."""
        from vllm.v1.core.sched.interface import PauseState

        self._scheduler.set_pause_state(PauseState.UNPAUSED)

    def has_requests(self) -> bool:
        """``Scheduler.has_requests()``: unfinished requests or unsent finished ids."""
        return bool(self._scheduler.has_requests())

    def snapshot(self) -> SchedulerSnapshot:
        """An immutable, sorted view of the live requests and scheduler counters.

        Requests are those still in ``scheduler.requests`` (a finished request leaves
        it in ``_free_blocks``).  Block ids come from ``KVCacheManager.get_block_ids``,
        one list per KV cache group (``group_block_ids``; a sliding-window list starts
        with null blocks, id 0), the first group's also as ``block_ids``
        (vllm/v1/core/kv_cache_manager.py), free blocks from
        ``BlockPool.get_num_free_blocks`` (block_pool.py; the null block not counted).
        ``kv_holding_waiting`` is empty where vLLM has no such queue (``KV_HOLDING_WAITING``
        absent: 0.30.0, whose connector loads wait in ``skipped_waiting``, which this
        snapshot does not read; ``give_empty_kv_holding_queue``).
        """
        sched = self._scheduler
        requests = {
            rid: self._request_snapshot(sched.requests[rid]) for rid in sorted(sched.requests)
        }
        return SchedulerSnapshot(
            requests=requests,
            running=tuple(r.request_id for r in sched.running),
            waiting=tuple(r.request_id for r in sched.waiting),
            kv_holding_waiting=tuple(r.request_id for r in sched.kv_holding_waiting),
            sched_step_seq=int(sched.sched_step_seq),
            processed_step_seq=int(sched.processed_step_seq),
            deferred_frees=tuple(
                (int(fence), tuple(b.block_id for b in blocks))
                for fence, blocks in sched.deferred_frees
            ),
            num_free_blocks=int(sched.kv_cache_manager.block_pool.get_num_free_blocks()),
        )

    def grammar_bitmask(self, step: ScheduledStep) -> dict[str, int]:
        """``Scheduler.get_grammar_bitmask`` for ``step``, as the engine calls it
        right before ``sample_tokens`` (``EngineCore.step``/``step_with_batch_queue``).

        Returns, per structured-output request that got a bitmask, the number of
        tokens its grammar had accepted when the request's first row was filled
        (the grammar state the sampled position is constrained from).
        """
        for g in self.grammars.values():
            g.fills.clear()
        self._scheduler.get_grammar_bitmask(step._raw)
        return {rid: g.fills[0] for rid, g in self.grammars.items() if g.fills}

    def update_draft_token_ids(self, req_ids: list[str], drafts: list[list[int]]) -> None:
        """The synchronous engine's ``post_step``: the worker's draft ids reach the
        scheduler (``Scheduler.update_draft_token_ids``)."""
        self._scheduler.update_draft_token_ids(self._v.DraftTokenIds(list(req_ids), drafts))

    def update_draft_token_ids_in_output(self, step: ScheduledStep, req_ids: list[str],
                                         drafts: list[list[int]]) -> None:
        """``step_with_batch_queue`` before sampling a deferred step: the worker's
        drafts replace the -1 placeholders (``Scheduler.update_draft_token_ids_in_output``)."""
        self._scheduler.update_draft_token_ids_in_output(
            self._v.DraftTokenIds(list(req_ids), drafts), step._raw)

    # ---- helpers -----------------------------------------------------------------

    def _check_deliverable(self, step: ScheduledStep) -> None:
        if step._driver_id != self._id or step._raw is None:
            raise ValueError(f"step {step.index} was not scheduled by this driver")
        if not self._pending or self._pending[0] != step.index:
            oldest = self._pending[0] if self._pending else None
            raise ValueError(
                f"step {step.index} delivered out of order (oldest undelivered: {oldest})"
            )

    def _model_runner_output(
        self, step: ScheduledStep, sampled: Mapping[str, list[int]]
    ) -> Any:
        """A fabricated ``ModelRunnerOutput`` (vllm/v1/outputs.py) for ``step``."""
        unknown = sorted(set(sampled) - set(step.num_scheduled_tokens))
        if unknown:
            raise ValueError(f"step {step.index} did not schedule {unknown}")
        req_ids = list(step._raw.num_scheduled_tokens)
        tokens: list[list[int]] = []
        for rid in req_ids:
            if step.is_prefill_chunk[rid]:
                tokens.append([])
            elif rid in sampled:
                tokens.append(list(sampled[rid]))  # vLLM trims this list in place
            else:
                raise ValueError(f"step {step.index}: no sampled tokens for {rid!r}")
        return self._v.ModelRunnerOutput(
            req_ids=req_ids,
            req_id_to_index={rid: i for i, rid in enumerate(req_ids)},
            sampled_token_ids=tokens,
            logprobs=None,
            prompt_logprobs_dict={},
            pooler_output=[],
        )

    def _request_snapshot(self, req: Any) -> RequestSnapshot:
        block_ids = self._scheduler.kv_cache_manager.get_block_ids(req.request_id)
        return RequestSnapshot(
            req_id=str(req.request_id),
            status=str(req.status.name),
            num_tokens=int(req.num_tokens),
            num_prompt_tokens=int(req.num_prompt_tokens),
            num_output_tokens=int(req.num_output_tokens),
            num_computed_tokens=int(req.num_computed_tokens),
            num_output_placeholders=int(req.num_output_placeholders),
            num_in_flight_tokens=int(req.num_in_flight_tokens),
            num_stale_output_tokens=int(req.num_stale_output_tokens),
            drop_stale_output=bool(req.drop_stale_output),
            is_prefill_chunk=bool(req.is_prefill_chunk),
            num_preemptions=int(req.num_preemptions),
            last_sched_seq=int(req.last_sched_seq),
            block_ids=tuple(int(b) for b in block_ids[0]),
            output_token_ids=tuple(int(t) for t in req.output_token_ids),
            group_block_ids=tuple(tuple(int(b) for b in group) for group in block_ids),
        )


def give_empty_kv_holding_queue(scheduler: Any) -> None:
    """An empty ``kv_holding_waiting`` on a scheduler whose release has no such queue (0.30.0).

    Observers read that queue after every call; without a KV connector it is
    always empty on the releases that have it, and a driver config with a
    connector needs ``surfaces.KV_HOLDING_WAITING`` (``vllm_config.needed_capabilities``),
    so the empty stand-in is what those releases would show.  vLLM 0.30.0 never reads it.
    """
    if not surfaces.has(surfaces.KV_HOLDING_WAITING) and not hasattr(scheduler, "kv_holding_waiting"):
        scheduler.kv_holding_waiting = ()


def _delivery_result(index: int, engine_outputs: Mapping[int, Any]) -> DeliveryResult:
    """Flatten ``update_from_output``'s {client: EngineCoreOutputs} into sorted maps."""
    tokens: dict[str, tuple[int, ...]] = {}
    reasons: dict[str, str] = {}
    for client_outputs in engine_outputs.values():
        for out in client_outputs.outputs:
            rid = str(out.request_id)
            tokens[rid] = tokens.get(rid, ()) + tuple(int(t) for t in out.new_token_ids)
            if out.finish_reason is not None:
                reasons[rid] = str(out.finish_reason.name).lower()
    return DeliveryResult(
        step_index=index,
        new_token_ids=dict(sorted(tokens.items())),
        finish_reasons=dict(sorted(reasons.items())),
    )
