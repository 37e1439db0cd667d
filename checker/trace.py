"""Counterexample traces: a config, the initial EOS choice, and a list of actions.

A trace names no block ids or hashes, only actions, so it replays on the
concrete spec (no symmetry reduction) and gives the same result on any
machine.  ``Trace.to_json`` is the replay file format (version 1).
"""
from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from asyncspec.checker.atomic import folder_problem as folder_problem  # re-exported: the writers' old home
from asyncspec.checker.atomic import signals_held
from asyncspec.checker.atomic import write_atomically as write_atomically
from asyncspec.spec import engine
from asyncspec.spec.config import SpecConfig
from asyncspec.spec.engine import Action, parse_action
from asyncspec.spec.state import EngineState, initial_state

TRACE_VERSION = 1


class TraceError(ValueError):
    """A replay file that cannot be read or does not replay (one line)."""


@dataclass
class Trace:
    """A path through the state graph, replayable from its initial state."""

    config: SpecConfig
    eos_positions: tuple[int, ...]
    actions: list[Action]
    violated: str | None = None  # the property the trace shows failing, if any

    def states(self) -> list[tuple[Action | None, EngineState, frozenset[str]]]:
        """Re-execute the trace on the concrete spec: (action, state, events) per row.

        Raises ``TraceError`` if an action is not enabled where the trace uses it.
        """
        s = initial_state(self.config, self.eos_positions)
        rows: list[tuple[Action | None, EngineState, frozenset[str]]] = [(None, s, frozenset())]
        for i, action in enumerate(self.actions, start=1):
            if action not in engine.enabled_actions(self.config, s):
                raise TraceError(f"step {i}: action '{action}' is not enabled in the spec")
            s, events = engine.apply(self.config, s, action)
            rows.append((action, s, events))
        return rows

    def to_json(self) -> dict[str, Any]:
        from asyncspec.checker.configs import config_to_dict

        return {
            "asyncspec_trace": TRACE_VERSION,
            "violated": self.violated,
            "config": config_to_dict(self.config),
            "eos_positions": list(self.eos_positions),
            "actions": [str(a) for a in self.actions],
        }

    @classmethod
    def from_json(cls, data: Any) -> Trace:
        from asyncspec.checker.configs import config_from_dict
        from asyncspec.checker.schema import schema_problem

        if not isinstance(data, dict) or data.get("asyncspec_trace") != TRACE_VERSION:
            raise TraceError(f"not an asyncspec trace (version {TRACE_VERSION}); "
                             f"'asyncspec check' writes them, 'asyncspec fuzz' files need --target")
        problem = schema_problem(data, TRACE_SCHEMA)
        if problem:
            raise TraceError(f"corrupt trace: {problem}")
        try:
            cfg = config_from_dict(data["config"], origin="trace config")
            eos = tuple(int(e) for e in data["eos_positions"])
            actions = [parse_action(str(a)) for a in data["actions"]]
        except (KeyError, TypeError, ValueError) as exc:
            raise TraceError(f"corrupt trace: {exc}".splitlines()[0]) from exc
        if len(eos) != len(cfg.requests):
            raise TraceError("corrupt trace: one EOS position per request expected")
        return cls(cfg, eos, actions, data.get("violated"))


TRACE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["asyncspec_trace", "config", "eos_positions", "actions"],
    "additionalProperties": False,
    "properties": {
        "asyncspec_trace": {"type": "integer", "const": TRACE_VERSION},
        "violated": {"type": ["string", "null"]},
        "config": {"type": "object"},  # checked by configs.config_schema()
        "eos_positions": {"type": "array", "items": {"type": "integer", "minimum": 0},
                          "x-hint": "one EOS position per request (0 = never)"},
        "actions": {"type": "array", "items": {"type": "string"}},
        "loop_start": {"type": ["integer", "null"], "minimum": 0},  # a lasso: the step the last state equals
        "lasso": {"type": "object"},  # the same, as the explorer's files name it
    },
}
"""A checker trace file (version 1), as ``Trace.to_json`` writes it (``loop_start``: a livelock's lasso)."""


SAVE_HOOKS: list[Callable[[Path], None]] = []
"""Called with the path of each trace or fuzz replay file once it is written; the CLI
registers the explorer here, which writes its HTML page beside the file."""


def run_save_hooks(path: Path) -> None:
    """Run every ``SAVE_HOOKS`` hook on the file just written at ``path``."""
    for hook in SAVE_HOOKS:
        hook(path)


def save_trace(trace: Trace, path: Path) -> None:
    """Save ``trace`` as a replay file, then run ``SAVE_HOOKS`` (its page), Ctrl-C held until both are
    written; ``WriteError`` (one line) if the trace file cannot be written."""
    with signals_held():
        write_atomically(path, json.dumps(trace.to_json(), indent=2) + "\n")
        run_save_hooks(path)


def read_json_file(path: Path, error: type[ValueError] = ValueError) -> Any:
    """The JSON in ``path``; ``error`` with one line (what is wrong, what to give) if unreadable."""
    from asyncspec.checker.schema import InputLimitError, loads_json

    try:
        return loads_json(path.read_text())
    except OSError as exc:
        raise error(f"cannot read {path}: {exc.strerror}") from exc
    except UnicodeDecodeError as exc:
        raise error(f"{path} is not UTF-8 text (give a JSON file asyncspec wrote)") from exc
    except json.JSONDecodeError as exc:
        raise error(f"{path} is not valid JSON (line {exc.lineno})") from exc
    except InputLimitError as exc:
        raise error(f"{path}: {exc}; give a JSON file asyncspec wrote") from exc


def load_trace(path: Path) -> Trace:
    """Read a replay file; ``TraceError`` with one line if it is unusable."""
    return Trace.from_json(read_json_file(path, TraceError))
