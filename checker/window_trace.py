"""Monitor window traces: a spec state, the actions that followed it, and what the engine showed.

The live monitor (``monitor/``) cannot replay an engine's whole life from the
initial state: it keeps a bounded window of recent steps.  Its replay file is
the spec state at the start of the window (``EngineState`` as JSON), the
window's actions, and, at the divergence, the engine's values for the fields
that differed.  ``replay_window`` re-executes the actions on the spec,
re-checks every always-property in every state, and compares the final state
with the recorded engine values: any failure is a confirmed divergence.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from asyncspec.spec import engine
from asyncspec.spec.config import MAX_RESETS, ConfigError, SpecConfig
from asyncspec.spec.engine import Action, parse_action
from asyncspec.spec.properties import always_for
from asyncspec.spec.request import RequestCounters, RequestParams
from asyncspec.spec.state import BlockHash, DeferredFree, EngineState, Step, StepEntry

from asyncspec.checker.trace import TraceError, read_json_file, write_atomically

WINDOW_VERSION = 1
WINDOW_KEY = "asyncspec_monitor_window"


# ---------------------------------------------------------------- EngineState <-> JSON


def _step_json(step: Step) -> list[Any]:
    return [[list(e[:3]) + [list(e.written_blocks)] + list(e[4:]) for e in step.entries], step.seq]


def _step_of(data: Any) -> Step:
    entries = tuple(StepEntry(e[0], e[1], e[2], tuple(e[3]), *e[4:]) for e in data[0])
    return Step(entries, int(data[1]))


def state_to_json(s: EngineState) -> dict[str, Any]:
    """A plain-JSON form of ``s`` (named tuples as positional lists)."""
    return {
        "params": [list(p) for p in s.params],
        "counters": [list(c) for c in s.counters],
        "block_tables": [list(t) for t in s.block_tables],
        "waiting": list(s.waiting),
        "running": list(s.running),
        "batch_queue": [_step_json(st) for st in s.batch_queue],
        "deferred_step": None if s.deferred_step is None else _step_json(s.deferred_step),
        "free_blocks": list(s.free_blocks),
        "block_hashes": [None if h is None else list(h) for h in s.block_hashes],
        "deferred_frees": [[d.fence, list(d.evict_first), list(d.evict_last)] for d in s.deferred_frees],
        "scalars": [s.sched_step_seq, s.processed_step_seq, s.finished_pending, s.forced_preemptions_left,
                    s.call_in_progress],
    }


def state_from_json(data: Any) -> EngineState:
    """Inverse of ``state_to_json``; ``TraceError`` (one line) on a malformed state."""
    try:
        seq, processed, pending, forced, in_call = data["scalars"]
        return EngineState(
            params=tuple(RequestParams(*p) for p in data["params"]),
            counters=tuple(RequestCounters(*c) for c in data["counters"]),
            block_tables=tuple(tuple(t) for t in data["block_tables"]),
            waiting=tuple(data["waiting"]),
            running=tuple(data["running"]),
            batch_queue=tuple(_step_of(st) for st in data["batch_queue"]),
            deferred_step=None if data["deferred_step"] is None else _step_of(data["deferred_step"]),
            free_blocks=tuple(data["free_blocks"]),
            block_hashes=tuple(None if h is None else BlockHash(*h) for h in data["block_hashes"]),
            deferred_frees=tuple(DeferredFree(d[0], tuple(d[1]), tuple(d[2])) for d in data["deferred_frees"]),
            sched_step_seq=int(seq), processed_step_seq=int(processed), finished_pending=bool(pending),
            forced_preemptions_left=int(forced), call_in_progress=bool(in_call),
        )
    except (KeyError, TypeError, ValueError, IndexError) as exc:
        raise TraceError(f"corrupt monitor window: bad start state ({exc})") from exc


# ---------------------------------------------------------------- the trace kind


@dataclass
class WindowTrace:
    """A monitor window: start state, actions, and the engine's values at the divergence.

    ``engine_values``: per differing field, ``{"field", "spec", "engine"}`` as the
    monitor saw it; ``replay_window`` recomputes the spec side and compares.
    """

    config: SpecConfig
    start: EngineState
    actions: list[Action]
    engine_values: list[dict[str, Any]] = field(default_factory=list)
    message: str = ""
    meta: dict[str, Any] = field(default_factory=dict)  # vLLM request ids per index, step numbers

    def to_json(self) -> dict[str, Any]:
        from asyncspec.checker.configs import config_to_dict

        return {
            WINDOW_KEY: WINDOW_VERSION,
            "message": self.message,
            "config": config_to_dict(self.config),
            "start_state": state_to_json(self.start),
            "actions": [str(a) for a in self.actions],
            "engine_values": self.engine_values,
            "meta": self.meta,
        }

    @classmethod
    def from_json(cls, data: Any) -> WindowTrace:
        if not is_window(data):
            raise TraceError(f"not an asyncspec monitor window (version {WINDOW_VERSION})")
        from asyncspec.checker.schema import schema_problem

        problem = schema_problem(data, window_schema())
        if problem:
            raise TraceError(f"corrupt monitor window: {problem}")
        try:
            cfg = lifted_config(data["config"])
            actions = [parse_action(str(a)) for a in data["actions"]]
            values = list(data.get("engine_values", []))
            start = state_from_json(data["start_state"])
        except (KeyError, TypeError, ValueError, AttributeError, IndexError) as exc:
            text = str(exc) if isinstance(exc, TraceError) else f"corrupt monitor window: {exc}"
            raise TraceError(text.splitlines()[0]) from exc
        if len(start.params) != len(cfg.requests):
            raise TraceError("corrupt monitor window: the start state and the config name different requests")
        return cls(cfg, start, actions, values, str(data.get("message", "")), dict(data.get("meta", {})))


WINDOW_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": [WINDOW_KEY, "config", "start_state", "actions"],
    "additionalProperties": False,
    "properties": {
        WINDOW_KEY: {"type": "integer", "const": WINDOW_VERSION}, "message": {"type": "string"},
        "config": {"type": "object"}, "start_state": {"type": "object"},
        "actions": {"type": "array", "items": {"type": "string"}},
        "engine_values": {"type": "array", "items": {"type": "object"}}, "meta": {"type": "object"},
    },
}
"""A monitor window file's top level (``WindowTrace.to_json``); the config is checked by ``lifted_config``."""


