"""A case for the SGLang driver and the trace it returns, as plain JSON-able data.

Pure Python: built by the fuzz target in the project venv, run by the driver in the SGLang
venv (``server.py``), so both sides import this module.

Example:
    >>> c = Case(requests=(Request(prompt=(7, 8), max_new_tokens=2),))
    >>> Case.from_json(c.to_json()) == c
    True
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from asyncspec.engine.sglang.environment_config import EngineConfig as EngineConfig


@dataclass(frozen=True)
class Request:
    """One request: its prompt ids, ``max_new_tokens``, EOS output position (0 = never),
    and the loop iteration at whose intake it arrives."""

    prompt: tuple[int, ...]
    max_new_tokens: int
    eos_at: int = 0
    arrive_at: int = 0


@dataclass(frozen=True)
class Abort:
    """The client aborts request ``req`` at the intake of iteration ``at``."""

    req: int
    at: int


@dataclass(frozen=True)
class Case:
    """Requests, aborts, the engine configuration and the forced-retraction test switch."""

    requests: tuple[Request, ...]
    aborts: tuple[Abort, ...] = ()
    engine: EngineConfig = field(default_factory=EngineConfig)
    test_retract: bool = False  # SGLANG_TEST_RETRACT: retract at every 3rd forward

    def to_json(self) -> dict[str, Any]:
        """Plain data (lists for tuples)."""
        return asdict(self)

    @staticmethod
    def from_json(data: dict[str, Any]) -> Case:
        """Inverse of ``to_json``."""
        return Case(
            requests=tuple(Request(prompt=tuple(r["prompt"]), max_new_tokens=r["max_new_tokens"],
                                   eos_at=r["eos_at"], arrive_at=r["arrive_at"])
                           for r in data["requests"]),
            aborts=tuple(Abort(a["req"], a["at"]) for a in data["aborts"]),
            engine=EngineConfig(**data["engine"]),
            test_retract=bool(data["test_retract"]),
        )


def rid(req: int) -> str:
    """The SGLang request id of request ``req`` (unique within a case)."""
    return f"r{req}"


def req_index(request_id: str) -> int:
    """Inverse of ``rid``."""
    return int(request_id[1:])
