"""The ``sglang`` target's replay files: their closed JSON Schema, and the loader ``replay`` uses.

A replay file (``sglang_fuzz.save_replay``) holds the shrunk case (``engine/sglang/case.py``), the
mutant it ran under, the differences and the last iterations side by side.  Everything in it is
checked against ``replay_schema()`` before a case is built: every key known (an unknown one is named),
every integer within what SGLang's scheduler and the spec hold (a token id, a token count, an
iteration), down to each request; then each abort must name a request of the case.  A bad file is one
line, exit 2, never a traceback.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from asyncspec.checker.schema import InputLimitError, loads_json, schema_problem
from asyncspec.engine.sglang import case as cs
from asyncspec.engine.sglang.sglang_mutants import BY_NAME
from asyncspec.spec.config import MAX_TOKENS

from asyncspec.statemachine_tests.core.replay_file import REPLAY_VERSION

TARGET = "sglang"
MAX_ITERATION = 100_000
"""The loop iteration an arrival or an abort may name (a case runs a few dozen)."""
MAX_POOL = 1 << 20
"""KV pool tokens (``max_total_tokens``): SGLang's CPU pool is allocated whole."""


def _ranged(lowest: int, highest: int, why: str) -> dict[str, Any]:
    return {"type": "integer", "minimum": lowest, "maximum": highest, "x-hint": why}


def _closed(properties: dict[str, Any], required: list[str] | None = None) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "required": required or sorted(properties),
            "additionalProperties": False}


def case_schema() -> dict[str, Any]:
    """The closed JSON Schema of a case (``Case.to_json``), down to every request and abort."""
    tokens = _ranged(0, MAX_TOKENS, "a token count")
    iteration = _ranged(0, MAX_ITERATION, "a loop iteration")
    request = _closed({"prompt": {"type": "array", "items": _ranged(0, 2**31 - 1, "a token id"), "minItems": 1,
                                  "maxItems": MAX_TOKENS},
                       "max_new_tokens": _ranged(1, MAX_TOKENS, "a token count"), "eos_at": tokens,
                       "arrive_at": iteration})
    engine = _closed({"overlap": {"type": "boolean"},
                      "max_total_tokens": _ranged(1, MAX_POOL, "KV pool tokens"),
                      "chunked_prefill_size": _ranged(1, MAX_TOKENS, "a token count"),
                      "schedule_conservativeness": {"type": "number", "exclusiveMinimum": 0, "maximum": 100},
                      "max_running_requests": _ranged(1, 1024, "SGLang's running batch")})
    return _closed({"requests": {"type": "array", "items": request, "minItems": 1, "maxItems": 64},
                    "aborts": {"type": "array", "items": _closed({"req": _ranged(0, 63, "a request index"),
                                                                  "at": iteration})},
                    "engine": engine, "test_retract": {"type": "boolean"}})


def replay_schema() -> dict[str, Any]:
    """The closed JSON Schema of an ``sglang`` replay file (``sglang_fuzz.save_replay``)."""
    side = {"type": "object", "additionalProperties": {"type": "string"}}  # request id -> its counters
    difference = _closed({"field": {"type": "string"}, "spec": {}, "sglang": {}})
    iteration = _closed({"it": _ranged(0, MAX_ITERATION, "a loop iteration"),
                         "ops": {"type": "array", "items": {"type": "string"}}, "spec": side, "sglang": side})
    return _closed({"asyncspec_fuzz_replay": {"type": "integer", "const": REPLAY_VERSION},
                    "target": {"const": TARGET}, "mutant": {"enum": [None, *sorted(BY_NAME)]},
                    "case": case_schema(), "differences": {"type": "array", "items": difference},
                    "iterations": {"type": "array", "items": iteration}},
                   required=["asyncspec_fuzz_replay", "case", "target"])


def load_replay(path: Path) -> tuple[cs.Case, str | None]:
    """The case (and mutant) of a replay file; ``ValueError`` (one line) if it is not one."""
    try:
        data = loads_json(path.read_text())
    except OSError as exc:
        raise ValueError(f"cannot read {path}: {exc.strerror or type(exc).__name__}") from None
    except InputLimitError as exc:
        raise ValueError(f"corrupt replay file {path}: {exc}") from None
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise ValueError(f"{path} is not a JSON file (asyncspec fuzz --target {TARGET} writes replay files)") from None
    if not isinstance(data, dict) or data.get("target") != TARGET or "asyncspec_fuzz_replay" not in data:
        raise ValueError(f"{path} is not a {TARGET} replay file (asyncspec fuzz --target {TARGET} writes them)")
    problem = schema_problem(data, replay_schema())
    if problem is None:
        n = len(data["case"]["requests"])
        bad = next((i for i, a in enumerate(data["case"]["aborts"]) if a["req"] >= n), None)
        problem = None if bad is None else f"'case.aborts[{bad}].req' names a request the case does not have"
    if problem:
        raise ValueError(f"corrupt replay file {path}: {problem}")
    return cs.Case.from_json(data["case"]), data["mutant"] if "mutant" in data else None
