"""The event language of differential fuzzing, the ``Target`` protocol, and the comparison.

A *workload* fixes the engine settings and the requests (prompt length,
max_tokens, the output position whose sampled token is EOS).  An *event* is
one thing that happens to the engine:

=====================  ====================================================
``add_request rN``     the client submits request N (requests arrive in id order)
``schedule``           one ``schedule()`` call; the step joins the batch queue
``deliver``            the oldest in-flight step's output reaches
                       ``update_from_output`` with the tokens the model samples
``abort rN``           the client aborts request N
``reset_prefix_cache`` ``reset_prefix_cache(reset_running_requests=True)``
``pause_abort``        ``EngineCore.pause_scheduler(mode="abort")`` (also
                       ``pause_wait``, ``pause_keep``: the other modes)
``resume``             ``EngineCore.resume_scheduler()``
``stream_update rN``   the client's next input chunk of streaming session N
``stream_close rN``    the end of session N's input stream (``spec/streaming.py``)
=====================  ====================================================

The token a step samples for (request, output position k) is fixed:
``sampled_token``; it is EOS exactly at the workload's EOS position.  Each
target computes *which* position a step samples from its own counters (the
spec from ``num_computed_tokens`` after the step), so a target that
schedules a different position delivers a different token.

After every event each target returns an ``Observation``: a normalized,
target-neutral view (spec block ids, i.e. vLLM's ids minus its null block).
``compare`` lists the fields that differ; the first event with a difference
stops a run.  Nothing here imports vLLM.
"""
from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any, NamedTuple, Protocol, runtime_checkable

from asyncspec.statemachine_tests.core.workload import (
    MAX_REQUESTS as MAX_REQUESTS, LoopMode as LoopMode, RequestSpec as RequestSpec,
    StaleMode as StaleMode, Workload as Workload, draft_margin as draft_margin,
    workload_problem as workload_problem,
)

EOS_TOKEN = 2
"""The tiny model's EOS id (``engine/vllm/vllm_config.py``); ids 0..2 never occur otherwise."""


ADD_REQUEST = "add_request"
SCHEDULE = "schedule"
DELIVER = "deliver"
ABORT = "abort"
RESET_PREFIX_CACHE = "reset_prefix_cache"
PAUSE_ABORT, PAUSE_WAIT, PAUSE_KEEP, RESUME = "pause_abort", "pause_wait", "pause_keep", "resume"
PAUSE_KINDS = {PAUSE_ABORT: "abort", PAUSE_WAIT: "wait", PAUSE_KEEP: "keep"}
"""The pause events and the ``PauseMode`` each passes to ``pause_scheduler``."""
STREAM_UPDATE = "stream_update"
STREAM_CLOSE = "stream_close"
EVENT_KINDS = (ADD_REQUEST, SCHEDULE, DELIVER, ABORT, RESET_PREFIX_CACHE, *PAUSE_KINDS, RESUME, STREAM_UPDATE,
               STREAM_CLOSE)
_PER_REQUEST = (ADD_REQUEST, ABORT, STREAM_UPDATE, STREAM_CLOSE)
STREAM_KINDS = (STREAM_UPDATE, STREAM_CLOSE)


def sampled_token(req: int, position: int, eos_position: int) -> int:
    """The token the model samples for output ``position`` (1-based) of request ``req``.

    >>> sampled_token(0, 3, 3), sampled_token(0, 3, 0) == sampled_token(0, 3, 0)
    (2, True)
    """
    if eos_position > 0 and position == eos_position:
        return EOS_TOKEN
    return 3 + (req * 7919 + position * 104729) % 997


# --------------------------------------------------------------------------- events