def _tuple_schema(kind: type, schemas: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """A named tuple as a JSON list: one schema per field from its annotation, the defaulted ones optional."""
    def name(annotation: Any) -> str:  # a string, a ForwardRef or a TypeVar (RequestParams' Int, Bool)
        text = getattr(annotation, "__forward_arg__", annotation)
        return (text if isinstance(text, str) else str(getattr(text, "__name__", text))).split("[")[0]

    hints = [schemas[name(kind.__annotations__[f])] for f in kind._fields]  # type: ignore[attr-defined]
    defaults = len(getattr(kind, "_field_defaults", {}))
    return {"type": "array", "prefixItems": hints, "items": False, "minItems": len(hints) - defaults}


def state_schema() -> dict[str, Any]:
    """The closed JSON Schema of a start state (``state_to_json``), down to every request and step entry."""
    integer: dict[str, Any] = {"type": "integer"}
    boolean: dict[str, Any] = {"type": "boolean"}
    ints: dict[str, Any] = {"type": "array", "items": integer}
    by_kind: dict[str, dict[str, Any]] = {"Int": integer, "Bool": boolean, "int": integer, "bool": boolean, "tuple": ints}
    entry = _tuple_schema(StepEntry, by_kind)
    step = {"type": "array", "prefixItems": [{"type": "array", "items": entry}, integer], "items": False,
            "minItems": 2}
    per_request = {"type": "array", "items": {"type": "array", "items": integer}}
    props: dict[str, Any] = {
        "params": {"type": "array", "items": _tuple_schema(RequestParams, by_kind)},
        "counters": {"type": "array", "items": _tuple_schema(RequestCounters, by_kind)},
        "block_tables": per_request, "waiting": ints, "running": ints, "free_blocks": ints,
        "batch_queue": {"type": "array", "items": step}, "deferred_step": {"anyOf": [step, {"type": "null"}]},
        "block_hashes": {"type": "array", "items": {"anyOf": [{"type": "null"}, {
            "type": "array", "prefixItems": [integer, integer], "items": False, "minItems": 2}]}},
        "deferred_frees": {"type": "array", "items": {"type": "array", "prefixItems": [integer, ints, ints],
                                                      "items": False, "minItems": 3}},
        "scalars": {"type": "array", "prefixItems": [integer, integer, boolean, integer, boolean], "items": False,
                    "minItems": 5},
    }
    return {"type": "object", "properties": props, "required": sorted(props), "additionalProperties": False}


def window_schema() -> dict[str, Any]:
    """A monitor window file's closed JSON Schema: the top level (``WINDOW_SCHEMA``), every request of its
    config (``config_from_dict`` checks the rest of it) and its start state (``state_schema``)."""
    from asyncspec.checker.configs import config_schema

    config = config_schema()["properties"]
    requests = {"type": "array", "items": config["requests"]["items"], "minItems": 1,
                "x-hint": "a list of [prompt_len, max_tokens] pairs"}
    props = WINDOW_SCHEMA["properties"] | {
        "config": {"type": "object", "properties": {"requests": requests, "eos_positions": config["eos_positions"]},
                   "required": ["requests"]},
        "start_state": state_schema()}
    return WINDOW_SCHEMA | {"properties": props}


def is_window(data: Any) -> bool:
    return isinstance(data, dict) and bool(data.get(WINDOW_KEY) == WINDOW_VERSION)


def lifted_config(data: dict[str, Any]) -> SpecConfig:
    """``config_from_dict`` for a live engine's config: ``SpecConfig`` bounds the number of
    requests for exhaustive checking, not for replay; it validates the first request and
    then gets them all (as ``statemachine_tests/scheduler/spec_target.spec_config`` does)."""
    from asyncspec.checker.configs import config_from_dict

    requests, eos = data.get("requests"), data.get("eos_positions")
    if not isinstance(requests, list) or not requests:
        raise ConfigError("monitor window: 'requests' must be a non-empty list")
    resets = data.get("forced_preemptions", 0)  # the monitor's "unlimited" (MAX_RESETS), over a file's limit
    if not isinstance(resets, int) or isinstance(resets, bool) or not 0 <= resets <= MAX_RESETS:
        raise ConfigError(f"monitor window: 'forced_preemptions' must be 0..{MAX_RESETS} (got {resets!r})")
    head = dict(data, requests=requests[:1], eos_positions=eos[:1] if isinstance(eos, list) else eos,
                forced_preemptions=min(resets, 1))
    cfg = config_from_dict(head, origin="monitor window")
    object.__setattr__(cfg, "forced_preemptions", resets)
    object.__setattr__(cfg, "requests", tuple(tuple(int(x) for x in r) for r in requests))
    if isinstance(eos, list):
        object.__setattr__(cfg, "eos_positions", tuple(tuple(int(x) for x in e) for e in eos))
    return cfg


def save_window(trace: WindowTrace, path: Path) -> None:
    write_atomically(path, json.dumps(trace.to_json(), indent=1) + "\n")


def load_window(path: Path) -> WindowTrace:
    return WindowTrace.from_json(read_json_file(path, TraceError))


def replay_window(trace: WindowTrace) -> list[str]:
    """Re-execute the window on the spec: one line per failure (empty: the spec agrees).

    Failures: an action the spec does not enable (the engine's loop left the
    spec's), an always-property violated in a state of the window, and a field
    of the final state whose spec value differs from the engine's recorded one.
    """
    from asyncspec.checker.window_fields import spec_payload, spec_value

    cfg, s = trace.config, trace.start
    previous = frozenset(int(r) for r in trace.meta.get("previous_step", []))
    payload: tuple[Any, ...] = ()
    failures = _properties(cfg, s, 0)
    for i, action in enumerate(trace.actions, start=1):
        if action not in engine.enabled_actions(cfg, s):
            return failures + [f"step {i}: the engine did '{action}', which the spec does not enable here"]
        before = s
        s, _ = engine.apply(cfg, s, action)
        payload = ()
        if action.name == engine.SCHEDULE:
            payload = spec_payload(before, s, previous)
            previous = frozenset(e[0] for e in payload)
        elif action.name == engine.RESET_PREFIX_CACHE:
            previous = frozenset()
        failures += _properties(cfg, s, i)
    for v in trace.engine_values:
        name = str(v.get("field", ""))
        spec = spec_value(s, name, payload)
        if spec != v.get("engine"):
            failures.append(f"after step {len(trace.actions)}: {name}: spec={spec!r} engine={v.get('engine')!r}")
    return failures


def _properties(cfg: SpecConfig, s: EngineState, step: int) -> list[str]:
    out = []
    for prop in always_for(cfg):
        message = prop.check(cfg, s)
        if message is not None:
            out.append(f"step {step}: {prop.name}: {message}")
    return out
