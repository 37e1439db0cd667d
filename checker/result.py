"""What an exploration returns, and its JSON form (the CLI contract)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from asyncspec.checker.trace import Trace


@dataclass
class Violation:
    """A property that failed, with the shortest trace that shows it."""

    property: str
    message: str
    trace: Trace

    def to_json(self) -> dict[str, Any]:
        return {"property": self.property, "message": self.message, "trace": self.trace.to_json()}


@dataclass
class CheckResult:
    """The outcome of exploring one config."""

    name: str
    distinct_states: int = 0
    transitions: int = 0
    depth: int = 0
    seconds: float = 0.0
    violations: list[Violation] = field(default_factory=list)
    witnesses: dict[str, bool] = field(default_factory=dict)
    required_witnesses: tuple[str, ...] = ()
    partial: bool = False
    partial_reason: str = ""
    expect_violation: str | None = None

    @property
    def vacuous(self) -> list[str]:
        """Required witnesses that no reachable transition exercised (none in a partial run)."""
        if self.partial:
            return []
        return [w for w in self.required_witnesses if not self.witnesses.get(w, False)]

    @property
    def ok(self) -> bool:
        """Every property holds as expected and every required witness was reached."""
        if self.partial:
            return False
        found = {v.property for v in self.violations}
        if self.expect_violation is not None:
            return found == {self.expect_violation}
        return not found and not self.vacuous

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "distinct_states": self.distinct_states,
            "transitions": self.transitions,
            "depth": self.depth,
            "seconds": round(self.seconds, 3),
            "partial": self.partial,
            "partial_reason": self.partial_reason,
            "expect_violation": self.expect_violation,
            "ok": self.ok,
            "violations": [v.to_json() for v in self.violations],
            "witnesses": dict(sorted(self.witnesses.items())),
            "vacuous_witnesses": self.vacuous,
        }
