"""One ``vllm-engine`` example: engine events on vLLM's EngineCore, the spec following every scheduler call.

The engine decides its own loop.  For each engine event the spec takes the
matching actions and both sides are compared after each one:

* ``step``: for every scheduler call vLLM made inside the call, in order —
  ``schedule`` (the spec's ``schedule`` must be what its exact
  ``step_with_batch_queue`` loop does next), the aborts drained from
  ``aborts_queue`` (the spec's ``abort``), ``update_from_output`` (the spec's
  ``deliver``) — and at the end the spec must be at a call boundary too;
* ``add_request``, ``abort``, ``reset_prefix_cache``: the same spec action;
* ``abort_in_step``: nothing yet; the engine drains it inside a later step.

A loop decision the spec does not make, or a call that ends where the spec's
goes on, is a divergence like any other field.  The rows are spec events, so
the report and the replay file are the scheduler targets' with the engine's
events and a *worker* column (what the runner fed each request) added.
"""
from __future__ import annotations

import functools
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from asyncspec.engine.vllm import oracle_model as om
from asyncspec.engine.vllm.engine_core_driver import ABORTS_PHASE, OUTPUT_PHASE, SCHEDULE_PHASE
from asyncspec.spec import engine as eng
from asyncspec.spec.connector import INVALID, RECV
from asyncspec.spec import events as ev

from asyncspec.statemachine_tests.vllm_engine import engine_case as ec
from asyncspec.statemachine_tests.vllm_engine.combo_coverage import ComboCoverage
from asyncspec.statemachine_tests.vllm_engine.engine_profile import MAX_DRAIN
from asyncspec.statemachine_tests.scheduler.draft_coverage import DraftCoverage
from asyncspec.statemachine_tests.vllm_engine.engine_target import EngineTarget, PhaseObs
from asyncspec.statemachine_tests.core.harness import (
    ABORT, ADD_REQUEST, DELIVER, RESET_PREFIX_CACHE, RESUME, SCHEDULE, Difference, Event, Observation, Row,
    RunResult, compare, step_and_observe,
)
from asyncspec.statemachine_tests.scheduler.payload import as_mrv2
from asyncspec.statemachine_tests.scheduler.spec_target import SpecTarget
from asyncspec.statemachine_tests.vllm_engine.mamba_coverage import MambaCoverage
from asyncspec.statemachine_tests.vllm_engine.worker_coverage import WorkerCoverage

_PHASE_EVENT = {SCHEDULE_PHASE: SCHEDULE, OUTPUT_PHASE: DELIVER}
RESET_IN_PAUSE_FAILED = "RuntimeError: Failed to reset the KV connector cache."
"""What ``EngineCore._reset_caches`` raises from ``pause_scheduler(clear_cache=True)`` when
``reset_prefix_cache`` fails (blocks still held or parked: docs/findings_vllm.md, V1)."""


@dataclass
class EngineRunResult(RunResult):
    """A ``RunResult`` whose events came from engine events; ``fed[row]``: the worker column."""

    engine_events: list[ec.EngineEvent] = field(default_factory=list)
    fed: dict[int, tuple[str, ...]] = field(default_factory=dict)
    case: ec.EngineCase | None = None
    feeds: list[tuple[int, tuple[Any, ...]]] = field(default_factory=list)  # (row, FedRows) per forward


def spec_oracle(case: ec.EngineCase) -> SpecTarget:
    """The spec for ``case``: its prompts and the oracle model's streams as token ids; a
    streaming-input session's turn samples what the oracle model continues its prompt *now*
    with (the kept output and the update's ids appended: ``SpecTarget.current_prompt``)."""
    oracle = SpecTarget(case.workload(), prompt_of=lambda req: case.requests[req].prompt,
                        token_of=lambda req, k: case.requests[req].stream[k - 1], target="vllm-engine")
    if case.resumable:
        plain = oracle.token_of
        oracle.token_of = lambda req, k: (_turn_stream(oracle.current_prompt(req), k)[k - 1]
                                          if req in case.resumable else plain(req, k))
    oracle.cfg = replace(oracle.cfg, decode_stagger=case.decode_stagger)
    oracle.mrv2_payload = False  # the payload is mapped for MRV2 in EngineRun._row, V1's kept otherwise
    # images carry data here (engine_core_driver._features): MRV2 is told which it may drop and which to take again
    oracle.encoder_payloads = case.engine.runner == "mrv2" and bool(case.images)
    return oracle


@functools.lru_cache(maxsize=4096)
def _turn_stream(prompt: tuple[int, ...], num_tokens: int) -> tuple[int, ...]:
    """The oracle model's first ``num_tokens`` tokens after ``prompt`` (a session's turn)."""
    return tuple(om.expected_stream(prompt, num_tokens))


