"""The engine loop and the environment: which actions are enabled, and their effect.

This is the spec's next-state relation (Stateright's ``actions`` +
``next_state``).  Engine actions:

* ``schedule`` — ``Scheduler.schedule()`` and queueing the step
  (``EngineCore.step_with_batch_queue``: ``batch_queue.appendleft``);
* ``update_from_output`` — wait for the oldest step and process it.

In the ``exact`` loop they alternate as ``step_with_batch_queue`` does
(vllm/v1/engine/core.py): schedule while requests exist and the queue has
room; process the oldest step once the queue is full, or when no request is
left.  With depth 1 this is the synchronous ``EngineCore.step``.  In the
``free`` loop any enabled action may run (a superset).

Environment actions: ``abort rN`` (the client aborts; vLLM applies it between
steps or just before ``update_from_output``, both covered: any time; with
``abort_mode = "deferred"``, SGLang's abort of a running request waits for its next
delivered token),
``add_request rN`` (a late arrival, in id order), ``reset_prefix_cache``
(preempts every running request in drop mode), ``pause_abort``/``pause_wait``/
``pause_keep`` (``EngineCore.pause_scheduler``) and ``resume``, and a streaming
session's next input, ``stream_update rN`` / ``stream_close rN``
(``spec/streaming.py``); these come through the engine's input queue, so only
between engine-loop calls (``at_call_boundary``).
"""
from __future__ import annotations

import itertools
from typing import NamedTuple

from asyncspec.spec import connector, policy, streaming
from asyncspec.spec import events as ev
from asyncspec.spec import request as rq
from asyncspec.spec.algebra import CONCRETE as A
from asyncspec.spec.config import PAUSE_MODES, SpecConfig
from asyncspec.spec.draft import Draft, has_requests
from asyncspec.spec.output import free_finished, takes_acceptance, update_from_output
from asyncspec.spec.scheduler import preempt_request, schedule
from asyncspec.spec.state import PAUSED_ALL, PAUSED_NEW, UNPAUSED, EngineState, in_flight_steps, request_name
from asyncspec.spec.cites import models

SCHEDULE = "schedule"
UPDATE_FROM_OUTPUT = "update_from_output"
ABORT = "abort"
ADD_REQUEST = "add_request"
RESET_PREFIX_CACHE = "reset_prefix_cache"
PAUSE_ACTIONS = {mode: f"pause_{mode}" for mode in PAUSE_MODES}
"""``pause_scheduler(mode)`` per ``PauseMode`` (``config.PAUSE_MODES``), as an action name."""
PAUSE_ABORT, PAUSE_WAIT, PAUSE_KEEP = (PAUSE_ACTIONS[mode] for mode in ("abort", "wait", "keep"))
RESUME = "resume"
STREAM_UPDATE, STREAM_CLOSE = streaming.STREAM_UPDATE, streaming.STREAM_CLOSE  # a session's next input


class Action(NamedTuple):
    """An action label: a name and, for per-request actions, the request.

    ``update_from_output`` with speculative decoding also carries the number of
    drafts the worker accepted for each entry that scheduled drafts
    (``accept=1,0``): an environment choice, explored exhaustively.
    """

    name: str
    req: int | None = None
    accepted: tuple[int, ...] = ()
    kv: connector.Report | None = None  # update_from_output: the KV connector report it carries

    def __str__(self) -> str:
        kv = f" {self.kv[0]}={request_name(self.kv[1])}" if self.kv is not None else ""
        if self.accepted:
            return f"{self.name} accept={','.join(map(str, self.accepted))}{kv}"
        return (self.name if self.req is None else f"{self.name} {request_name(self.req)}") + kv


class Transition(NamedTuple):
    """One edge of the state graph."""

    action: Action
    state: EngineState
    events: frozenset[str]