class Event(NamedTuple):
    """One event; ``req`` only for ``add_request`` and ``abort``.

    ``accepted`` (speculative decoding, ``deliver`` only): for each request of
    the oldest step whose drafts the worker verified, how many it accepted, as
    ``(request, count)`` pairs in step order; written ``deliver accept=r0:1,r2:0``.
    The worker returns ``count + 1`` tokens for that request.
    """

    kind: str
    req: int | None = None
    accepted: tuple[tuple[int, int], ...] = ()
    kv: tuple[str, int] | None = None  # deliver: the worker's KV connector report, ("recv"|"fail"|"sent"|"invalid@j"|"stored", req)

    def __str__(self) -> str:
        kv = f" {self.kv[0]}=r{self.kv[1]}" if self.kv is not None else ""
        if self.accepted:
            return f"{self.kind} accept=" + ",".join(f"r{r}:{a}" for r, a in self.accepted) + kv
        return (self.kind if self.req is None else f"{self.kind} r{self.req}") + kv


def _parse_accepted(text: str) -> tuple[tuple[int, int], ...]:
    out = []
    for item in text.split(","):
        req, _, count = item.partition(":")
        if not req.startswith("r") or not req[1:].isdigit() or not count.isdigit():
            raise ValueError(f"accept= needs items like r0:1, got {item!r}")
        out.append((int(req[1:]), int(count)))
    return tuple(out)


def _is_invalid_kind(kind: str) -> bool:
    """``invalid@j``: the worker reports a load's blocks from block index j on invalid."""
    head, sep, index = kind.partition("@")
    return head == "invalid" and bool(sep) and index.isdigit()


def parse_event(text: str) -> Event:
    """Inverse of ``str(Event)``; ``ValueError`` (one line) otherwise."""
    parts = text.split()
    if not parts or parts[0] not in EVENT_KINDS:
        raise ValueError(f"unknown event {text!r}")
    kind, _, who = parts[-1].partition("=")
    if parts[0] == DELIVER and (kind in ("recv", "fail", "sent") or _is_invalid_kind(kind)):
        if not who.startswith("r") or not who[1:].isdigit():
            raise ValueError(f"event {text!r}: {kind}= needs a request name like r0")
        return parse_event(" ".join(parts[:-1]))._replace(kv=(kind, int(who[1:])))
    if parts[0] == DELIVER and len(parts) == 2 and parts[1].startswith("accept="):
        return Event(DELIVER, None, _parse_accepted(parts[1][len("accept="):]))
    if parts[0] in _PER_REQUEST:
        if len(parts) != 2 or not parts[1].startswith("r") or not parts[1][1:].isdigit():
            raise ValueError(f"event {text!r} needs a request name like r0")
        return Event(parts[0], int(parts[1][1:]))
    if len(parts) != 1:
        raise ValueError(f"event {parts[0]!r} takes no argument")
    return Event(parts[0])


# --------------------------------------------------------------------------- observations


@dataclass(frozen=True)
class RequestObs:
    """One arrived request, normalized (a finished request keeps its last counters)."""

    status: str  # WAITING RUNNING PREEMPTED STOPPED LENGTH ABORTED REPETITION ...
    num_tokens: int
    num_output_tokens: int
    num_computed_tokens: int
    num_output_placeholders: int
    num_in_flight_tokens: int
    num_stale_output_tokens: int
    drop_stale_output: bool
    is_prefill_chunk: bool
    last_sched_seq: int
    block_table: tuple[int, ...]  # spec block ids; () once freed
    output_tokens: tuple[int, ...]  # every token delivered so far, in order
    num_spec_token_ids: int = 0  # S: len(spec_token_ids), drafts for the next step
    grammar_gap: bool = False  # structured output: a bitmask was built before an earlier token was known
    swa_block_table: tuple[int, ...] = ()  # hybrid: the second group's blocks (sliding window, or Mamba states:
    # spec/mamba.py), -1 = the null block
    stop_reason: str = ""  # Request.stop_reason as text: a stop token, "repetition_detected"; "" = None
    logprobs_gap: str = ""  # vllm-engine: the first logprobs row vLLM returned that is not the oracle model's
    # (vllm_engine/logprobs_check.py); the spec side is always ""


