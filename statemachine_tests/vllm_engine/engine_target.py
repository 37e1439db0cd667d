"""vLLM's production engine as a fuzz target (``--target vllm-engine``): EngineCore over the V1 model runner.

``EngineTarget`` owns one ``EngineCoreDriver`` (``engine/vllm/engine_core_driver.py``)
per engine configuration and runs cases one after another on it (start-up is
paid once per campaign): each case gets a fresh scheduler and a poisoned KV
store, and its requests get ids unique to the case (``r3.17``: request 3 of
case 17), as request ids are unique in vLLM.

Every scheduler call EngineCore makes inside a step is observed right after
it (the phases of ``StepRecord``) with the same normalized view as the
scheduler target (``vllm_observer.py``) plus the payload the worker was sent
(``payload.py``); the tokens each request gets are the oracle model's, produced
by vLLM's own runner feeding its own inputs.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass, replace
from typing import Any

from asyncspec.checker import interrupt
from asyncspec.engine.vllm import oracle_model as om
from asyncspec.engine.vllm.engine_config import EngineDriverConfig
from asyncspec.engine.vllm.engine_core_driver import (
    ABORTS_PHASE,
    OUTPUT_PHASE,
    SCHEDULE_PHASE,
    EncoderBudget,
    EngineCoreDriver,
    Phase,
)

from asyncspec.statemachine_tests.vllm_engine.engine_case import EngineCase
from asyncspec.statemachine_tests.vllm_engine.logprobs_check import LogprobsCheck
from asyncspec.statemachine_tests.core.harness import Observation, with_error
from asyncspec.statemachine_tests.scheduler import encoder_obs
from asyncspec.statemachine_tests.scheduler.payload import payload_of
from asyncspec.statemachine_tests.scheduler.spec_target import stream_prompt
from asyncspec.statemachine_tests.scheduler.vllm_observer import (
    SchedulerObserver, delivered_and_finished, req_index,
)


@dataclass(frozen=True)
class PhaseObs:
    """One scheduler call of an engine step and how the engine looked right after it."""

    kind: str  # SCHEDULE_PHASE, ABORTS_PHASE or OUTPUT_PHASE
    observation: Observation
    aborted: tuple[int, ...] = ()  # ABORTS_PHASE: the requests whose aborts were drained
    accepted: tuple[tuple[int, int], ...] = ()  # OUTPUT_PHASE: (req, drafts the worker accepted)
    drafts: tuple[tuple[int, int], ...] = ()  # SCHEDULE_PHASE: (req, draft positions scheduled)
    kv: tuple[str, int] | None = None  # OUTPUT_PHASE: the worker's KV load report (kind, req), Phase.kv_report


class EngineTarget:
    """One engine configuration, reused across cases."""

    name = "vllm-engine"

    def __init__(self, config: EngineDriverConfig) -> None:
        self.config = config
        interrupt.pause_point("engine-build")  # a test signals as the engine is built (checker/interrupt.py)
        self.driver = EngineCoreDriver(config, on_phase=self._on_phase)
        self.case_no = 0
        self.case: EngineCase | None = None
        self.observer: SchedulerObserver | None = None
        self._deferred_in_call = False  # this engine call deferred the sampling of the step it scheduled

    # ---- cases -----------------------------------------------------------------

    def start(self, case: EngineCase) -> None:
        """Begin a case: fresh scheduler, poisoned KV store, new request ids."""
        if case.engine != self.config:
            raise ValueError("the case is for another engine configuration")
        self.case_no += 1
        self.case = case
        settings = case.encoder_settings()
        self.driver.new_scheduler(case.decode_stagger, case.defer_block_free, case.stale_mode == "drop",
                                  EncoderBudget(*settings) if settings is not None else None)
        self.observer = SchedulerObserver(self.driver.scheduler, self.config.enable_prefix_caching,
                                          self._grammar_gap)
        self.driver.on_update_start = self._before_update
        self._sampled_positions: dict[int, list[int]] = {}  # request -> output positions it sampled
        self.payload_drops = 0  # encoder_input_updates entries of None (MRV2: worker_coverage.payload_drops)
        # per scheduled step: request -> (its index above, its preemptions when scheduled)
        self._in_flight: deque[dict[int, tuple[int, int]]] = deque()
        self._stream_sent: dict[int, int] = {}  # session -> inputs sent after its first
        self.logprobs = LogprobsCheck({i: r.prompt for i, r in enumerate(case.requests) if r.logprobs})
        self._prefill_steps: dict[int, int] = {}  # request -> steps that computed its prompt so far

    def req_id(self, req: int) -> str:
        return f"r{req}.{self.case_no}"

    def _obs(self) -> SchedulerObserver:
        assert self.observer is not None, "start() a case first"
        return self.observer

    # ---- events between steps --------------------------------------------------------

    def add_request(self, req: int) -> Observation:
        assert self.case is not None
        r = self.case.requests[req]
        self._obs().begin_event()
        return self._guarded(lambda: self._add(req, r))

    def _add(self, req: int, r: Any) -> None:
        assert self.case is not None
        self.driver.add_request(self.req_id(req), r.prompt, r.max_tokens, r.ignore_eos, r.stop_token_ids,
                                r.structured, om.FREQUENCY_PENALTY if r.penalized else 0.0, r.period,
                                resumable=req in self.case.resumable,
                                kv_transfer_params=self.case.kv_transfer_params(req), images=r.images,
                                logprobs=r.logprobs)
        self._obs().track(req, self.req_id(req))

    def stream_input(self, req: int, close: bool) -> Observation:
        """Session ``req``'s next input, between steps: a resumable request with its id carrying the
        next of the case's ``stream_updates`` (``spec_target.stream_prompt``'s ids), or for ``close``
        the final non-resumable request ``AsyncLLM`` sends when the input stream ends (prompt ``[0]``)."""
        self._obs().begin_event()
        return self._guarded(lambda: self._stream(req, close))

    def _stream(self, req: int, close: bool) -> None:
        assert self.case is not None
        index = self._stream_sent.get(req, 0) + 1
        self._stream_sent[req] = index
        if close:
            self.driver.add_request(self.req_id(req), [0], 1, ignore_eos=True)
            return
        new_tokens, max_tokens = self.case.stream_updates[index - 1]
        self.driver.add_request(self.req_id(req), stream_prompt(req, index, new_tokens), max_tokens,
                                ignore_eos=True, resumable=True)

    def abort(self, req: int) -> Observation:
        self._obs().begin_event()
        return self._guarded(lambda: self.driver.abort([self.req_id(req)]))

    def abort_in_step(self, req: int) -> None:
        self.driver.abort_in_step([self.req_id(req)])

    def reset_prefix_cache(self) -> Observation:
        self._obs().begin_event()
        return self._guarded(self.driver.reset_prefix_cache)

    def pause(self, mode: str) -> Observation:
        """``pause_scheduler(mode, clear_cache)`` between steps, as the case says."""
        assert self.case is not None
        clear_cache = self.case.clear_cache
        self._obs().begin_event()
        return self._guarded(lambda: self.driver.pause(mode, clear_cache))

    def resume(self) -> Observation:
        self._obs().begin_event()
        return self._guarded(self.driver.resume)

    def _guarded(self, action: Any) -> Observation:
        try:
            action()
        except Exception as exc:  # noqa: BLE001 - an engine crash is a result to compare
            return with_error(self.observe_idle(), f"{type(exc).__name__}: {exc}")
        return self.observe_idle()

    def observe_idle(self) -> Observation:
        """The engine between steps."""
        return self._with_encoder(self._obs().observe((), (), (), self.driver.in_flight()))

    def _with_encoder(self, obs: Observation, scheduler_output: Any = None) -> Observation:
        """``obs`` with each logprobs request's gap (``logprobs_check.py``) and, in a case with images, vLLM's
        encoder cache (``encoder_obs.vllm_view``; ``scheduler_output``: the ``SchedulerOutput`` of the phase
        observed, if a ``schedule()``)."""
        gaps = self.logprobs.gaps if self.case is not None else {}
        if gaps:
            obs = replace(obs, requests=tuple((i, replace(r, logprobs_gap=gaps.get(i, ""))) for i, r in obs.requests))
        if self.case is None or not self.case.images:
            return obs
        return replace(obs, encoder=encoder_obs.vllm_view(self.driver.scheduler, scheduler_output))

    # ---- steps -------------------------------------------------------------------

    def step(self) -> tuple[list[PhaseObs], str | None]:
        """One engine-loop call: its phases, and the error it raised (if any)."""
        self._obs().begin_event()
        self._deferred_in_call = False
        try:
            record = self.driver.step()
        except Exception as exc:  # noqa: BLE001 - an engine crash is a result to compare
            phases = [p.snapshot for p in self.driver.take_phases()]
            return phases, f"{type(exc).__name__}: {exc}"
        phases = [p.snapshot for p in record.phases]
        if phases and phases[-1].kind == OUTPUT_PHASE:
            phases[-1] = self._at_call_end(phases[-1])
        return phases, None

    def _at_call_end(self, last: PhaseObs) -> PhaseObs:
        """The output phase, seen when the call returns: after ``step_with_batch_queue`` has
        sampled and queued a deferred step (which the spec's ``deliver`` includes)."""
        o = last.observation
        fresh = self._with_encoder(self._obs().observe(o.scheduled, o.delivered, o.finished, self.driver.in_flight()))
        return PhaseObs(last.kind, replace(fresh, preempted=o.preempted), accepted=last.accepted, kv=last.kv)

    def _on_phase(self, phase: Phase) -> PhaseObs:
        """Right after a scheduler call, inside the engine step."""
        obs = self._obs()
        in_queue = self.driver.in_flight()
        if phase.kind == SCHEDULE_PHASE:
            so = phase.scheduler_output
            self.payload_drops += sum(d is None for u in getattr(so, "encoder_input_updates", {}).values() for d in u.values())
            scheduled = tuple(self._scheduled_entry(so, rid) for rid in so.num_scheduled_tokens)
            step: dict[int, tuple[int, int]] = {}
            for req, _, position in scheduled:
                if req not in self.logprobs.outputs_seen:
                    self._prefill_steps[req] = self._prefill_steps.get(req, 0) + 1
                if position:
                    positions = self._sampled_positions.setdefault(req, [])
                    positions.append(position)
                    step[req] = (len(positions) - 1, self._preemptions(req))
            self._in_flight.append(step)
            deferred = bool(so.pending_structured_output_tokens) and so.total_num_scheduled_tokens > 0
            self._deferred_in_call = deferred
            drafts = tuple(sorted((req_index(rid), len(ids)) for rid, ids in so.scheduled_spec_decode_tokens.items()))
            result = PhaseObs(phase.kind, self._with_encoder(obs.observe(
                scheduled, (), (), in_queue + (0 if deferred else 1), deferred, payload_of(so)), so), drafts=drafts)
        elif phase.kind == ABORTS_PHASE:
            result = PhaseObs(phase.kind, self._with_encoder(obs.observe((), (), (), in_queue + 1,
                                                                         self._deferred_in_call)),
                              tuple(req_index(r) for r in phase.aborted_before))
        else:
            assert phase.kind == OUTPUT_PHASE
            obs.after_delivery()
            for rid, output in phase.outputs.items():
                if rid.endswith(f".{self.case_no}"):
                    req = req_index(rid)
                    self.logprobs.on_output(req, output, self._prefill_steps.get(req, 0), self._preemptions(req) > 0)
            delivered, finished = delivered_and_finished(phase.outputs)
            accepted = tuple(sorted((req_index(rid), n) for rid, n in phase.accepted.items()))
            self._shift_after_rejection(phase.scheduler_output, phase.accepted)
            kv = None if phase.kv_report is None else (phase.kv_report[0], req_index(phase.kv_report[1]))
            result = PhaseObs(phase.kind, self._with_encoder(obs.observe((), delivered, finished, in_queue)),
                              accepted=accepted, kv=kv)
        obs.begin_event()
        return result

    def _before_update(self, returned: dict[str, int]) -> None:
        """What the worker returns to each request of this case, for the release settings."""
        mine = {req_index(rid): n for rid, n in returned.items() if rid.endswith(f".{self.case_no}")}
        self._obs().before_delivery(mine)

    def _scheduled_entry(self, so: Any, req_id: str) -> tuple[int, int, int]:
        """(req, tokens, sampled output position; 0 for a prefill chunk), from vLLM's counters
        (``num_computed_tokens`` already counts the step's draft positions)."""
        r = self.driver.scheduler.requests[req_id]
        drafts = len(so.scheduled_spec_decode_tokens.get(req_id, ()))
        position = 0 if r.is_prefill_chunk else int(r.num_computed_tokens) - drafts - int(r.num_prompt_tokens) + 1
        return req_index(req_id), int(so.num_scheduled_tokens[req_id]), position

    def _preemptions(self, req: int) -> int:
        r = self.driver.scheduler.requests.get(self.req_id(req))
        return -1 if r is None else int(r.num_preemptions)

    def _shift_after_rejection(self, so: Any, accepted: dict[str, int]) -> None:
        """The processed step's rejected drafts: the request's later steps in flight sample that
        many positions earlier than scheduled (the runner's correction, as the spec's
        ``shift_in_flight``) — unless the request was preempted since (a stale output: the
        scheduler does not roll it back and the runner re-adds the request from its history)."""
        step = self._in_flight.popleft() if self._in_flight else {}
        for rid, n in accepted.items():
            req, rejected = req_index(rid), len(so.scheduled_spec_decode_tokens.get(rid, ())) - n
            positions = self._sampled_positions.get(req, [])
            index, preemptions = step.get(req, (-1, -1))
            if rejected > 0 and index >= 0 and preemptions == self._preemptions(req):
                positions[index + 1:] = [k - rejected for k in positions[index + 1:]]

    def _grammar_gap(self, req: int, r: Any) -> bool:
        """A bitmask row filled before the grammar had every earlier token, or a grammar that
        accepted other tokens than the request's output (``RecordingGrammar``)."""
        so_request = r.structured_output_request
        grammar = so_request.grammar if so_request is not None else None
        if grammar is None or not hasattr(grammar, "fills"):
            return False
        expected = [k - 1 for k in self._sampled_positions.get(req, [])]
        fills: list[int] = list(grammar.fills)
        accepted: list[int] = list(grammar.accepted)
        return fills != expected[:len(fills)] or accepted != [int(t) for t in r.output_token_ids]

    def fed_since(self, start: int) -> list[list[Any]]:
        """The runner's feeds (per forward pass) from forward ``start`` on."""
        return self.driver.fed_rows(start)

    def encoder_since(self, start: int) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
        """Per forward pass from ``start`` on, with images: (items encoded, items fed), ``oracle_encoder.py``."""
        model = self.driver.worker.model
        return list(zip(model.encoded[start:], model.read[start:]))
