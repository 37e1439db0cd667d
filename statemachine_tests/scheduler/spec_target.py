"""The spec as a fuzz target: the oracle of every comparison.

``SpecTarget`` calls the executable spec (``spec/engine.py``) action by action
with a ``SpecConfig`` built from the workload (every request declared up
front, ``late_arrivals=True``).  It also says which events are enabled and
which spec events (coverage) each transition exercised.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from asyncspec.engine.vllm.vllm_config import default_prompt
from asyncspec.spec import encoder
from asyncspec.spec import engine as eng
from asyncspec.spec import request as rq
from asyncspec.spec import stop
from asyncspec.spec.config import SpecConfig
from asyncspec.spec.draft import has_requests, num_waiting_for_streaming_input
from asyncspec.spec.properties import expected_output
from asyncspec.spec.engine import Action
from asyncspec.spec.output import takes_acceptance
from asyncspec.spec.state import EngineState, Step, initial_state

from asyncspec.statemachine_tests.core.harness import (
    ABORT, ADD_REQUEST, DELIVER, PAUSE_KINDS, RESET_PREFIX_CACHE, RESUME, SCHEDULE, STREAM_CLOSE, STREAM_UPDATE, Event,
    Observation,
    RequestObs, Workload,
)
from asyncspec.statemachine_tests.core.stop_tokens import oracle_token
from asyncspec.statemachine_tests.core.workload import kv_events_on
from asyncspec.statemachine_tests.scheduler import encoder_obs, kv_events_obs, stop_obs
from asyncspec.statemachine_tests.scheduler.encoder_obs import ENCODER_INPUT_DROPPED, ENCODER_INPUT_RESENT
from asyncspec.statemachine_tests.scheduler.payload import RUNNING, PayloadEntry, as_mrv2, expected_payload, second_group

PromptOf = Callable[[int], tuple[int, ...]]
TokenOf = Callable[[int, int], int]

_SPEC_STATUS = {
    rq.WAITING: "WAITING",
    rq.RUNNING: "RUNNING",
    rq.PREEMPTED: "PREEMPTED",
    rq.FINISHED_STOPPED: "STOPPED",
    rq.FINISHED_LENGTH_CAPPED: "LENGTH",
    rq.FINISHED_ABORTED: "ABORTED",
    rq.WAITING_FOR_REMOTE_KVS: "WAITING_FOR_REMOTE_KVS",
    rq.FINISHED_ERROR: "ERROR",
    rq.WAITING_FOR_STREAMING_REQ: "WAITING_FOR_STREAMING_REQ",
}
_FINISH_REASON = {rq.FINISHED_STOPPED: "stop", rq.FINISHED_LENGTH_CAPPED: "length", rq.FINISHED_ERROR: "error"}

_TO_SPEC = {
    SCHEDULE: eng.SCHEDULE,
    DELIVER: eng.UPDATE_FROM_OUTPUT,
    ABORT: eng.ABORT,
    ADD_REQUEST: eng.ADD_REQUEST,
    RESET_PREFIX_CACHE: eng.RESET_PREFIX_CACHE,
    **{kind: eng.PAUSE_ACTIONS[mode] for kind, mode in PAUSE_KINDS.items()},
    RESUME: eng.RESUME,
    STREAM_UPDATE: eng.STREAM_UPDATE,
    STREAM_CLOSE: eng.STREAM_CLOSE,
}
_FROM_SPEC = {v: k for k, v in _TO_SPEC.items()}


def spec_config(w: Workload) -> SpecConfig:
    """The ``SpecConfig`` of a workload (``ConfigError`` if the spec cannot take it).

    ``SpecConfig`` validates at most 6 requests, a bound for exhaustive checking,
    not for the spec's actions (``reference/reference_harness.py`` lifts it the same way):
    a larger workload is validated with its first request, then given all of
    them (``workload_problem`` has checked each one).
    """
    requests = tuple((r.prompt_len, r.max_tokens) for r in w.requests)
    eos = tuple((position,) for position in stop_obs.spec_positions(w))
    if len(requests) <= 6:
        return _spec_config(w, requests, eos, w.structured_output, w.resumable)
    cfg = _spec_config(w, requests[:1], eos[:1], tuple(i for i in w.structured_output if i == 0),
                       tuple(i for i in w.resumable if i == 0))
    object.__setattr__(cfg, "requests", requests)
    object.__setattr__(cfg, "eos_positions", eos)
    object.__setattr__(cfg, "structured_output", w.structured_output)
    object.__setattr__(cfg, "resumable", w.resumable)
    object.__setattr__(cfg, "skip_reading_prefix_cache", w.skip_reading)
    for key in ("images", "encoder_cache_size", "encoder_compute_budget", "mamba_cache_mode"):  # workload_problem
        object.__setattr__(cfg, key, getattr(w, key))
    return cfg


def _spec_config(w: Workload, requests: tuple[tuple[int, int], ...],
                 eos: tuple[tuple[int], ...], structured: tuple[int, ...], resumable: tuple[int, ...] = ()) -> SpecConfig:
    whole = len(requests) == len(w.requests)  # else images are set after validation (spec_config)
    return SpecConfig(
        name="fuzz",
        requests=requests,
        batch_queue_depth=w.depth,
        loop=w.loop,
        token_budget=w.token_budget,
        max_num_seqs=w.max_num_seqs,
        block_size=w.block_size,
        num_blocks=w.num_blocks,
        enable_chunked_prefill=w.chunked_prefill,
        enable_prefix_caching=w.prefix_caching,
        defer_block_free=w.defer_block_free,
        stale_mode=w.stale_mode,
        eos_positions=eos,
        aborts=w.aborts,
        late_arrivals=True,
        forced_preemptions=w.reset_prefix_cache,
        pauses=w.pauses,
        num_speculative_tokens=w.num_speculative_tokens,
        num_lookahead_tokens=0,  # the vLLM target drafts with n-gram: no lookahead slots
        structured_output=structured,
        skip_reading_prefix_cache=w.skip_reading if whole else (),
        sliding_window=w.sliding_window,
        max_model_len=w.max_model_len,
        kv_connector=bool(w.kv_connector),
        kv_load_whole_prompt=w.kv_connector == "nixl",
        policy="priority" if w.policy == "priority" else "fcfs",
        priorities=w.priorities,
        long_prefill_token_threshold=w.long_prefill_token_threshold,
        long_prefill_adaptive=w.long_prefill_adaptive,
        kv_load_failure_policy="fail" if w.kv_load_failure_policy == "fail" else "recompute",
        remote_loads=w.remote_loads,
        remote_sends=w.remote_sends,
        kv_invalid_blocks=w.kv_invalid_blocks,
        kv_offloading=w.kv_connector == "offloading",
        kv_offload_prompt_only=w.kv_offload_prompt_only,
        resumable=resumable,
        stream_updates=w.stream_updates if resumable else (),
        images=w.images if whole else (),
        encoder_cache_size=w.encoder_cache_size if whole else 0,
        encoder_compute_budget=w.encoder_compute_budget if whole else 0,
        mamba_cache_mode=w.mamba_cache_mode,
        sync_scheduler=w.sync_scheduler,
    )


def default_prompt_of(w: Workload) -> PromptOf:
    """The prompt ids the scheduler targets give request ``req`` (``engine/vllm/vllm_config.py``)."""
    return lambda req: tuple(default_prompt(f"r{req}", w.requests[req].prompt_len))


def stream_prompt(req: int, index: int, num_tokens: int) -> tuple[int, ...]:
    """The prompt ids of update ``index`` (1-based) of session ``req``: never EOS, unrelated to
    any other prompt (``default_prompt`` of its own id)."""
    return tuple(default_prompt(f"r{req}.u{index}", num_tokens))


def default_token_of(w: Workload) -> TokenOf:
    """The token the harness's worker samples at output position ``k`` (``stop_tokens.oracle_token``)."""
    return lambda req, k: oracle_token(w, req, k)