def parse_action(text: str) -> Action:
    """Inverse of ``str(Action)``: ``"abort r1"`` -> ``Action("abort", 1)``.

    Raises ``ValueError`` with a one-line message for anything else.
    """
    parts = text.split()
    names = (SCHEDULE, UPDATE_FROM_OUTPUT, ABORT, ADD_REQUEST, RESET_PREFIX_CACHE, *PAUSE_ACTIONS.values(), RESUME,
             STREAM_UPDATE, STREAM_CLOSE)
    if not parts or parts[0] not in names:
        raise ValueError(f"unknown action {text!r}")
    kind, _, who = parts[-1].partition("=")
    if parts[0] == UPDATE_FROM_OUTPUT and connector.is_report_kind(kind):
        if not who.startswith("r") or not who[1:].isdigit():
            raise ValueError(f"action {text!r}: {kind}= needs a request name like r0")
        return parse_action(" ".join(parts[:-1]))._replace(kv=(kind, int(who[1:])))
    if parts[0] in (ABORT, ADD_REQUEST, STREAM_UPDATE, STREAM_CLOSE):
        if len(parts) != 2 or not parts[1].startswith("r") or not parts[1][1:].isdigit():
            raise ValueError(f"action {text!r} needs a request name like r0")
        return Action(parts[0], int(parts[1][1:]))
    if parts[0] == UPDATE_FROM_OUTPUT and len(parts) == 2 and parts[1].startswith("accept="):
        try:
            return Action(parts[0], None, tuple(int(x) for x in parts[1][len("accept="):].split(",")))
        except ValueError:
            raise ValueError(f"action {text!r}: accept= needs comma-separated integers") from None
    if len(parts) != 1:
        raise ValueError(f"action {parts[0]!r} takes no argument")
    return Action(parts[0])


# ---------------------------------------------------------------- guards


@models("vllm.v1.engine.core.EngineCore.step_with_batch_queue")
def can_schedule(cfg: SpecConfig, s: EngineState) -> bool:
    """``step_with_batch_queue`` calls ``schedule()``: requests exist, queue has room."""
    return has_requests(s) and len(s.batch_queue) < cfg.batch_queue_depth and s.deferred_step is None


@models("vllm.v1.engine.core.EngineCore.step_with_batch_queue")
def can_process(cfg: SpecConfig, s: EngineState) -> bool:
    """The oldest step may be processed now."""
    if not s.batch_queue:
        return False
    if cfg.loop == "free" or s.deferred_step is not None:
        return True  # a deferred step waits for the oldest output before sampling
    return len(s.batch_queue) >= cfg.batch_queue_depth or not has_requests(s)


@models("vllm.v1.engine.core.EngineCore.step_with_batch_queue",
        "vllm.v1.engine.core.EngineCoreProc.run_busy_loop")
def at_call_boundary(cfg: SpecConfig, s: EngineState) -> bool:
    """Between two engine-loop calls, where ``EngineCore`` reads its input queue
    (new requests, utility calls such as ``reset_prefix_cache``).

    In the exact loop a ``schedule()`` that filled the queue, deferred a step's
    sampling, or queued an empty step with no request left goes on, in the same
    ``step_with_batch_queue`` call, to process the oldest step
    (``scheduler.call_goes_on``); those states are inside a call.  With depth 1
    no step is ever in flight at a boundary.
    """
    if cfg.loop == "free":
        return True
    return not s.call_in_progress


@models("vllm.v1.core.sched.scheduler.Scheduler.finish_requests")
def can_abort(s: EngineState, req: int) -> bool:
    """The client may abort an arrived, unfinished request (once: a second abort of a
    deferred one only sets SGLang's ``Req.to_finish`` again)."""
    c = s.counters[req]
    return c.status != rq.NOT_ARRIVED and not rq.is_finished(A, c) and not c.abort_deferred


def next_arrival(s: EngineState) -> int | None:
    """The lowest-numbered request that has not arrived yet."""
    for i, c in enumerate(s.counters):
        if c.status == rq.NOT_ARRIVED:
            return i
    return None


# ---------------------------------------------------------------- environment effects


@models("vllm.v1.core.sched.scheduler.Scheduler.finish_requests")
def abort(cfg: SpecConfig, s: EngineState, req: int) -> tuple[EngineState, frozenset[str]]:
    """``Scheduler.finish_requests(req, FINISHED_ABORTED)``.

    ``abort_mode = "deferred"`` (SGLang 0.5.23, ``managers/scheduler.py``
    ``Scheduler.abort_request``): a running request that is not mid chunked prefill
    only gets ``Req.to_finish`` (``rq.defer_abort``); it stays scheduled, and its next
    delivered token ends it (``output.process_entry``).  Any other request finishes
    at once, as here.
    """
    d = Draft.of(s)
    if d.counters[req].num_in_flight_tokens > 0:
        d.emit(ev.ABORT_IN_FLIGHT)
    if cfg.abort_mode == "deferred" and rq.abort_defers(A, d.counters[req]):
        d.counters[req] = rq.defer_abort(A, d.counters[req])
        d.emit(ev.ABORT_DEFERRED)
        return d.freeze(), frozenset(d.events)
    orphan = connector.load_pending(cfg, d, req)
    d.counters[req] = rq.finish(A, d.counters[req], A.lit(rq.FINISHED_ABORTED))
    free_finished(cfg, d, req, orphan)
    return d.freeze(), frozenset(d.events)


