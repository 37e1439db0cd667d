"""vLLM 0.33.0's real scheduler objects as a fuzz target (``--target vllm``).

``VllmTarget`` drives ``AsyncScheduler`` (depth 2) or ``Scheduler`` (depth 1)
through ``engine/vllm/scheduler_driver.py``; the harness plays the engine loop
and the worker.  Block ids are normalized to the spec's: vLLM's pool has the
null block 0 in front, so vLLM block ``b`` is spec block ``b - 1`` (both free
queues start in id order and return freed blocks with the same front/back
rule, so the orders can be compared exactly).
"""
from __future__ import annotations

from collections import deque
from dataclasses import replace
from typing import Any

from asyncspec.engine.vllm.vllm_config import NIXL_REMOTE_PREFILL, DriverConfig
from asyncspec.engine.vllm.scheduler_driver import VllmDriver

from asyncspec.statemachine_tests.core.harness import Observation, Workload
from asyncspec.statemachine_tests.core.workload import kv_events_on
from asyncspec.statemachine_tests.core.stop_tokens import oracle_token, sampling_of
from asyncspec.statemachine_tests.scheduler.offload_worker import OffloadWorker
from asyncspec.statemachine_tests.scheduler import encoder_obs
from asyncspec.statemachine_tests.scheduler.kv_events_obs import VllmKvEvents
from asyncspec.statemachine_tests.scheduler.payload import payload_of
from asyncspec.statemachine_tests.scheduler.spec_target import stream_prompt
from asyncspec.statemachine_tests.scheduler.vllm_observer import SchedulerObserver, req_index

def driver_config(w: Workload) -> DriverConfig:
    """The ``DriverConfig`` of a workload (``engine/vllm/vllm_config.py``)."""
    return DriverConfig(
        block_size=w.block_size,
        num_blocks=w.num_blocks,
        max_num_seqs=w.max_num_seqs,
        max_num_batched_tokens=w.token_budget,
        enable_chunked_prefill=w.chunked_prefill,
        async_scheduling=w.depth >= 2 and not w.sync_scheduler,
        mrv2_pp=w.depth == 3,  # real depth 3: Model Runner V2 + pipeline parallelism 2
        defer_block_free=False,  # forced by VllmTarget, so both modes share one vLLM config
        enable_prefix_caching=w.prefix_caching,
        max_model_len=w.max_model_len,
        num_speculative_tokens=w.num_speculative_tokens,
        sliding_window=w.sliding_window,
        kv_connector=bool(w.kv_connector),
        kv_connector_name=w.kv_connector or "toy",
        policy=w.policy,
        long_prefill_token_threshold=w.long_prefill_token_threshold,
        long_prefill_adaptive=w.long_prefill_adaptive,
        kv_load_failure_policy=w.kv_load_failure_policy,
        offload_prompt_only=w.kv_offload_prompt_only,
        streaming_input=bool(w.resumable),
        max_image_tokens=max((n for _, _, n, _ in w.images), default=0),
        encoder_cache_size=w.encoder_cache_size,
        encoder_compute_budget=w.encoder_compute_budget,
        mamba_cache_mode=w.mamba_cache_mode,
        kv_cache_events=kv_events_on(w),
    )


def _kv_output(kv: tuple[str, int] | None, sched: Any = None) -> Any:
    """The worker's ``KVConnectorOutput`` (vllm/v1/outputs.py) for one report: a load done
    (``finished_recving``), failed (``failed_recving`` and ``finished_recving``: the release
    always comes through the latter), its blocks from block index j on invalid (``invalid@j``:
    those of ``sched``'s block ids in ``invalid_block_ids``, and ``finished_recving``) or a
    send done (``finished_sending``); None for none."""
    if kv is None:
        return None
    from vllm.v1.outputs import KVConnectorOutput

    kind, req = kv
    rid = {f"r{req}"}
    if kind == "sent":
        return KVConnectorOutput(finished_sending=rid)
    head, _, first = kind.partition("@")
    if head == "invalid":
        (block_ids,) = sched.kv_cache_manager.get_block_ids(f"r{req}")  # one KV cache group
        return KVConnectorOutput(finished_recving=rid, invalid_block_ids=set(block_ids[int(first):]))
    return KVConnectorOutput(finished_recving=rid, failed_recving=rid if kind == "fail" else set())


class _InFlight:
    """A scheduled step the harness's worker holds: what it samples, per request.

    ``plan[req] = [first sampled output position (0 = prefill chunk), drafts
    scheduled, the request's num_preemptions when scheduled]``.  The position is
    the worker's: it moves earlier when an earlier step of the same request had
    drafts rejected (the on-device correction of Model Runner V2's
    ``post_update``; V1 since vllm#32951).
    """

    __slots__ = ("step", "plan")

    def __init__(self, step: Any, plan: dict[int, list[int]]) -> None:
        self.step = step
        self.plan = plan