class SpecTarget:
    """The spec, one ``engine.apply`` per event; the oracle of every comparison.

    ``target``: the engine compared against; for ``vllm`` and ``vllm-engine`` the spec takes the
    release settings in force (``engine/vllm/release_settings.py``, ``spec_extra``).
    ``prompt_of(req)`` and ``token_of(req, k)`` (output position ``k``, from 1)
    say which token ids the engine under test uses, so that the tokens the spec
    delivers and the payload it expects (``payload.py``) are comparable; by
    default those of the scheduler targets.
    """

    name = "spec"

    def __init__(self, w: Workload, prompt_of: PromptOf | None = None, token_of: TokenOf | None = None,
                 target: str = "") -> None:
        self.workload = w
        self.prompt_of = prompt_of if prompt_of is not None else default_prompt_of(w)
        self.token_of = token_of if token_of is not None else default_token_of(w)
        self._previous_step: frozenset[int] = frozenset()  # Scheduler.prev_step_scheduled_req_ids
        # the scheduler target's depth 3 is MRV2 + PP 2; the vllm-engine target maps the payload
        # for the runner it runs (engine_run.py) and turns this off
        self.mrv2_payload = w.depth == 3
        # KV cache events as the vllm target records them (kv_events_obs.py); the vllm-engine target does not
        self._kv_events_on = kv_events_on(w) and target != "vllm-engine"
        self._kv_events: tuple[tuple[str, int, int], ...] = ()
        self._reset = False  # the last event was a reset_prefix_cache
        self.cfg = spec_config(w)
        if target in ("vllm", "vllm-engine"):  # the release settings the spec takes (release_settings.py)
            from asyncspec.engine.vllm.release_settings import spec_extra

            self.cfg.extra.update(spec_extra(target))
        self.state: EngineState = initial_state(self.cfg, stop_obs.spec_positions(w))
        self._started = False  # r0 is in the spec's initial state; the harness adds it first
        self._events: frozenset[str] = frozenset()
        self._outputs: list[tuple[int, ...]] = [() for _ in w.requests]
        self._last: tuple[Any, Any, Any, Any] = ((), (), (), ())
        self._payload: tuple[Any, ...] = ()
        self._session_prompts: dict[int, tuple[int, ...]] = {}  # a session's prompt after an update
        self._processed = False  # the last event was an update_from_output
        self._new_step: Step | None = None  # the step the last event scheduled (its encoder inputs)
        # Model Runner V2's image payloads (encoder.payload_updates): followed where the images carry
        # data on MRV2, the engine target's mrv2 runner (engine_run.spec_oracle turns it on)
        self.encoder_payloads = False
        self._held: encoder.Payloads = {}
        self._payload_updates: encoder.PayloadUpdates = ()

    def _prompt(self, req: int) -> tuple[int, ...]:
        """``req``'s prompt ids now: a session's grows with each update (``_update_request_as_session``)."""
        return self._session_prompts.get(req) or self.prompt_of(req)

    def current_prompt(self, req: int) -> tuple[int, ...]:
        """``req``'s prompt ids as of its current turn (the ``vllm-engine`` oracle's tokens follow it)."""
        return self._prompt(req)

    # ---- the oracle's extras ---------------------------------------------------

    def enabled(self) -> list[Event]:
        if not self._started:
            return [Event(ADD_REQUEST, 0)]
        return [self._event(a) for a in eng.enabled_actions(self.cfg, self.state)]

    def _event(self, a: Action) -> Event:
        """The harness event of spec action ``a`` (acceptance named by request)."""
        if not a.accepted:
            return Event(_FROM_SPEC[a.name], a.req, (), a.kv)
        return Event(DELIVER, None, tuple(zip(self._verified_requests(), a.accepted)), a.kv)

    def _verified_requests(self) -> list[int]:
        """The requests of the oldest step whose drafts the acceptance vector covers."""
        s = self.state
        return [e.req for e in s.batch_queue[0].entries if takes_acceptance(s, e)]

    def verified_requests(self) -> list[int]:
        """``_verified_requests``, or none while no step is in flight."""
        return self._verified_requests() if self._started and self.state.batch_queue else []

    def last_events(self) -> frozenset[str]:
        return self._events

    # ---- events ----------------------------------------------------------------

    def add_request(self, req: int, prompt_len: int, max_tokens: int, eos_position: int) -> None:
        p = self.state.params[req]
        expected = (prompt_len, max_tokens, stop_obs.spec_position(self.workload, req, eos_position))
        if (p.num_prompt_tokens, p.max_tokens, p.eos_position) != expected:
            raise ValueError(f"r{req} differs from the workload the spec was built with")
        if req == 0 and not self._started:
            self._started = True
            self._finish_event(self.state, frozenset(), (), ())
            return
        self._apply(Action(eng.ADD_REQUEST, req))

    def schedule(self) -> None:
        self._apply(Action(eng.SCHEDULE))

    def deliver_oldest(self, accepted: tuple[tuple[int, int], ...] = (), kv: tuple[str, int] | None = None) -> None:
        counts = dict(accepted)
        if set(counts) - set(self._verified_requests()):
            raise ValueError(f"accept= names requests without verified drafts: {accepted}")
        vector = tuple(counts.get(r, 0) for r in self._verified_requests()) if accepted else ()
        self._apply(Action(eng.UPDATE_FROM_OUTPUT, None, vector, kv))

    def abort(self, req: int) -> None:
        self._apply(Action(eng.ABORT, req))

    def reset_prefix_cache(self) -> None:
        self._apply(Action(eng.RESET_PREFIX_CACHE))

    def pause(self, mode: str) -> None:
        self._apply(Action(eng.PAUSE_ACTIONS[mode]))

    def resume(self) -> None:
        self._apply(Action(eng.RESUME))

    def stream_input(self, req: int, close: bool) -> None:
        self._apply(Action(eng.STREAM_CLOSE if close else eng.STREAM_UPDATE, req))

    def _note_payload(self, before: EngineState, after: EngineState,
                      scheduled: tuple[tuple[int, int, int], ...]) -> None:
        """The payload a ``schedule()`` from ``before`` to ``after`` sends (``payload.py``)."""
        self._payload = expected_payload(before, after, scheduled, self._prompt,
                                         lambda req: self._outputs[req], self._previous_step)
        if self.mrv2_payload:  # Model Runner V2 + PP 2 (vllm target): MRV2's payload shape
            self._payload = as_mrv2(self._payload)
        self._previous_step = frozenset(req for req, _, _ in scheduled)

    def _apply(self, action: Action) -> None:
        before = self.state
        after, events = eng.apply(self.cfg, before, action)
        scheduled: tuple[tuple[int, int, int], ...] = ()
        delivered: tuple[tuple[int, tuple[int, ...]], ...] = ()
        self._payload = ()
        self._new_step = None
        self._payload_updates = ()
        self._reset = action.name == eng.RESET_PREFIX_CACHE
        if action.name == eng.SCHEDULE:
            # a step whose sampling is deferred (structured output) is not queued yet
            step = after.deferred_step if after.deferred_step is not None else after.batch_queue[-1]
            scheduled = tuple((e.req, e.num_tokens, e.sampled_position) for e in step.entries)
            self._note_payload(before, after, scheduled)
            self._new_step = step
            if self.encoder_payloads:
                entries: tuple[PayloadEntry, ...] = self._payload
                installed = frozenset(req for req, kind, _, _, _, _ in entries if kind != RUNNING)
                self._held, self._payload_updates = encoder.payload_updates(self.cfg, before, step, installed,
                                                                            self._held)
        elif action.name == eng.UPDATE_FROM_OUTPUT:
            delivered = self._record_delivery(before, after)
        elif action.name == eng.RESET_PREFIX_CACHE:
            self._previous_step = frozenset()  # reset_prefix_cache preempts and resumes them all
        self.state = after
        self._processed = action.name == eng.UPDATE_FROM_OUTPUT
        self._take_updates(before, after)
        # preemption and finish forget a request's payloads (Scheduler._preempt_request, _free_request)
        self._held = {r: ids for r, ids in self._held.items() if after.counters[r].status == rq.RUNNING}
        self._finish_event(before, events, scheduled, delivered)
        sent = {kept for _, ids in self._payload_updates for _, kept in ids}
        self._events |= {name for kept, name in ((True, ENCODER_INPUT_RESENT), (False, ENCODER_INPUT_DROPPED))
                         if kept in sent}

    def _record_delivery(self, before: EngineState, after: EngineState) -> tuple[tuple[int, tuple[int, ...]], ...]:
        """The tokens appended per request: output positions ``sampled_position``,
        ``sampled_position + 1``, ... (accepted drafts + 1, trimmed at a stop)."""
        out: list[tuple[int, tuple[int, ...]]] = []
        for entry in before.batch_queue[0].entries:
            req = entry.req
            count = after.counters[req].num_output_tokens - before.counters[req].num_output_tokens
            if self._updated(before, after, req):  # the turn stopped here and the next one began
                count = expected_output(before.params[req])[0] - before.counters[req].num_output_tokens
            if count > 0:
                toks = tuple(self.token_of(req, entry.sampled_position + j) for j in range(count))
                self._outputs[req] += toks
                out.append((req, toks))
        return tuple(sorted(out))

    def _updated(self, before: EngineState, after: EngineState, req: int) -> bool:
        """Whether session ``req`` took an update (not the end of its stream) in this event."""
        if not after.stream_applied or after.stream_applied[req] == before.stream_applied[req]:
            return False
        return after.stream_applied[req] <= len(self.cfg.stream_updates)

    def _take_updates(self, before: EngineState, after: EngineState) -> None:
        """A session that took an update: every token but the last output becomes prompt, the
        update's ids follow, the output restarts (``Scheduler._update_request_as_session``)."""
        for req in self.cfg.resumable:
            if self._updated(before, after, req):
                index = after.stream_applied[req]
                new = stream_prompt(req, index, self.cfg.stream_updates[index - 1][0])
                self._session_prompts[req] = self._prompt(req) + self._outputs[req][:-1] + new
                self._outputs[req] = ()

    def _turn_stops(self, before: EngineState, after: EngineState) -> tuple[tuple[int, str], ...]:
        """Sessions whose turn stopped in this output and went on (an update, or a pause): vLLM
        reports the turn's finish reason (read before ``_handle_stopped_request``)."""
        out = []
        for req in self.cfg.resumable:
            paused = (after.counters[req].status == rq.WAITING_FOR_STREAMING_REQ
                      and before.counters[req].status != rq.WAITING_FOR_STREAMING_REQ)
            if paused or self._updated(before, after, req):
                out.append((req, "stop" if expected_output(before.params[req])[1] == rq.FINISHED_STOPPED else "length"))
        return tuple(out)

    def _finish_event(self, before: EngineState, events: frozenset[str],
                      scheduled: tuple[tuple[int, int, int], ...],
                      delivered: tuple[tuple[int, tuple[int, ...]], ...]) -> None:
        after = self.state
        finished = tuple(
            (i, stop.finish_reason(stop_obs.stop_rule(self.workload, i), _FINISH_REASON[c.status]))
            for i, c in enumerate(after.counters)
            if c.status in _FINISH_REASON and before.counters[i].status != c.status
        )
        if self.cfg.resumable and self._processed:
            finished = tuple(sorted(finished + self._turn_stops(before, after)))
        preempted = tuple(
            i for i, c in enumerate(after.counters)
            if c.status == rq.PREEMPTED and before.counters[i].status == rq.RUNNING
        )
        self._events = events
        self._last = (scheduled, delivered, finished, preempted)
        if self._kv_events_on:
            self._kv_events = kv_events_obs.spec_view(before, after, events, self._reset)

    # ---- observation -----------------------------------------------------------

    def observe(self) -> Observation:
        s = self.state
        scheduled, delivered, finished, preempted = self._last
        return Observation(
            requests=tuple(
                (i, self._request_obs(i)) for i, c in enumerate(s.counters) if c.status != rq.NOT_ARRIVED
            ),
            waiting=s.waiting,
            kv_holding=s.kv_holding,
            running=s.running,
            scheduled=scheduled,
            delivered=delivered,
            finished=finished,
            preempted=preempted,
            num_in_flight_steps=len(s.batch_queue),
            has_requests=has_requests(s),
            free_blocks=s.free_blocks,
            sched_step_seq=s.sched_step_seq,
            processed_step_seq=s.processed_step_seq,
            deferred_frees=tuple(
                (d.fence, tuple(sorted(d.evict_first + d.evict_last))) for d in s.deferred_frees
            ),
            cached_blocks=tuple(
                (b, h.req, h.block_index) for b, h in enumerate(s.block_hashes) if h is not None
            ),
            sampling_deferred=s.deferred_step is not None,
            payload=self._payload,
            num_waiting_for_streaming_input=num_waiting_for_streaming_input(s),
            store_jobs=tuple(sorted((j.req, j.blocks, j.flushed) for j in s.store_jobs)),
            encoder=encoder_obs.spec_view(self.cfg, s, self._new_step, self._payload_updates, self._held)
            if self.cfg.images else (),
            kv_events=self._kv_events,
        )

    def _request_obs(self, i: int) -> RequestObs:
        p, c = self.state.params[i], self.state.counters[i]
        rule = stop_obs.stop_rule(self.workload, i)
        last = self._outputs[i][-1] if self._outputs[i] else None
        return RequestObs(
            status=stop.finish_status(rule, _SPEC_STATUS[c.status]),
            num_tokens=rq.num_tokens(p, c),
            num_output_tokens=c.num_output_tokens,
            num_computed_tokens=c.num_computed_tokens,
            num_output_placeholders=c.num_output_placeholders,
            num_in_flight_tokens=c.num_in_flight_tokens,
            num_stale_output_tokens=c.num_stale_output_tokens,
            drop_stale_output=bool(c.drop_stale_output),
            is_prefill_chunk=bool(c.is_prefill_chunk),
            last_sched_seq=c.last_sched_seq,
            block_table=self.state.block_tables[i],
            output_tokens=self._outputs[i],
            num_spec_token_ids=c.num_spec_token_ids,
            grammar_gap=bool(c.grammar_gap),
            swa_block_table=second_group(self.state, i),
            stop_reason=stop.stop_reason(rule, _SPEC_STATUS[c.status], last),
        )