@models("vllm.v1.core.sched.scheduler.Scheduler.add_request")
def add_request(cfg: SpecConfig, s: EngineState, req: int) -> tuple[EngineState, frozenset[str]]:
    """``Scheduler.add_request``: enqueue at the back of ``waiting``."""
    d = Draft.of(s)
    d.counters[req] = d.counters[req]._replace(status=rq.WAITING)
    d.waiting.append(req)
    policy.order_queues(cfg, d)
    return d.freeze(), frozenset()


@models("vllm.v1.core.sched.scheduler.Scheduler.reset_prefix_cache",
        "vllm.v1.core.block_pool.BlockPool.reset_prefix_cache")
def reset_prefix_cache(cfg: SpecConfig, s: EngineState) -> tuple[EngineState, frozenset[str]]:
    """``Scheduler.reset_prefix_cache(reset_running_requests=True)``.

    Pops running requests from the end and preempts each in drop mode, so
    they come back in FIFO order; then ``BlockPool.reset_prefix_cache`` drops
    every block hash, which succeeds only if every block is free.  With
    deferral, parked blocks make it fail (docs/findings_vllm.md, V1): vLLM
    raises after the preemptions, and the utility call reports the error.
    """
    d = Draft.of(s)
    d.forced_preemptions_left -= 1
    while d.running:
        preempt_request(cfg, d, d.running.pop(), drop=True)
    if len(d.free_blocks) == cfg.num_blocks:  # BlockPool.reset_prefix_cache
        d.block_hashes = [None] * cfg.num_blocks
    else:  # blocks still held or parked: vLLM raises RuntimeError to the caller, the engine goes on
        d.emit(ev.RESET_PREFIX_CACHE_FAILED)
    return d.freeze(), frozenset(d.events)


@models("vllm.v1.engine.core.EngineCore.pause_scheduler",
        "vllm.v1.core.sched.scheduler.Scheduler.set_pause_state")
def pause(cfg: SpecConfig, s: EngineState, name: str) -> tuple[EngineState, frozenset[str]]:
    """``EngineCore.pause_scheduler(mode, clear_cache=False)``.

    ``abort``: every unfinished request is finished ABORTED (``finish_requests(None)``, in
    arrival order), then ``PAUSED_NEW``; ``wait`` (``EngineCoreProc``'s): ``PAUSED_NEW``, the
    engine goes on stepping what runs; ``keep``: ``PAUSED_ALL``.  Steps in flight are not
    touched: the engine loop still processes them (``has_requests`` no longer counts what the
    pause holds).  ``clear_cache=True`` is ``reset_prefix_cache`` once the pause is done.
    """
    events = {ev.PAUSE_IN_FLIGHT} if in_flight_steps(s) else set()
    if name == PAUSE_ABORT:
        for req in range(len(s.counters)):
            if can_abort(s, req):
                s, aborted = abort(cfg, s, req)
                events |= aborted
    d = Draft.of(s)
    d.pause_state = PAUSED_ALL if name == PAUSE_KEEP else PAUSED_NEW
    d.pauses_left -= 1
    return d.freeze(), frozenset(events)


@models("vllm.v1.engine.core.EngineCore.resume_scheduler")
def resume(s: EngineState) -> tuple[EngineState, frozenset[str]]:
    """``EngineCore.resume_scheduler``: ``UNPAUSED``; what the pause held is scheduled again."""
    held = bool(s.running or s.waiting or s.kv_holding)
    return s._replace(pause_state=UNPAUSED), frozenset({ev.RESUMED_HELD} if held else ())


def pause_events(s: EngineState, action: Action) -> frozenset[str]:
    """The pause witnesses of an engine action taken in ``s``: a step processed while paused,
    a ``schedule()`` under ``PAUSED_NEW`` with a request left in ``waiting``."""
    if s.pause_state == UNPAUSED:
        return frozenset()
    if action.name == UPDATE_FROM_OUTPUT:
        return frozenset({ev.PAUSED_OUTPUT})
    if action.name == SCHEDULE and s.pause_state == PAUSED_NEW and s.waiting:
        return frozenset({ev.PAUSE_HELD_WAITING})
    return frozenset()


