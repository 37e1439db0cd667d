"""``asyncspec replay FILE --target torch``: re-run a torch divergence file.

The file (``oracle.replay_json``, written by ``fuzz --target torch``) holds the
workload, the worker strategy and the depths; the replay runs the workload
again at every depth and applies the oracle: exit 1 if it still diverges, 0
if it no longer does (said plainly), 2 if the file is unusable.  Files written
before the version field (``workload``, ``strategy``, ``problems``) replay too.
"""
from __future__ import annotations

import json
import sys
from dataclasses import fields
from pathlib import Path
from typing import Any, get_args

from asyncspec.spec.config import LIMITS
from asyncspec.checker.schema import (
    JSON_SCHEMA_VERSION, MAX_INTEGER, InputLimitError, annotation_schema, loads_json, schema_problem,
)
from asyncspec.engine.torch.torch_engine import ENGINE_BUGS, Workload, default_model
from asyncspec.engine.torch.torch_oracle import (
    EXIT_DIVERGENCE, EXIT_OK, EXIT_USAGE, FUZZ_MODEL, TORCH_REPLAY, check_workload,
)
from asyncspec.engine.torch.torch_worker import Strategy


class TorchReplayError(ValueError):
    """A torch replay file that cannot be used (one line)."""


def _tuples(value: Any) -> Any:
    return tuple(_tuples(v) for v in value) if isinstance(value, list) else value


MAX_TICK = 100_000
"""The engine tick an arrival, an abort or a reset may name (a workload runs a few hundred)."""


def replay_schema() -> dict[str, Any]:
    """The closed JSON Schema of a torch replay file (``oracle.replay_json``), down to every request: token ids
    below the fuzz model's vocabulary, each request within its positions, the engine within ``LIMITS``."""
    def ranged(lowest: int, highest: int, why: str) -> dict[str, Any]:
        return {"type": "integer", "minimum": lowest, "maximum": highest, "x-hint": why}
    positions, tick = FUZZ_MODEL.max_position, ranged(0, MAX_TICK, "an engine tick")
    ticks = {"type": "array", "items": tick, "maxItems": 1024}
    workload: dict[str, Any] = {
        "prompts": {"type": "array", "minItems": 1, "maxItems": 64, "items": {
            "type": "array", "minItems": 1, "maxItems": positions - 1,
            "items": ranged(0, FUZZ_MODEL.vocab_size - 1, "a token id of the fuzz model")}},
        "max_tokens": {"type": "array", "minItems": 1, "maxItems": 64, "items": ranged(1, positions - 1, "a token count")},
        "arrivals": ticks, "resets": ticks,
        "aborts": {"type": "array", "maxItems": 1024, "items": {
            "type": "array", "prefixItems": [tick, ranged(0, 63, "a request index")], "minItems": 2, "maxItems": 2}},
        "stale_mode": {"enum": ["deliver", "drop"]}}
    for f in fields(Workload):
        workload.setdefault(f.name, annotation_schema(str(f.type)))
    for key, (lowest, highest, why) in LIMITS.items():
        if key in workload:
            workload[key] = workload[key] | {"minimum": lowest, "maximum": highest, "x-hint": why}
    return {"type": "object", "additionalProperties": False, "required": ["strategy", "workload"], "properties": {
        "asyncspec_torch_replay": {"type": "integer", "const": TORCH_REPLAY}, "target": {"const": "torch"},
        "seed": ranged(0, MAX_INTEGER, "a seed"), "example": ranged(0, MAX_INTEGER, "an example number"),
        "workload": {"type": "object", "properties": workload, "required": ["prompts", "max_tokens"],
                     "additionalProperties": False},
        "strategy": {"enum": list(get_args(Strategy))},
        "depths": {"type": "array", "minItems": 1, "maxItems": 3, "items": ranged(1, 3, "a batch queue depth")},
        "bug": {"enum": [None, *ENGINE_BUGS]}, "problems": {"type": "array", "items": {"type": "string"}}}}


def _workload_problem(w: dict[str, Any]) -> str | None:
    """What the schema cannot say: each request within the model's positions, aborts naming a request."""
    longest = FUZZ_MODEL.max_position
    for i, (prompt, m) in enumerate(zip(w["prompts"], w["max_tokens"])):
        if len(prompt) + m > longest:
            return f"'workload' request r{i}: prompt and max_tokens ({len(prompt)} + {m}) exceed the model's {longest} positions"
    bad = next((i for i, (_, req) in enumerate(w.get("aborts", [])) if req >= len(w["prompts"])), None)
    return None if bad is None else f"'workload.aborts[{bad}]' names a request the workload does not have"


def load_torch_replay(path: Path) -> tuple[Workload, Strategy, tuple[int, ...], str | None]:
    """(workload, strategy, depths, seeded bug) of a torch replay file, checked against ``replay_schema``."""
    try:
        data = loads_json(path.read_text())
    except OSError as exc:
        raise TorchReplayError(f"cannot read {path}: {exc.strerror}") from exc
    except InputLimitError as exc:
        raise TorchReplayError(f"{path}: {exc}; give a file fuzz --target torch wrote") from exc
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise TorchReplayError(f"{path} is not a JSON file (give a file fuzz --target torch wrote)") from exc
    if not isinstance(data, dict) or not isinstance(data.get("workload"), dict) or "strategy" not in data:
        raise TorchReplayError(f"{path} is not a torch fuzz replay file (no workload and strategy)")
    if data.get("asyncspec_torch_replay", TORCH_REPLAY) != TORCH_REPLAY:
        raise TorchReplayError(f"{path}: torch replay version {str(data['asyncspec_torch_replay'])[:20]!r} "
                               f"(this asyncspec reads {TORCH_REPLAY})")
    problem = schema_problem(data, replay_schema()) or _workload_problem(data["workload"])
    if problem:
        raise TorchReplayError(f"{path}: {problem}")
    strategy = data["strategy"]
    depths = data.get("depths", [1, 2] if strategy == "v1" else [1, 2, 3])
    try:
        workload = Workload(**{k: _tuples(v) for k, v in data["workload"].items()})
    except (TypeError, ValueError) as exc:
        raise TorchReplayError(f"{path}: bad workload: {exc}".splitlines()[0]) from exc
    return workload, strategy, tuple(depths), data.get("bug")


def replay_torch(path: Path, json_out: bool = False) -> int:
    """Re-run ``path``: 1 still diverges, 0 no longer does, 2 unusable file."""
    try:
        workload, strategy, depths, bug = load_torch_replay(path)
    except TorchReplayError as exc:
        print(f"replay: {exc}", file=sys.stderr)
        return EXIT_USAGE
    report = check_workload(workload, strategy=strategy, depths=depths, bug=bug,
                            model=default_model("cpu", FUZZ_MODEL))
    if json_out:
        print(json.dumps({"schema_version": JSON_SCHEMA_VERSION, "target": "torch", "replay_file": str(path),
                          "result": "divergence" if report.problems else "ok",
                          "reproduces": bool(report.problems), "strategy": strategy, "depths": list(depths),
                          "events": report.engine_events, "problems": report.problems}))
    elif report.problems:
        print(f"replay: the torch engine still diverges ({strategy}, depths {list(depths)}):")
        for problem in report.problems:
            print(f"  {problem}")
    else:
        print(f"replay: {report.engine_events} engine events; the divergence no longer reproduces "
              "(async runs equal the synchronous run and the spec)")
    return EXIT_DIVERGENCE if report.problems else EXIT_OK
