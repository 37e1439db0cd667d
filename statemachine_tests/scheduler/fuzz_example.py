"""One fuzz example: the events a run picks, and the run itself.

The run starts with ``add_request r0``; each choice byte then picks one of the
events the spec enables (``pick``: mostly the engine loop, sometimes an
arrival, an abort or a ``reset_prefix_cache``); after the choices the engine is
drained (arrivals and the engine loop only).  A reset-heavy workload
(``reset_heavy``) is a reset storm instead: all arrivals first, a larger
reset share, a reset after each drain ``schedule()``.  Both sides are
compared after every event (``harness.compare``); a difference raises
``Divergence``.
"""
from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from asyncspec.spec import request as rq

from asyncspec.statemachine_tests.core.harness import (
    ABORT, ADD_REQUEST, DELIVER, PAUSE_KINDS, RESET_PREFIX_CACHE, RESUME, SCHEDULE, STREAM_KINDS, Event, RunResult,
    Workload,
    first_events, run_one,
)
from asyncspec.statemachine_tests.scheduler.registry import make_target
from asyncspec.statemachine_tests.scheduler.spec_target import SpecTarget

MAX_DRAIN = 600  # engine events after the choices (a run ends when nothing is enabled)


RESET_HEAVY = 3
"""A workload allowing at least this many ``reset_prefix_cache`` calls is *reset-heavy*: its
requests all arrive before the choices, which draw resets from a fifth of their values
(``planned_events``, ``pick_bounds``).  The profiles allow at most two; the self-test's
``profiles.RESET_STORM_PROFILE`` allows four."""
BOUNDS = (218, 240, 250)  # the first choice of the arrival, abort and reset groups
HEAVY_BOUNDS = (170, 192, 202)  # reset-heavy: the resets take 202-255 (a fifth), from the engine loop


def pick(enabled: Sequence[Event], choice: int, kinds: frozenset[str] | None = None,
         bounds: tuple[int, int, int] = BOUNDS) -> Event:
    """The event ``choice`` selects; 0 (what Hypothesis shrinks to) is the engine loop.

    0-217: the engine loop (schedule/deliver; in the free loop the choice picks
    one), 218-239: the next arrival or a streaming session's next input (the
    client's, which swarm testing switches with arrivals), 240-249: an abort,
    250-255: a utility call, ``reset_prefix_cache`` or a pause / resume
    (``bounds``; a reset-heavy workload's are ``HEAVY_BOUNDS``: 0-169, 170-191,
    192-201, 202-255).  A group with nothing enabled falls back to the first
    non-empty one in that order.  ``kinds`` (swarm testing): the arrival, abort
    and utility groups whose kind is not in it count as empty (unless nothing
    else is enabled); the utility calls share the reset's switch.
    """
    groups = (
        [e for e in enabled if e.kind in (SCHEDULE, DELIVER)],
        [e for e in enabled if e.kind == ADD_REQUEST or e.kind in STREAM_KINDS],
        [e for e in enabled if e.kind == ABORT],
        [e for e in enabled if e.kind in UTILITY_CALLS],
    )
    if kinds is not None:
        swarm = [g if g and (swarm_kind(g[0].kind) in kinds or i == 0) else [] for i, g in enumerate(groups)]
        if any(swarm):  # else nothing but a switched-off kind is enabled: it is needed
            groups = (swarm[0], swarm[1], swarm[2], swarm[3])
    index = sum(choice >= b for b in bounds)
    group = groups[index] or next(g for g in groups if g)
    return group[choice % len(group)]


UTILITY_CALLS = (RESET_PREFIX_CACHE, *PAUSE_KINDS, RESUME)
"""The engine's utility calls among the events: a reset, a pause in some mode, a resume."""


def swarm_kind(kind: str) -> str:
    """The swarm switch an event kind answers to: a utility call the reset's, a session's next
    input the arrivals' (both are the client's events)."""
    if kind in UTILITY_CALLS:
        return RESET_PREFIX_CACHE
    return ADD_REQUEST if kind in STREAM_KINDS else kind


def reset_heavy(w: Workload) -> bool:
    """Whether ``w`` allows ``RESET_HEAVY`` resets or more."""
    return w.reset_prefix_cache >= RESET_HEAVY