class EngineRun:
    """Drives one case on an ``EngineTarget`` and the spec side by side."""

    def __init__(self, case: ec.EngineCase, target: EngineTarget, coverage: dict[str, int]) -> None:
        self.case = case
        self.target = target
        self.oracle = spec_oracle(case)
        self.result = EngineRunResult(case.workload(), [], coverage, case=case)
        self.worker = WorkerCoverage(coverage)
        self.drafts = DraftCoverage(coverage)
        self.combos = ComboCoverage(coverage, self.result.workload.structured_output)
        self.mamba = MambaCoverage(coverage) if case.engine.mamba_cache_mode else None
        self._forwards = 0
        target.start(case)
        target.logprobs.coverage = coverage  # logprobs_check.LOGPROBS_COVERAGE

    @property
    def diverged(self) -> bool:  # noqa: D102
        return self.result.diverged

    def apply(self, event: ec.EngineEvent) -> bool:
        """Apply one engine event; False once the two sides differ."""
        self.result.engine_events.append(event)
        if event.kind == ec.STEP:
            return self._step()
        if event.kind == ec.ABORT_IN_STEP:
            assert event.req is not None
            self.target.abort_in_step(event.req)
            return True
        if event.kind in ec.PAUSE_MODES and self.case.clear_cache:
            return self._pause_row(event)
        spec_event, engine_side = self._between_steps(event)
        return self._row(spec_event, lambda: engine_side)

    def _between_steps(self, event: ec.EngineEvent) -> tuple[Event, Any]:
        req = event.req
        if event.kind == ec.ADD_REQUEST and req is not None:
            return Event(ADD_REQUEST, req), self.target.add_request(req)
        if event.kind == ec.ABORT and req is not None:
            return Event(ABORT, req), self.target.abort(req)
        if event.kind == ec.RESET_PREFIX_CACHE:
            return Event(RESET_PREFIX_CACHE), self.target.reset_prefix_cache()
        if event.kind in ec.PAUSE_MODES:
            return Event(event.kind), self.target.pause(ec.PAUSE_MODES[event.kind])
        if event.kind == ec.RESUME:
            return Event(RESUME), self.target.resume()
        if event.kind in (ec.STREAM_UPDATE, ec.STREAM_CLOSE) and req is not None:
            return Event(event.kind, req), self.target.stream_input(req, event.kind == ec.STREAM_CLOSE)
        raise ValueError(f"cannot apply engine event {event}")

    def _pause_row(self, event: ec.EngineEvent) -> bool:
        """``pause_scheduler(mode, clear_cache=True)``: the spec pauses, then resets the prefix
        cache (``EngineCore._finish_pause`` runs ``reset_prefix_cache(reset_running_requests=True)``);
        one row, compared after both.  Where the reset fails (blocks still parked) vLLM raises
        ``RuntimeError`` from the call, after the pause took effect: the spec's row carries it."""
        spec_event, engine_side = self._between_steps(event)
        return self._row(spec_event, lambda: engine_side, then=Event(RESET_PREFIX_CACHE))

    # ---- a step --------------------------------------------------------------------

    def _step(self) -> bool:
        phases, error = self.target.step()
        fed = self.target.fed_since(self._forwards)
        if self.case.images:
            self.worker.encoder(self.target.encoder_since(self._forwards))
            if self.case.engine.runner == "mrv2":
                self.worker.payload_drops(self.target.payload_drops)
                self.target.payload_drops = 0
        self._forwards += len(fed)
        forwards = iter(fed)
        for i, phase in enumerate(phases):
            crashed = error if i == len(phases) - 1 else None
            if not self._phase(phase, crashed, forwards):
                return False
        if error is not None and not phases:
            return self._row(Event(SCHEDULE), lambda: self._crash(error))
        return self._check_call_boundary()

    def _phase(self, phase: PhaseObs, error: str | None, forwards: Any) -> bool:
        engine_obs = phase.observation if error is None else replace(phase.observation, error=error)
        if phase.kind == ABORTS_PHASE:
            return all(self._row(Event(ABORT, req), lambda: engine_obs, skip_if_disabled=True)
                       for req in phase.aborted)
        event = self._deliver_event(phase) if phase.kind == OUTPUT_PHASE else Event(_PHASE_EVENT[phase.kind])
        fed = next(forwards, None) if event.kind == SCHEDULE and engine_obs.scheduled else None
        ok = self._row(event, lambda: engine_obs, fed=fed)
        if event.kind == SCHEDULE:
            self.worker.schedule(engine_obs, fed)
            self.drafts.schedule(phase.drafts, engine_obs.scheduled, fed)
            self.combos.schedule((s[0] for s in engine_obs.scheduled), phase.drafts)
            if self.mamba is not None:
                self.mamba.schedule(engine_obs, fed)
        else:
            self.drafts.deliver(phase.accepted)
            self.combos.deliver()
            if self.mamba is not None:
                self.mamba.deliver()
        return ok

    def _deliver_event(self, phase: PhaseObs) -> Event:
        """``deliver``, with speculative decoding the drafts the worker accepted for each request
        whose drafts the spec lets it verify (``Scheduler.update_from_output`` reads the same counts),
        and the worker's KV load report the step's output carries (``kv_connector_output``), which
        the spec's report choice then takes."""
        verified = self.oracle.verified_requests()
        kv = self._kv_choice(phase.kv)
        if not verified:
            return Event(DELIVER, None, (), kv)
        accepted = dict(phase.accepted)
        return Event(DELIVER, None, tuple((req, accepted.get(req, 0)) for req in verified), kv)

    def _kv_choice(self, kv: tuple[str, int] | None) -> tuple[str, int] | None:
        """The spec's report for the worker's: the same, except an ``invalid@j`` report of a request
        that finished while its load was pending (the toy worker learns of it a step late), which
        vLLM does not scan (``_handle_invalid_blocks`` skips finished requests): a plain ``recv``."""
        if kv is None or not kv[0].startswith(INVALID + "@"):
            return kv
        enabled = self.oracle.enabled()
        if any(e.kind == DELIVER and e.kv == kv for e in enabled):
            return kv
        recv = (RECV, kv[1])
        return recv if any(e.kind == DELIVER and e.kv == recv for e in enabled) else kv

    def _crash(self, error: str) -> Observation:
        return replace(self.target.observe_idle(), error=error)

    def check_finished(self, leftover: str | None) -> bool:
        """After the case's events and the drain: an engine that still holds work is a liveness
        failure of the engine (a request that never finishes), a divergence like any other."""
        if leftover is None or not self.result.rows:
            return True
        self.result.rows[-1].differences.append(Difference(
            "engine_idle", f"the case ends within {MAX_DRAIN} engine steps after its events", leftover))
        return False

    def _check_call_boundary(self) -> bool:
        """The engine call returned: the spec's call must have ended too."""
        if eng.at_call_boundary(self.oracle.cfg, self.oracle.state):
            return True
        last = self.result.rows[-1]
        last.differences.append(Difference("call_boundary", "the spec's loop goes on in this call",
                                           "EngineCore returned to its caller"))
        return False

    # ---- one compared row --------------------------------------------------------------

    def _row(self, event: Event, engine_side: Any, fed: Any = None, skip_if_disabled: bool = False,
             then: Event | None = None) -> bool:
        """Compare ``engine_side()`` with the spec after ``event`` (and ``then``, the second half
        of the same engine call, where given)."""
        enabled = self.oracle.enabled()
        if event not in enabled:
            if skip_if_disabled:
                return True  # vLLM ignores an abort of a finished request, and so does the spec
            actual = engine_side()
            expected = self.oracle.observe()
            diffs = [Difference("loop", _loop_choice(enabled), str(event))]
            self.result.rows.append(Row(len(self.result.rows) + 1, event, expected, actual, frozenset(), diffs))
            return False
        expected = step_and_observe(self.oracle, self.result.workload, event)
        events = self.oracle.last_events()
        if then is not None:
            expected = step_and_observe(self.oracle, self.result.workload, then)
            events |= self.oracle.last_events()
            if ev.RESET_PREFIX_CACHE_FAILED in events:
                expected = replace(expected, error=RESET_IN_PAUSE_FAILED)
        if self.case.engine.runner == "mrv2":
            expected = replace(expected, payload=as_mrv2(expected.payload))
        self.combos.note(event.kind, events)
        for name in events:
            self.result.coverage[name] = self.result.coverage.get(name, 0) + 1
        actual = engine_side()
        self.worker.note(actual)
        if self.mamba is not None:
            self.mamba.note(event.kind, actual)
        row = Row(len(self.result.rows) + 1, event, expected, actual, events, compare(expected, actual))
        self.result.rows.append(row)
        if fed is not None:
            self.result.feeds.append((row.index, tuple(fed)))
            self.result.fed[row.index] = tuple(f"{f.req_id.split('.')[0]}@{f.start_position}:"
                                               f"{','.join(map(str, f.token_ids))}" for f in fed)
        return not row.differences


def _loop_choice(enabled: Iterable[Event]) -> str:
    loop = [str(e) for e in enabled if e.kind in (SCHEDULE, DELIVER)]
    return "the spec's loop would " + (" or ".join(loop) if loop else "do nothing")
