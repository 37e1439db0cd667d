"""Fuzz replay files: the workload and events of a divergence (JSON), written atomically."""
from __future__ import annotations

import json
from dataclasses import fields
from pathlib import Path
from typing import Any

from asyncspec.checker.schema import annotation_schema, schema_problem
from asyncspec.checker.trace import read_json_file

from asyncspec.statemachine_tests.core.harness import (
    Event, RunResult, Workload, parse_event, workload_problem,
)
from asyncspec.statemachine_tests.core.workload import LIMITS, MAX_TOKENS

REPLAY_VERSION = 1


def replay_json(result: RunResult, target: str) -> dict[str, Any]:
    """The replay file: workload and events (JSON), plus the differences seen."""
    row = result.rows[-1]
    return {
        "asyncspec_fuzz_replay": REPLAY_VERSION,
        "target": target,
        "workload": result.workload.to_json(),
        "events": [str(r.event) for r in result.rows],
        "divergence": {
            "event": row.index,
            "differences": [{"field": d.field, "spec": _jsonable(d.expected), target: _jsonable(d.actual)}
                            for d in row.differences],
        },
    }


def _jsonable(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str))


def save_replay(result: RunResult, target: str, path: Path) -> None:
    """Save a divergence's replay file, then its page (``SAVE_HOOKS``), Ctrl-C held until both are written;
    ``WriteError`` (one line) if the file cannot be written."""
    from asyncspec.checker.atomic import signals_held, write_atomically
    from asyncspec.checker.trace import run_save_hooks

    with signals_held():
        write_atomically(path, json.dumps(replay_json(result, target), indent=2) + "\n")
        run_save_hooks(path)


def workload_schema() -> dict[str, Any]:
    """The closed JSON Schema of a replay file's ``workload`` (``Workload.to_json``)."""
    integer: dict[str, Any] = {"type": "integer"}
    tokens: dict[str, Any] = {"type": "integer", "maximum": MAX_TOKENS, "x-hint": "a token count"}
    props: dict[str, Any] = {
        "requests": {"type": "array", "minItems": 1, "items": {
            "type": "array", "items": tokens, "minItems": 2, "maxItems": 3,
            "x-hint": "each request is [prompt_len, max_tokens] or [prompt_len, max_tokens, eos_position]"}},
        "stale_mode": {"enum": ["deliver", "drop"]},
        "loop": {"enum": ["exact", "free"]},
        "structured_output": {"type": "array", "items": integer},
        "skip_reading": {"type": "array", "items": integer},
        "remote_loads": {"type": "array", "items": integer},
        "remote_sends": {"type": "array", "items": integer},
        "kv_load_failure_policy": {"enum": ["recompute", "fail"]},
        "kv_connector": {"enum": ["", "toy", "nixl", "offloading"]},
        "policy": {"enum": ["fcfs", "priority"]},
        "priorities": {"type": "array", "items": integer},
        "resumable": {"type": "array", "items": integer},
        "stream_updates": {"type": "array", "items": {
            "type": "array", "items": tokens, "minItems": 2, "maxItems": 2,
            "x-hint": "each update is [new prompt tokens, max_tokens]"}},
        "mamba_cache_mode": {"enum": ["", "none", "align"]},
        "images": {"type": "array", "items": {
            "type": "array", "items": tokens, "minItems": 4, "maxItems": 4,
            "x-hint": "each image is [request, offset, length, item]"}},
        "stops": {"type": "array", "items": {
            "type": "array", "items": tokens, "minItems": 7, "maxItems": 7,
            "x-hint": "each stop is [request, kind, min_tokens, min_pattern_size, max_pattern_size, min_count, "
                      "pattern_len]"}},
    }
    for f in fields(Workload):
        if f.name not in props:
            props[f.name] = annotation_schema(str(f.type)) or integer  # bool, int, str, Literal, tuple
    for key, (lowest, highest, why) in LIMITS.items():  # what the spec and the engines can hold
        props[key] = props[key] | {"minimum": lowest, "maximum": highest, "x-hint": why}
    return {"type": "object", "properties": props, "required": ["requests"], "additionalProperties": False}


def replay_schema() -> dict[str, Any]:
    """A fuzz replay file's closed JSON Schema (``replay_json``, plus the vllm-engine target's keys)."""
    return {
        "type": "object",
        "required": ["asyncspec_fuzz_replay", "workload", "events"],
        "properties": {
            "asyncspec_fuzz_replay": {"type": "integer", "const": REPLAY_VERSION},
            "target": {"type": "string"},
            "workload": workload_schema(),
            "events": {"type": "array", "items": {"type": "string"}},
            "divergence": {"type": "object"},
            "case": {"type": ["object", "null"]},  # vllm-engine files: the engine case,
            "engine_events": {"type": "array", "items": {"type": "string"}},  # its events
            "worker": {"type": "object"},  # and the worker column
        },
        "additionalProperties": False,
    }


def replay_problem(data: Any) -> str | None:
    """Why ``data`` is not a usable fuzz replay file (one line), or None."""
    return schema_problem(data, replay_schema())


class ReplayError(ValueError):
    """A replay file that cannot be read (one line)."""


def read_replay_json(path: Path) -> dict[str, Any]:
    """The JSON object of a replay file; ``ReplayError`` (one line) if unreadable or not an object."""
    data = read_json_file(path, ReplayError)
    if not isinstance(data, dict):
        raise ReplayError(f"{path} is not an asyncspec fuzz replay file (version {REPLAY_VERSION})")
    return data


def load_replay(path: Path) -> tuple[Workload, list[Event]]:
    """The workload and events of a replay file; ``ReplayError`` if unusable."""
    data = read_replay_json(path)
    if data.get("asyncspec_fuzz_replay") != REPLAY_VERSION:
        raise ReplayError(f"{path} is not an asyncspec fuzz replay file (version {REPLAY_VERSION})")
    problem = replay_problem(data)
    if problem:
        raise ReplayError(f"corrupt replay file {path}: {problem}")
    try:
        w = Workload.from_json(data["workload"])
        events = [parse_event(str(e)) for e in data["events"]]
    except (KeyError, TypeError, ValueError) as exc:
        raise ReplayError(f"corrupt replay file {path}: {exc}".splitlines()[0]) from exc
    problem = workload_problem(w)
    if problem:
        raise ReplayError(f"corrupt replay file {path}: {problem}")
    return w, events


def out_dir_problem(out_dir: Path) -> str | None:
    """Why a divergence's replay file could not be written to ``out_dir`` (checked before a campaign,
    so a divergence is never found and then lost), or None."""
    from asyncspec.checker.atomic import folder_problem

    return folder_problem(out_dir, "--out-dir")