PAUSE_BOUNDS = (196, 226, 234)
"""A workload with pauses: the utility calls take 234-255 (a twelfth: two pauses and their resumes,
a reset), the arrivals more (196-225), so that requests arrive while a pause holds the queue."""


def pick_bounds(w: Workload) -> tuple[int, int, int]:
    """The choice groups' bounds for ``w``: ``HEAVY_BOUNDS`` when it is reset-heavy,
    ``PAUSE_BOUNDS`` when it allows pauses."""
    if reset_heavy(w):
        return HEAVY_BOUNDS
    return PAUSE_BOUNDS if w.pauses else BOUNDS


def engine_reachable(w: Workload, oracle: SpecTarget, enabled: list[Event]) -> list[Event]:
    """``enabled`` without interleavings vLLM's engine never produces, where they matter.

    At depth 1 ``EngineCore.step`` runs schedule, execute and update_from_output
    in one call, so a utility call (``reset_prefix_cache``) never lands between a
    step's schedule and its output.  The spec allows it; with speculative
    decoding the worker's drafts (``post_step``) then reach a request preempted
    in between, which vLLM stores and the spec does not (docs/findings_vllm.md,
    "Not divergences").  Dropped only in that case, so other profiles keep it.
    """
    if w.depth == 1 and w.num_speculative_tokens and oracle.state.batch_queue:
        return [e for e in enabled if e.kind != RESET_PREFIX_CACHE]
    return enabled


def drain_pick(enabled: Sequence[Event]) -> Event | None:
    """After the choices: every arrival, then the engine loop, until nothing is enabled;
    a KV connector's pending transfers complete (an output reporting one) first; a streaming
    session's input last (``stream_pick`` sends a paused one's first); a paused scheduler is
    resumed once nothing else is left to do."""
    for e in enabled:
        if e.kind == ADD_REQUEST:
            return e
    for e in enabled:
        if e.kv is not None and e.kv[0] in ("recv", "sent", "stored"):  # not a failure (fail=, invalid@j=)
            return e
    for kind in (SCHEDULE, DELIVER):
        for e in enabled:
            if e.kind == kind and e.kv is None:
                return e
    stream = next((e for e in enabled if e.kind in STREAM_KINDS), None)
    return stream or next((e for e in enabled if e.kind == RESUME), None)  # a pause held what is left


@dataclass
class Stats:
    """What a fuzz campaign did."""

    events: int = 0
    examples: int = 0
    coverage: dict[str, int] = field(default_factory=dict)  # spec event -> transitions
    timing: dict[str, float] = field(default_factory=dict)
    known: dict[str, int] = field(default_factory=dict)  # documented vLLM bug -> examples that hit it


KNOWN_BUGS = {
    "reset-with-deferral": "RuntimeError: Failed to reset KV cache",
}
"""Documented vLLM bugs (docs/findings_vllm.md) a profile reaches only behind a named switch
(``--known-bug``), and how the first difference of each starts (vLLM raising)."""


def known_bug(result: RunResult) -> str | None:
    """The documented vLLM bug ``result``'s divergence is, or None."""
    first = result.rows[-1].differences[0]
    if first.field != "error" or first.expected is not None:
        return None
    return next((name for name, start in KNOWN_BUGS.items() if str(first.actual).startswith(start)), None)


def drive(w: Workload, target_name: str, choices: Sequence[int], stats: Stats,
          kinds: frozenset[str] | None = None) -> RunResult:
    """One example: build both sides, apply r0's arrival, the choices, then drain;
    ``kinds``: the swarm's event kinds (``pick``)."""
    oracle = SpecTarget(w, target=target_name)
    t0 = time.perf_counter()
    target = make_target(target_name, w)
    stats.timing["target_build"] = stats.timing.get("target_build", 0.0) + time.perf_counter() - t0
    result = RunResult(w, [], stats.coverage)
    for event in planned_events(w, oracle, choices, kinds):
        stats.events += 1
        if not run_one(w, oracle, target, event, result, stats.timing, enabled_checked=True):
            break
    return result