@dataclass(frozen=True)
class Observation:
    """What a target looks like after an event; equal observations = agreement."""

    requests: tuple[tuple[int, RequestObs], ...]  # arrived requests, by id
    waiting: tuple[int, ...]  # front first
    running: tuple[int, ...]  # admission order
    scheduled: tuple[tuple[int, int, int], ...]  # last schedule: (req, tokens, sampled position; 0 = chunk)
    delivered: tuple[tuple[int, tuple[int, ...]], ...]  # last deliver: tokens per request
    finished: tuple[tuple[int, str], ...]  # finish reasons the last event reported
    preempted: tuple[int, ...]  # requests preempted by the last event
    num_in_flight_steps: int  # batch-queue length
    has_requests: bool  # Scheduler.has_requests(): what the engine loop asks before schedule()
    free_blocks: tuple[int, ...]  # free queue, next allocated first
    sched_step_seq: int
    processed_step_seq: int
    deferred_frees: tuple[tuple[int, tuple[int, ...]], ...]  # (fence, sorted blocks), oldest first
    cached_blocks: tuple[tuple[int, int, int], ...] = ()  # (block, req, block index) per hashed block
    error: str | None = None  # the event raised in this target (an assert, a RuntimeError)
    sampling_deferred: bool = False  # a step is executed but its sampling waits (structured output)
    payload: tuple[Any, ...] = ()  # last schedule: what the SchedulerOutput tells the worker (payload.py)
    kv_holding: tuple[int, ...] = ()  # Scheduler.kv_holding_waiting (KV connector loads), front first
    num_waiting_for_streaming_input: int = 0  # Scheduler.num_waiting_for_streaming_input: paused sessions
    store_jobs: tuple[tuple[int, tuple[int, ...], bool], ...] = ()  # offloading: unfinished store jobs
    # (req, GPU blocks read, flushed by a step), sorted
    kv_events: tuple[tuple[str, int, int], ...] = ()  # KV cache events of the last event, sorted: ("stored" |
    # "removed", req, block index) per block hash, ("cleared", -1, -1); only where kv_events_on (workload.py)
    encoder: tuple[tuple[str, Any], ...] = ()  # images only: the encoder cache, by name (scheduler/encoder_obs.py)

    def flat(self) -> dict[str, Any]:
        """Field path -> value, in a fixed order (what ``compare`` walks)."""
        out: dict[str, Any] = {"error": self.error}
        for name in ("scheduled", "payload", "delivered", "finished", "preempted", "waiting", "kv_holding", "running",
                     "num_in_flight_steps", "sampling_deferred", "has_requests"):
            out[name] = getattr(self, name)
        for req, r in self.requests:
            for key, value in asdict(r).items():
                out[f"r{req}.{key}"] = value
        out["num_free_blocks"] = len(self.free_blocks)
        out["free_blocks"] = self.free_blocks
        out["sched_step_seq"] = self.sched_step_seq
        out["processed_step_seq"] = self.processed_step_seq
        out["deferred_frees"] = self.deferred_frees
        out["cached_blocks"] = self.cached_blocks
        out["num_waiting_for_streaming_input"] = self.num_waiting_for_streaming_input
        out["store_jobs"] = self.store_jobs
        out["kv_events"] = self.kv_events
        for name, value in self.encoder:
            out[f"encoder.{name}"] = value
        return out


def with_error(obs: Observation | None, error: str) -> Observation:
    """``obs`` marked as crashed (an empty observation if none could be taken)."""
    if obs is None:
        obs = Observation((), (), (), (), (), (), (), 0, False, (), 0, 0, ())
    return replace(obs, error=error)


class Difference(NamedTuple):
    """One field on which the target disagrees with the oracle."""

    field: str
    expected: Any  # the oracle's (spec's) value
    actual: Any  # the target's value


_MISSING = "<absent>"