class VllmTarget:
    """vLLM 0.33.0's real scheduler, driven through ``VllmDriver``.

    Per step it remembers which output position each scheduled request
    samples, computed from vLLM's own counters right after ``schedule()``
    (``num_computed_tokens - drafts - num_prompt_tokens + 1``; 0 for a prefill
    chunk), and delivers ``stop_tokens.oracle_token`` for it (and the accepted drafts'
    positions after it).  ``requires_kv_delivery`` is set on
    the scheduler for the drop stale mode (vLLM reads it from a KV-producer
    connector; nothing else in the scheduler reads it), as ``defer_block_free``
    is forced by the driver the way vLLM's tests do.

    The harness plays the engine loop and the worker:

    * a step is sampled (``get_grammar_bitmask``) as soon as it is scheduled,
      unless ``SchedulerOutput.pending_structured_output_tokens`` is set: then it
      is held as the deferred step and sampled, then queued, right after the next
      ``update_from_output`` (``EngineCore.step_with_batch_queue``; with
      speculative decoding the worker's drafts first replace its -1 placeholders,
      ``update_draft_token_ids_in_output``);
    * synchronous scheduling with speculative decoding: after each output the
      worker's k draft ids reach the scheduler (``update_draft_token_ids``, as
      ``EngineCore.post_step`` does); under async the scheduler keeps -1
      placeholders and the worker fills them;
    * structured output: every grammar is a ``RecordingGrammar``; a bitmask row
      built when the grammar had not seen every token before the sampled
      position (or had seen a different sequence than the request's output)
      shows as ``grammar_gap``.
    """

    name = "vllm"

    def __init__(self, w: Workload) -> None:
        self.workload = w
        self.driver = VllmDriver(driver_config(w))
        self.sched: Any = self.driver.scheduler
        self.sched.defer_block_free = w.defer_block_free  # as vLLM's tests (and the driver) do
        self.sched.requires_kv_delivery = w.stale_mode == "drop"
        self.observer = SchedulerObserver(self.sched, w.prefix_caching, self._has_grammar_gap)
        self.offload = OffloadWorker(self.sched) if w.kv_connector == "offloading" else None
        self._requests = self.observer.requests
        self.kv_events = VllmKvEvents(self.sched, self._requests) if kv_events_on(w) else None
        self._queue: deque[_InFlight] = deque()
        self._deferred: _InFlight | None = None  # executed, sampling deferred (structured output)
        self._grammar_gap: set[int] = set()
        self._last: tuple[Any, Any, Any, Any] = ((), (), (), ())
        self._stream_sent: dict[int, int] = {}  # session -> inputs sent after its first
        self._last_output: Any = None  # this event's SchedulerOutput (encoder_obs), if a schedule()

    # ---- events ----------------------------------------------------------------

    def add_request(self, req: int, prompt_len: int, max_tokens: int, eos_position: int) -> None:
        self._begin()
        rid = f"r{req}"
        w = self.workload
        asks: dict[str, Any] | None = {"load": req in w.remote_loads, "send": req in w.remote_sends}
        if w.kv_connector == "nixl":  # a decode-side request pulling its prompt's KV
            asks = dict(NIXL_REMOTE_PREFILL) if req in w.remote_loads else None
        self.driver.add_request(rid, prompt_len=prompt_len, max_tokens=max_tokens,
                                structured_output=req in w.structured_output,
                                skip_reading_prefix_cache=req in w.skip_reading,
                                kv_transfer_params=asks if asks and any(asks.values()) else None,
                                priority=w.priorities[req] if w.priorities else 0,
                                resumable=req in w.resumable,
                                images=[(o, n, item) for r, o, n, item in w.images if r == req],
                                **sampling_of(w, req))
        self.observer.track(req)

    def stream_input(self, req: int, close: bool) -> None:
        """The client's next input of session ``req``: ``Scheduler.add_request`` with its id, a
        resumable chunk (the next of ``stream_updates``) or, for ``close``, the final
        non-resumable request ``AsyncLLM`` sends when the input stream ends (prompt ``[0]``)."""
        self._begin()
        index = self._stream_sent.get(req, 0) + 1
        self._stream_sent[req] = index
        if close:
            self.driver.add_request(f"r{req}", prompt_len=1, max_tokens=1, prompt_token_ids=[0])
            return
        new_tokens, max_tokens = self.workload.stream_updates[index - 1]
        self.driver.add_request(f"r{req}", prompt_len=new_tokens, max_tokens=max_tokens,
                                prompt_token_ids=list(stream_prompt(req, index, new_tokens)), resumable=True)

    def schedule(self) -> None:
        self._begin()
        step = self.driver.schedule()
        raw_order = [req_index(rid) for rid in step._raw.num_scheduled_tokens]
        scheduled: list[tuple[int, int, int]] = []
        plan: dict[int, list[int]] = {}
        for req in raw_order:
            rid = f"r{req}"
            drafts = step.num_scheduled_drafts.get(rid, 0)
            position = self._sampled_position(req, step.is_prefill_chunk[rid], drafts)
            scheduled.append((req, step.num_scheduled_tokens[rid], position))
            plan[req] = [position, drafts, int(self._requests[req].num_preemptions)]
        entry = _InFlight(step, plan)
        if self.offload is not None:
            self.offload.scheduled(step.index, step._raw)
        if step.pending_structured_output_tokens and not step.is_empty:
            self._deferred = entry  # forward pass now, sampling after the next output
        else:
            self._sample(entry)
        self._last = (tuple(scheduled), (), (), payload_of(step._raw))
        self._last_output = step._raw

    def _sampled_position(self, req: int, is_chunk: bool, drafts: int) -> int:
        if is_chunk:
            return 0
        r = self._requests[req]
        return int(r.num_computed_tokens) - drafts - int(r.num_prompt_tokens) + 1

    def _sample(self, entry: _InFlight) -> None:
        """Bitmask (structured output) and ``sample_tokens``; the step joins the queue."""
        if not entry.step.is_empty and self.workload.structured_output:
            for rid, known in self.driver.grammar_bitmask(entry.step).items():
                req = int(rid[1:])
                position = entry.plan[req][0] if req in entry.plan else 0
                if known != position - 1:
                    self._grammar_gap.add(req)
        self._queue.append(entry)

    def deliver_oldest(self, accepted: tuple[tuple[int, int], ...] = (), kv: tuple[str, int] | None = None) -> None:
        self._begin()
        if not self._queue:
            raise RuntimeError("no step in flight")
        entry = self._queue[0]
        counts = dict(accepted)
        sampled: dict[str, list[int]] = {}
        for req, (position, drafts, incarnation) in entry.plan.items():
            if not position:
                continue
            n_accepted = counts.get(req, 0)
            if n_accepted > drafts:
                raise ValueError(f"r{req}: {n_accepted} drafts accepted but {drafts} scheduled")
            sampled[f"r{req}"] = [oracle_token(self.workload, req, position + j) for j in range(n_accepted + 1)]
            if drafts > n_accepted:  # the worker corrects the request's later steps
                for later in (*list(self._queue)[1:], self._deferred):
                    plan = later.plan.get(req) if later is not None else None
                    if plan and plan[0] and plan[2] == incarnation:
                        plan[0] -= drafts - n_accepted
        self.observer.before_delivery({req_index(r): len(toks) for r, toks in sampled.items()})
        kv_output = (self.offload.output(kv[0], kv[1], entry.step.index) if self.offload is not None and kv is not None
                     else _kv_output(kv, self.sched))
        result = self.driver.deliver(entry.step, sampled, kv_output)
        self.observer.after_delivery()
        self._queue.popleft()
        if self.workload.num_speculative_tokens and self.workload.depth == 1 and not entry.step.is_empty:
            self.driver.update_draft_token_ids(*self._drafts(entry))  # EngineCore.post_step
        if self._deferred is not None:
            deferred, self._deferred = self._deferred, None
            if self.workload.num_speculative_tokens:
                self.driver.update_draft_token_ids_in_output(deferred.step, *self._drafts(deferred))
            self._sample(deferred)
        delivered = tuple(sorted((req_index(r), toks) for r, toks in result.new_token_ids.items() if toks))
        finished = tuple(sorted((req_index(r), why) for r, why in result.finish_reasons.items()))
        self._last = ((), delivered, finished, ())

    def _drafts(self, entry: _InFlight) -> tuple[list[str], list[list[int]]]:
        """The worker's k draft ids for each request of ``entry`` (never EOS)."""
        k = self.workload.num_speculative_tokens
        reqs = list(entry.plan)
        return [f"r{r}" for r in reqs], [[3 + (r + j) % 997 for j in range(k)] for r in reqs]

    def abort(self, req: int) -> None:
        self._begin()
        self.driver.abort([f"r{req}"])

    def reset_prefix_cache(self) -> None:
        self._begin()
        self.sched.reset_prefix_cache(reset_running_requests=True)

    def pause(self, mode: str) -> None:
        """What ``EngineCore.pause_scheduler(mode, clear_cache=False)`` does to the scheduler."""
        self._begin()
        self.driver.pause(mode)

    def resume(self) -> None:
        """``EngineCore.resume_scheduler``: the scheduler ``UNPAUSED``."""
        self._begin()
        self.driver.resume()

    def _begin(self) -> None:
        self.observer.begin_event()
        if self.kv_events is not None:
            self.kv_events.begin_event()
        self._last = ((), (), (), ())
        self._last_output = None

    # ---- observation -----------------------------------------------------------

    def observe(self) -> Observation:
        scheduled, delivered, finished, payload = self._last
        obs = self.observer.observe(scheduled, delivered, finished, len(self._queue),
                                    self._deferred is not None, payload)
        if self.offload is not None:
            obs = replace(obs, store_jobs=self.offload.store_jobs())
        if self.kv_events is not None:
            obs = replace(obs, kv_events=self.kv_events.view())
        if not self.workload.images:
            return obs
        return replace(obs, encoder=encoder_obs.vllm_view(self.sched, self._last_output))

    def _has_grammar_gap(self, i: int, r: Any) -> bool:
        """A bitmask built out of order, or a grammar that saw other tokens than the output."""
        grammar = self.driver.grammars.get(r.request_id)
        if grammar is None:
            return False
        return i in self._grammar_gap or grammar.accepted != [int(t) for t in r.output_token_ids]
