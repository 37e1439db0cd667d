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

from asyncspec.checker.schema import JSON_SCHEMA_VERSION, InputLimitError, loads_json
from asyncspec.engine.torch.torch_engine import ENGINE_BUGS, Workload, default_model
from asyncspec.engine.torch.torch_oracle import (
    EXIT_DIVERGENCE, EXIT_OK, EXIT_USAGE, FUZZ_MODEL, TORCH_REPLAY, check_workload,
)
from asyncspec.engine.torch.torch_worker import Strategy


class TorchReplayError(ValueError):
    """A torch replay file that cannot be used (one line)."""


def _tuples(value: Any) -> Any:
    return tuple(_tuples(v) for v in value) if isinstance(value, list) else value


def load_torch_replay(path: Path) -> tuple[Workload, Strategy, tuple[int, ...], str | None]:
    """(workload, strategy, depths, seeded bug) of a torch replay file."""
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
        raise TorchReplayError(f"{path}: torch replay version {data['asyncspec_torch_replay']!r} "
                               f"(this asyncspec reads {TORCH_REPLAY})")
    known = {f.name for f in fields(Workload)}
    unknown = sorted(set(data["workload"]) - known)
    if unknown:
        raise TorchReplayError(f"{path}: unknown workload key {unknown[0]!r}")
    strategy = data["strategy"]
    if strategy not in get_args(Strategy):
        raise TorchReplayError(f"{path}: strategy {strategy!r} is not one of {', '.join(get_args(Strategy))}")
    depths = data.get("depths", [1, 2] if strategy == "v1" else [1, 2, 3])
    bug = data.get("bug")
    if (not isinstance(depths, list) or not depths or any(type(d) is not int or not 1 <= d <= 3 for d in depths)):
        raise TorchReplayError(f"{path}: depths must be a list of 1, 2 or 3")
    if bug is not None and bug not in ENGINE_BUGS:
        raise TorchReplayError(f"{path}: unknown seeded bug {bug!r}")
    try:
        workload = Workload(**{k: _tuples(v) for k, v in data["workload"].items()})
    except (TypeError, ValueError) as exc:
        raise TorchReplayError(f"{path}: bad workload: {exc}") from exc
    return workload, strategy, tuple(depths), bug


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