def compare(expected: Observation, actual: Observation) -> list[Difference]:
    """Every field that differs, in ``Observation.flat`` order (no tolerance)."""
    if expected == actual:
        return []
    e, a = expected.flat(), actual.flat()
    keys = list(e) + [k for k in a if k not in e]
    return [
        Difference(k, e.get(k, _MISSING), a.get(k, _MISSING))
        for k in keys
        if e.get(k, _MISSING) != a.get(k, _MISSING)
    ]


# --------------------------------------------------------------------------- targets


class Unsupported(RuntimeError):
    """The target cannot perform this event (e.g. ``reset_prefix_cache``)."""


@runtime_checkable
class Target(Protocol):
    """A scheduler under test, driven event by event.

    Build one per workload (``targets.make_target``); ids are request indices.
    Methods raise on a crash of the engine (the harness records the message as
    ``Observation.error``) and ``Unsupported`` for an event the target lacks.
    """

    name: str

    def add_request(self, req: int, prompt_len: int, max_tokens: int, eos_position: int) -> None:
        """The client submits request ``req``."""

    def schedule(self) -> None:
        """One ``schedule()``; the step joins the target's batch queue."""

    def deliver_oldest(self, accepted: tuple[tuple[int, int], ...] = ()) -> None:
        """Process the oldest in-flight step with the tokens of ``sampled_token``;
        ``accepted``: ``Event.accepted`` (speculative decoding), passed only when non-empty."""

    def abort(self, req: int) -> None:
        """The client aborts ``req``."""

    def reset_prefix_cache(self) -> None:
        """``reset_prefix_cache(reset_running_requests=True)``, or ``Unsupported``."""

    def observe(self) -> Observation:
        """The normalized state after the last event.

        A target with streaming-input sessions also has ``stream_input(req, close)``: the
        client's next input of session ``req`` (``close``: the end of its stream); ``apply_event``
        raises ``Unsupported`` for a target without it."""


class Oracle(Target, Protocol):
    """The target the others are compared with: it also says what may happen next."""

    def enabled(self) -> list[Event]:
        """The events the engine loop and the environment allow now, in a fixed order."""

    def last_events(self) -> frozenset[str]:
        """The spec events (``spec/events.py``) the last event exercised."""


def apply_event(target: Target, w: Workload, event: Event) -> None:
    """Dispatch ``event`` to ``target``."""
    if event.kind == ADD_REQUEST and event.req is not None:
        r = w.requests[event.req]
        target.add_request(event.req, r.prompt_len, r.max_tokens, r.eos_position)
    elif event.kind == SCHEDULE:
        target.schedule()
    elif event.kind == DELIVER and event.kv is not None:
        target.deliver_oldest(accepted=event.accepted, kv=event.kv)  # type: ignore[call-arg]
    elif event.kind == DELIVER and event.accepted:
        target.deliver_oldest(accepted=event.accepted)
    elif event.kind == DELIVER:
        target.deliver_oldest()
    elif event.kind == ABORT and event.req is not None:
        target.abort(event.req)
    elif event.kind == RESET_PREFIX_CACHE:
        target.reset_prefix_cache()
    elif event.kind in PAUSE_KINDS or event.kind == RESUME:
        apply_pause_event(target, event.kind)
    elif event.kind in STREAM_KINDS and event.req is not None:
        stream_input = optional_method(target, "stream_input", f"streaming-input sessions ({event.kind})")
        stream_input(event.req, event.kind == STREAM_CLOSE)
    else:
        raise ValueError(f"cannot apply {event}")


def optional_method(target: Target, name: str, lacking: str) -> Any:
    """``target``'s method ``name``, which only some targets have (the ``Target`` protocol leaves
    it out); ``Unsupported`` naming what the target lacks otherwise."""
    method = getattr(target, name, None)
    if method is None:
        raise Unsupported(f"the {target.name} target has no {lacking}")
    return method