def pause_actions(cfg: SpecConfig, s: EngineState) -> list[Action]:
    """The pause calls the environment may make now (utility calls: at a call boundary):
    one per mode while unpaused and calls remain, ``resume`` while paused."""
    if s.pause_state != UNPAUSED:
        return [Action(RESUME)]
    if s.pauses_left > 0:
        return [Action(PAUSE_ACTIONS[mode]) for mode in cfg.pause_modes]
    return []


@models("vllm.v1.core.sched.scheduler.Scheduler.add_request",
        "vllm.v1.core.sched.scheduler.Scheduler.finish_requests")
def stream_input(cfg: SpecConfig, s: EngineState, req: int) -> tuple[EngineState, frozenset[str]]:
    """``stream_update rN`` / ``stream_close rN``: the client's next input of session ``req``
    reaches ``Scheduler.add_request`` (``streaming.take_input``); the end of a paused
    session's stream finishes it, ``finish_requests(FINISHED_ABORTED)``."""
    d = Draft.of(s)
    if streaming.take_input(cfg, d, req):
        d.counters[req] = rq.finish(A, d.counters[req], A.lit(rq.FINISHED_ABORTED))
        free_finished(cfg, d, req)
    return d.freeze(), frozenset(d.events)


# ---------------------------------------------------------------- next-state relation

def enabled_actions(cfg: SpecConfig, s: EngineState) -> list[Action]:
    """Every action enabled in ``s``, in a fixed order."""
    actions: list[Action] = []
    if can_schedule(cfg, s):
        actions.append(Action(SCHEDULE))
    if can_process(cfg, s):
        actions += [Action(UPDATE_FROM_OUTPUT, None, v, kv) for v in acceptance_choices(s)
                    for kv in connector.report_choices(cfg, s)]
    if cfg.aborts:
        actions += [Action(ABORT, i) for i in range(len(s.counters)) if can_abort(s, i)]
    boundary = at_call_boundary(cfg, s)
    arrival = next_arrival(s) if cfg.late_arrivals and boundary else None
    if arrival is not None:
        actions.append(Action(ADD_REQUEST, arrival))
    if s.forced_preemptions_left > 0 and boundary:  # vLLM accepts the call at any time
        actions.append(Action(RESET_PREFIX_CACHE))
    if cfg.pauses and boundary:
        actions += pause_actions(cfg, s)
    if cfg.resumable and boundary:  # a session's next input comes through the input queue
        actions += [Action(kind, i) for i in cfg.resumable if (kind := streaming.next_input(cfg, s, i)) is not None]
    return actions


def acceptance_choices(s: EngineState) -> list[tuple[int, ...]]:
    """Every vector of accepted-draft counts for the oldest step (``[()]`` without drafts)."""
    ranges = [range(e.num_drafts + 1) for e in s.batch_queue[0].entries if takes_acceptance(s, e)]
    return [tuple(v) for v in itertools.product(*ranges)]


def apply(cfg: SpecConfig, s: EngineState, action: Action) -> tuple[EngineState, frozenset[str]]:
    """The effect of ``action`` on ``s`` (the caller checks it is enabled)."""
    if action.name in (SCHEDULE, UPDATE_FROM_OUTPUT):
        state, events = (schedule(cfg, s) if action.name == SCHEDULE
                         else update_from_output(cfg, s, action.accepted, action.kv))
        return state, events | pause_events(s, action) if cfg.pauses else events
    if action.name == ABORT and action.req is not None:
        return abort(cfg, s, action.req)
    if action.name == ADD_REQUEST and action.req is not None:
        return add_request(cfg, s, action.req)
    if action.name == RESET_PREFIX_CACHE:
        return reset_prefix_cache(cfg, s)
    if action.name in PAUSE_ACTIONS.values():
        return pause(cfg, s, action.name)
    if action.name == RESUME:
        return resume(s)
    if action.name in (STREAM_UPDATE, STREAM_CLOSE) and action.req is not None:
        return stream_input(cfg, s, action.req)
    raise ValueError(f"cannot apply {action}")


def next_states(cfg: SpecConfig, s: EngineState) -> list[Transition]:
    """Every successor of ``s``, with its action and events."""
    out = []
    for action in enabled_actions(cfg, s):
        state, events = apply(cfg, s, action)
        out.append(Transition(action, state, events))
    return out