def planned_events(w: Workload, oracle: SpecTarget, choices: Sequence[int],
                   kinds: frozenset[str] | None = None) -> Iterator[Event]:
    """r0's arrival, one event per choice, then the drain; each enabled when yielded.

    A reset-heavy workload (``reset_heavy``) is a reset storm: every request arrives
    after r0, before the choices, and in the drain a reset follows each ``schedule()``
    while the workload allows one and the swarm has resets on (a campaign draws only
    a few choices per example, too few to draw an arrival, a schedule and a reset in
    that order, or two resets around a schedule, often enough).  A workload with pauses
    pauses in the drain too (``pause_pick``), for the same reason."""
    yield from first_events(w)
    if reset_heavy(w):
        yield from every_arrival(oracle)
    bounds = pick_bounds(w)
    for choice in choices:
        enabled = engine_reachable(w, oracle, oracle.enabled())
        if not enabled:
            return
        yield pick(enabled, choice, kinds, bounds)
    storm = reset_heavy(w) and (kinds is None or RESET_PREFIX_CACHE in kinds)
    previous: Event | None = None
    pausing = bool(w.pauses) and (kinds is None or RESET_PREFIX_CACHE in kinds)
    scheduled = False  # a schedule() ran since the last streaming input or pause (stream_pick)
    paused_now = False  # the last event paused a streaming session
    for drained in range(MAX_DRAIN):
        enabled = oracle.enabled()
        event = storm_pick(previous, enabled) if storm else None
        if paused_now:  # a reset while a session holds its blocks (findings_vllm.md V8; resets only under its switch)
            event = event or next((e for e in enabled if e.kind == RESET_PREFIX_CACHE), None)
        event = event or (pause_pick(previous, enabled, len(choices) + drained) if pausing else None)
        event = event or stream_pick(oracle, enabled, scheduled) or drain_pick(enabled)
        if event is None:
            return
        yield event
        previous = event
        paused_now = "stream_pause" in oracle.last_events()  # spec/events.py STREAM_PAUSE, just applied
        scheduled = event.kind == SCHEDULE or scheduled and event.kind not in STREAM_KINDS and not paused_now


def stream_pick(oracle: SpecTarget, enabled: Sequence[Event], scheduled: bool) -> Event | None:
    """The drain's input for a paused streaming session, once a ``schedule()`` has run since the
    last input or pause (``scheduled``: the waiting pass meets the paused session, its slot held),
    or when the engine has nothing to do."""
    counters = oracle.state.counters
    paused = [e for e in enabled if e.kind in STREAM_KINDS and e.req is not None
              and counters[e.req].status == rq.WAITING_FOR_STREAMING_REQ]
    idle = not any(e.kind in (SCHEDULE, DELIVER) for e in enabled)
    return paused[0] if paused and (idle or scheduled) else None


def every_arrival(oracle: SpecTarget) -> Iterator[Event]:
    """The arrivals still to come, in order, each enabled when yielded."""
    while (arrival := next((e for e in oracle.enabled() if e.kind == ADD_REQUEST), None)) is not None:
        yield arrival


def pause_pick(previous: Event | None, enabled: Sequence[Event], index: int) -> Event | None:
    """A pausing workload's drain: a pause, while the workload allows one, right after a
    ``schedule()`` (steps in flight, requests running or loading); its mode is the ``index``-th
    (the event's place in the example) of the modes enabled.  ``drain_pick`` resumes it."""
    if previous is None or previous.kind != SCHEDULE:
        return None
    pauses = [e for e in enabled if e.kind in PAUSE_KINDS]
    return pauses[index % len(pauses)] if pauses else None


def storm_pick(previous: Event | None, enabled: Sequence[Event]) -> Event | None:
    """A reset storm's drain: the reset, if one is enabled, right after a ``schedule()``."""
    if previous is None or previous.kind != SCHEDULE:
        return None
    return next((e for e in enabled if e.kind == RESET_PREFIX_CACHE), None)


class Divergence(AssertionError):
    """The target and the spec differ; carries the run up to the difference."""

    def __init__(self, result: RunResult) -> None:
        row = result.rows[-1]
        first = row.differences[0]
        super().__init__(
            f"event {row.index} '{row.event}': {first.field}: spec={first.expected!r} "
            f"target={first.actual!r}"
        )
        self.result = result