def apply_pause_event(target: Target, kind: str) -> None:
    """``pause_scheduler(mode)`` or ``resume_scheduler()`` on a target that has them
    (``pause(mode)``, ``resume()``); ``Unsupported`` on one that has not."""
    if kind == RESUME:
        optional_method(target, "resume", "resume_scheduler")()
    else:
        optional_method(target, "pause", "pause_scheduler")(PAUSE_KINDS[kind])


def step_and_observe(target: Target, w: Workload, event: Event,
                     timing: dict[str, float] | None = None, key: str = "target") -> Observation:
    """Apply ``event``; a crash becomes ``Observation.error`` instead of an exception.

    With ``timing``, adds the seconds spent in the event to ``timing[key]`` and
    in the observation to ``timing[key + "_observe"]``.
    """
    t0 = time.perf_counter()
    error = None
    try:
        apply_event(target, w, event)
    except Unsupported:
        raise
    except Exception as exc:  # noqa: BLE001 - any engine crash is a result to compare
        error = f"{type(exc).__name__}: {exc}"
    t1 = time.perf_counter()
    obs = target.observe() if error is None else with_error(_safe_observe(target), error)
    if timing is not None:
        timing[key] = timing.get(key, 0.0) + (t1 - t0)
        timing[key + "_observe"] = timing.get(key + "_observe", 0.0) + (time.perf_counter() - t1)
    return obs


def _safe_observe(target: Target) -> Observation | None:
    try:
        return target.observe()
    except Exception:  # noqa: BLE001 - the target is already broken
        return None


# --------------------------------------------------------------------------- runs


@dataclass
class Row:
    """One event of a run: what both sides looked like afterwards."""

    index: int
    event: Event
    expected: Observation
    actual: Observation
    spec_events: frozenset[str]
    differences: list[Difference] = field(default_factory=list)


@dataclass
class RunResult:
    """A run of one workload: its rows (up to the first difference) and the coverage."""

    workload: Workload
    rows: list[Row]
    coverage: dict[str, int]

    @property
    def diverged(self) -> bool:
        return bool(self.rows) and bool(self.rows[-1].differences)

    @property
    def events(self) -> list[Event]:
        return [r.event for r in self.rows]


def run_lockstep(w: Workload, oracle: Oracle, target: Target, events: Iterable[Event],
                 coverage: dict[str, int] | None = None) -> RunResult:
    """Apply ``events`` to both; stop after the first event with a difference.

    Each event must be enabled in the oracle (``ValueError`` otherwise).
    """
    result = RunResult(w, [], coverage if coverage is not None else {})
    for event in events:
        if not run_one(w, oracle, target, event, result):
            break
    return result


def run_one(w: Workload, oracle: Oracle, target: Target, event: Event, result: RunResult,
            timing: dict[str, float] | None = None, enabled_checked: bool = False) -> bool:
    """Apply one event to both sides and record it; False once they differ.

    ``enabled_checked``: the caller took ``event`` from ``oracle.enabled()`` just now.
    """
    if not enabled_checked and event not in oracle.enabled():
        raise ValueError(f"event {len(result.rows) + 1} '{event}' is not enabled in the spec")
    expected = step_and_observe(oracle, w, event, timing, "oracle")
    spec_events = oracle.last_events()
    for name in spec_events:
        result.coverage[name] = result.coverage.get(name, 0) + 1
    actual = step_and_observe(target, w, event, timing, "target")
    t0 = time.perf_counter()
    diffs = compare(expected, actual)
    if timing is not None:
        timing["compare"] = timing.get("compare", 0.0) + (time.perf_counter() - t0)
    result.rows.append(Row(len(result.rows) + 1, event, expected, actual, spec_events, diffs))
    return not diffs


def first_events(w: Workload) -> Sequence[Event]:
    """Every run starts by submitting r0 (the spec's initial state has it waiting)."""
    return (Event(ADD_REQUEST, 0),)
