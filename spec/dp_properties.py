"""What must hold of data parallelism's waves (``spec/dp.py``): *always* and *eventually*.

*Always* (every reachable state):

* ``dp_lockstep_syncs`` — when every rank is in the all-reduce, they are at the same
  ``step_counter`` and the same ``current_wave``: the ranks' forward passes line up.
* ``dp_stopped_ranks_idle`` — a rank that stopped stepping (``engines_running`` false) has no
  unfinished request: no sync ends a wave while some rank still has work.
* ``dp_dummy_only_without_work`` — a rank's last pass was a dummy batch only if it has no work.

*Eventually* (decided on the explored graph):

* ``dp_wave_completes`` — every run that adds no more work ends with every rank idle, every
  request done and nothing in transit (a terminal state otherwise is a rank stuck in the
  all-reduce, waiting for a rank that never steps);
* ``no_livelock`` — no reachable cycle (the ranks cannot step forever).
"""
from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

from asyncspec.spec.dp import DPConfig, DPState


class DPAlways(NamedTuple):
    """One *always* property: its name, what it says, and its check (a message when violated)."""

    name: str
    doc: str
    check: Callable[[DPConfig, DPState], str | None]


def _lockstep(cfg: DPConfig, s: DPState) -> str | None:
    if not all(r.at_sync for r in s.ranks):
        return None
    seen = {(r.step_counter, r.current_wave) for r in s.ranks}
    if len(seen) > 1:
        text = ", ".join(f"rank{i} at step {r.step_counter} of wave {r.current_wave}" for i, r in enumerate(s.ranks))
        return f"the ranks meet in the all-reduce out of step: {text}"
    return None


def _stopped_idle(cfg: DPConfig, s: DPState) -> str | None:
    for i, r in enumerate(s.ranks):
        if not r.running and r.work > 0:
            return f"rank{i} stopped stepping with {r.work} step(s) of unfinished requests"
    return None


def _dummy_without_work(cfg: DPConfig, s: DPState) -> str | None:
    for i, r in enumerate(s.ranks):
        if r.last_batch == "dummy" and r.work > 0:
            return f"rank{i} ran a dummy batch with {r.work} step(s) of work"
    return None


DP_ALWAYS: tuple[DPAlways, ...] = (
    DPAlways("dp_lockstep_syncs", "ranks meet in the all-reduce at the same step of the same wave", _lockstep),
    DPAlways("dp_stopped_ranks_idle", "a rank stops stepping only without unfinished requests", _stopped_idle),
    DPAlways("dp_dummy_only_without_work", "a dummy batch only on a rank without work", _dummy_without_work),
)
DP_EVENTUALLY = ("dp_wave_completes", "no_livelock")
DP_PROPERTIES = tuple(p.name for p in DP_ALWAYS) + DP_EVENTUALLY


def unfinished_wave(cfg: DPConfig, s: DPState) -> str | None:
    """Why terminal state ``s`` is not the end of every wave, or None where it is."""
    if s.sent < len(cfg.requests):
        return f"request r{s.sent} was never sent"
    for i, r in enumerate(s.ranks):
        if r.at_sync:
            idle = [f"rank{j}" for j, q in enumerate(s.ranks) if not q.at_sync]
            return f"rank{i} waits in the all-reduce at step {r.step_counter} for {', '.join(idle)}, which never steps"
        if r.running or r.work:
            return f"rank{i} is still running with {r.work} step(s) of work"
        if r.inbox:
            return f"rank{i} never read its START_DP_WAVE messages"
    return None
