"""The fields a monitor compares, named and computed from spec states alone.

A field name is one of ``waiting``, ``running``, ``num_free_blocks``,
``free_blocks``, ``sched_step_seq``, ``processed_step_seq``,
``num_in_flight_steps``, ``payload`` (after a ``schedule``), or
``rN.<counter>`` for request N: ``status`` (a name), ``block_table`` or a
``RequestCounters`` field.  The monitor (``monitor/``) reads the engine's
value of the same name from vLLM; ``window_trace.replay_window`` recomputes
the spec's.

The payload is ``statemachine_tests/scheduler/payload.py``'s without token contents:
``(req, kind, num_computed_tokens, len(token_ids), spec block ids)``, the
history length being ``P + O`` when the worker must rebuild the request
(``Scheduler._make_cached_request_data``: not scheduled in the previous step).
"""
from __future__ import annotations

from collections.abc import Collection
from typing import Any

from asyncspec.spec import request as rq
from asyncspec.spec.state import EngineState

NEW, RESUMED, RUNNING = "new", "resumed", "running"

PayloadEntry = tuple[int, str, int, int, tuple[int, ...]]


def spec_payload(before: EngineState, after: EngineState,
                 previous_step: Collection[int]) -> tuple[PayloadEntry, ...]:
    """The payload of the ``schedule`` from ``before`` to ``after``."""
    step = after.deferred_step if after.deferred_step is not None else after.batch_queue[-1]
    out: list[PayloadEntry] = []
    for e in step.entries:
        req, status = e.req, before.counters[e.req].status
        computed = after.counters[req].num_computed_tokens - e.num_tokens
        blocks = after.block_tables[req]
        p = after.params[req]
        if status == rq.WAITING:
            out.append((req, NEW, computed, p.num_prompt_tokens, blocks))
            continue
        kind = RESUMED if status == rq.PREEMPTED else RUNNING
        history = p.num_prompt_tokens + before.counters[req].num_output_tokens if req not in previous_step else 0
        out.append((req, kind, computed, history, blocks[len(before.block_tables[req]):]))
    return tuple(sorted(out))


def spec_value(s: EngineState, name: str, payload: tuple[PayloadEntry, ...] = ()) -> Any:
    """The spec's value of field ``name`` in ``s`` (JSON-comparable: lists, not tuples)."""
    if name.startswith("r") and "." in name:
        head, attr = name.split(".", 1)
        return _request_value(s, int(head[1:]), attr)
    values: dict[str, Any] = {
        "waiting": s.waiting, "running": s.running, "num_free_blocks": len(s.free_blocks),
        "free_blocks": s.free_blocks, "sched_step_seq": s.sched_step_seq,
        "processed_step_seq": s.processed_step_seq,
        "num_in_flight_steps": len(s.batch_queue) + (s.deferred_step is not None),
        "payload": payload,
    }
    if name not in values:
        return f"<unknown field {name}>"
    return as_json(values[name])


def _request_value(s: EngineState, req: int, attr: str) -> Any:
    if not 0 <= req < len(s.counters):
        return None
    c = s.counters[req]
    if attr == "status":
        return rq.STATUS_NAMES[c.status]
    if attr == "block_table":
        return as_json(s.block_tables[req])
    if attr in c._fields:
        return as_json(getattr(c, attr))
    return f"<unknown field {attr}>"


def as_json(value: Any) -> Any:
    """Tuples as lists, bools kept, recursively: what a JSON round trip gives."""
    if isinstance(value, (tuple, list)):
        return [as_json(v) for v in value]
    return value
