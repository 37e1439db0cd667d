"""Counterexample traces: a config, the initial EOS choice, and a list of actions.

A trace names no block ids or hashes, only actions, so it replays on the
concrete spec (no symmetry reduction) and gives the same result on any
machine.  ``Trace.to_json`` is the replay file format (version 1).
"""
from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

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
        from .configs import config_to_dict

        return {
            "asyncspec_trace": TRACE_VERSION,
            "violated": self.violated,
            "config": config_to_dict(self.config),
            "eos_positions": list(self.eos_positions),
            "actions": [str(a) for a in self.actions],
        }

    @classmethod
    def from_json(cls, data: Any) -> Trace:
        from .configs import config_from_dict

        if not isinstance(data, dict) or data.get("asyncspec_trace") != TRACE_VERSION:
            raise TraceError(f"not an asyncspec trace (version {TRACE_VERSION})")
        try:
            cfg = config_from_dict(data["config"])
            eos = tuple(int(e) for e in data["eos_positions"])
            actions = [parse_action(str(a)) for a in data["actions"]]
        except (KeyError, TypeError, ValueError) as exc:
            raise TraceError(f"corrupt trace: {exc}") from exc
        if len(eos) != len(cfg.requests):
            raise TraceError("corrupt trace: one EOS position per request expected")
        return cls(cfg, eos, actions, data.get("violated"))


def write_atomically(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` via a temporary file and rename: never half-written."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


SAVE_HOOKS: list[Callable[[Path], None]] = []
"""Called with the path of each trace or fuzz replay file once it is written; the CLI
registers the explorer here, which writes its HTML page beside the file."""


def run_save_hooks(path: Path) -> None:
    for hook in SAVE_HOOKS:
        hook(path)


def save_trace(trace: Trace, path: Path) -> None:
    """Save ``trace`` as a replay file (then run ``SAVE_HOOKS``)."""
    write_atomically(path, json.dumps(trace.to_json(), indent=2) + "\n")
    run_save_hooks(path)


def load_trace(path: Path) -> Trace:
    """Read a replay file; ``TraceError`` with one line if it is unusable."""
    try:
        data = json.loads(path.read_text())
    except OSError as exc:
        raise TraceError(f"cannot read {path}: {exc.strerror}") from exc
    except json.JSONDecodeError as exc:
        raise TraceError(f"{path} is not valid JSON (line {exc.lineno})") from exc
    return Trace.from_json(data)
