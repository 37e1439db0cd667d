"""A checker trace (``checker/trace.py``) as the explorer's view: one column per step.

A livelock is shown as a lasso: the path to a state on a cycle, then the
cycle back to it (``loop_start`` is the step the last state equals).  A file
that names its loop (``"loop_start": k``) is taken as written; a
``no_livelock`` trace without one gets its cycle found here, by a bounded
search from its last state.
"""
from __future__ import annotations

from typing import Any

from asyncspec.checker.loop_search import path_back
from asyncspec.checker.trace import Trace, TraceError
from asyncspec.spec import engine, request as rq
from asyncspec.spec.config import SpecConfig
from asyncspec.spec.engine import Action
from asyncspec.spec.properties import ALL_ALWAYS
from asyncspec.spec.state import EngineState, Step, request_name

from asyncspec.explorer.spec_info import action_info, property_info

COUNTERS = ("N", "C", "H", "F", "X")
LOOP_SEARCH_LIMIT = 20_000  # states searched for a livelock's cycle before giving up

Row = tuple[Action | None, EngineState, frozenset[str]]


def request_cells(s: EngineState, i: int) -> dict[str, Any]:
    """One lane's cell: status and the five counters of ``spec/request.py``."""
    p, c = s.params[i], s.counters[i]
    return {"status": rq.STATUS_NAMES[c.status], "N": rq.num_tokens(p, c), "C": c.num_computed_tokens,
            "H": c.num_output_placeholders, "F": c.num_in_flight_tokens, "X": c.num_stale_output_tokens,
            "blocks": " ".join(map(str, s.block_tables[i])) or "-"}


def step_entries(step: Step | None) -> list[dict[str, Any]]:
    """A ``SchedulerOutput`` of the batch queue, entry by entry."""
    if step is None:
        return []
    return [{"request": request_name(e.req), "tokens": e.num_tokens,
             "samples": e.sampled_position or "chunk", "drafts": e.num_drafts,
             "writes blocks": " ".join(map(str, e.written_blocks)) or "-"} for e in step.entries]


def _step_text(step: Step) -> str:
    if not step.entries:
        return "[∅]"
    return "[" + " ".join(f"{request_name(e.req)}:{e.num_tokens}" + (f"@{e.sampled_position}" if e.sampled_position
                                                                      else "") for e in step.entries) + "]"


def engine_cells(cfg: SpecConfig, s: EngineState) -> dict[str, str]:
    """The batch queue and the block pool beside the lanes."""
    cells = {"batch queue": " ".join(_step_text(st) for st in s.batch_queue) or "-",
             "free blocks": " ".join(map(str, s.free_blocks)) or "-",
             "waiting": " ".join(request_name(r) for r in s.waiting) or "-",
             "running": " ".join(request_name(r) for r in s.running) or "-"}
    if s.deferred_step is not None:
        cells["sampling deferred"] = _step_text(s.deferred_step)
    if cfg.defer_block_free:
        cells["Q/R"] = f"{s.sched_step_seq}/{s.processed_step_seq}"
        cells["parked"] = " ".join(f"{e.fence}:{list(e.evict_first + e.evict_last)}" for e in s.deferred_frees) or "-"
    return cells


def _scheduled(action: Action | None, before: EngineState | None, after: EngineState) -> dict[str, Any]:
    """What the step scheduled (a new ``SchedulerOutput``) or processed (the oldest one)."""
    if action is None or before is None:
        return {}
    if action.name == engine.SCHEDULE:
        new = after.batch_queue[-1] if len(after.batch_queue) > len(before.batch_queue) else after.deferred_step
        return {"scheduled": step_entries(new)}
    if action.name == engine.UPDATE_FROM_OUTPUT and before.batch_queue:
        return {"processed": step_entries(before.batch_queue[0]),
                "accepted drafts": list(action.accepted)}
    return {}


def first_violation(cfg: SpecConfig, rows: list[Row], name: str | None) -> tuple[int, str] | None:
    """The first step at which always-property ``name`` fails, with its message."""
    if name is None or name not in ALL_ALWAYS:
        return None
    prop = ALL_ALWAYS[name]
    for k, (_, s, _) in enumerate(rows):
        message = prop.check(cfg, s)
        if message is not None:
            return k, message
    return None


def find_loop(cfg: SpecConfig, start: EngineState) -> list[Action] | None:
    """The shortest path of actions from ``start`` back to ``start`` (bounded search)."""
    return path_back(start, lambda s: [(t.state, t.action) for t in engine.next_states(cfg, s)], LOOP_SEARCH_LIMIT)


def lasso(trace: Trace, rows: list[Row], loop_start: int | None) -> tuple[list[Row], int | None]:
    """The rows of a lasso and the step its last state returns to (``None``: not a lasso)."""
    if loop_start is not None:
        if not 0 <= loop_start < len(rows) - 1 or rows[loop_start][1] != rows[-1][1]:
            raise TraceError(f"loop_start {loop_start}: the last state is not the state of that step")
        return rows, loop_start
    last = rows[-1][1]
    for k, (_, s, _) in enumerate(rows[:-1]):
        if s == last:
            return rows, k
    if trace.violated != "no_livelock":
        return rows, None
    loop = find_loop(trace.config, last)
    if loop is None:
        return rows, None
    closed = Trace(trace.config, trace.eos_positions, trace.actions + loop, trace.violated)
    return closed.states(), len(rows) - 1


def checker_view(trace: Trace, title: str, loop_start: int | None = None) -> dict[str, Any]:
    """The explorer's view of a checker trace (raises ``TraceError`` if it does not replay)."""
    cfg = trace.config
    rows, loop = lasso(trace, trace.states(), loop_start)
    n = len(rows[0][1].params)
    requests = [{"name": request_name(i), "params": _params(rows[0][1], i)} for i in range(n)]
    steps = []
    for k, (action, s, events) in enumerate(rows):
        before = rows[k - 1][1] if k else None
        steps.append({"index": k, "action": str(action) if action else "init", "events": sorted(events),
                      "lanes": {request_name(i): request_cells(s, i) for i in range(n)},
                      "engine": engine_cells(cfg, s), "detail": _scheduled(action, before, s),
                      "spec": action_info(action.name) if action else None})
    return {"kind": "lasso" if loop is not None else "checker", "title": title,
            "config": {"name": cfg.name, "description": cfg.description, "depth": cfg.batch_queue_depth,
                       "blocks": cfg.num_blocks, "budget": cfg.token_budget},
            "requests": requests, "counters": list(COUNTERS), "steps": steps, "loop_start": loop,
            "violated": _violated(cfg, trace, rows, loop), "side": None, "extra": {}}


def _params(s: EngineState, i: int) -> str:
    p = s.params[i]
    return f"P={p.num_prompt_tokens} M={p.max_tokens} eos={p.eos_position or 'never'}"


def _violated(cfg: SpecConfig, trace: Trace, rows: list[Row], loop: int | None) -> dict[str, Any] | None:
    if trace.violated is None:
        return None
    info = property_info(trace.violated)
    hit = first_violation(cfg, rows, trace.violated)
    if hit is not None:
        info.update(step=hit[0], message=hit[1])
    elif loop is not None:
        info.update(step=len(rows) - 1, message=f"the engine cycles forever: back to step {loop}")
    else:
        info.update(step=len(rows) - 1, message="shown at the last state")
    return info
