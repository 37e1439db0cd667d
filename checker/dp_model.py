"""Data parallelism's waves (``spec/dp.py``) as a ``Model``, and its configs (``configs/dp/*.toml``).

The DP model is explored by ``checker/bfs.py``'s search: BFS (shortest traces), the spec's fixed
successor order (deterministic counts), no symmetry (ranks differ: rank 0 reports wave ends, the
requests name their rank).  It checks ``spec/dp_properties.py``: three *always* properties, and on
the graph the wave's completion (no terminal state with a rank still running or stuck in the
all-reduce) and no livelock.  ``asyncspec check -c NAME`` runs it for a DP config's name (or the
set ``dp``); its pins are the manifest's entries of the same names.

Example:
    >>> r = explore_dp(dp_configs()["dp-2ranks"])
    >>> r.ok, r.distinct_states > 0
    (True, True)
"""
from __future__ import annotations

import json
from collections.abc import Collection, Iterator
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from asyncspec.spec import dp
from asyncspec.spec.config import SpecConfig
from asyncspec.spec.dp import DPAction, DPConfig, DPConfigError, DPState, DPTransition
from asyncspec.spec.dp_properties import DP_ALWAYS, unfinished_wave

from asyncspec.checker.bfs import Search
from asyncspec.checker.graph import cycle_nodes
from asyncspec.checker.model import Found, Model
from asyncspec.checker.result import CheckResult
from asyncspec.checker.schema import NAME_PATTERN, loads_toml, schema_problem
from asyncspec.checker.state_graph import StateGraph
from asyncspec.checker.trace import Trace

DP_SET = "dp"
DP_TRACE_VERSION = 1


@dataclass
class DPTrace(Trace):
    """A DP counterexample: the DP config and its actions (``config`` names it for the reports)."""

    dp_config: DPConfig | None = None
    dp_actions: list[DPAction] = field(default_factory=list)
    mutant: str | None = None  # the seeded bug it was found on (checker/dp_mutants.py)

    def dp_states(self) -> list[tuple[DPAction | None, DPState, frozenset[str]]]:
        """Re-execute on the DP spec; ``ValueError`` where an action is not enabled."""
        assert self.dp_config is not None
        s = dp.initial_state(self.dp_config)
        rows: list[tuple[DPAction | None, DPState, frozenset[str]]] = [(None, s, frozenset())]
        for i, action in enumerate(self.dp_actions, start=1):
            try:
                t = dp.apply(self.dp_config, s, action)
            except ValueError as exc:
                raise ValueError(f"step {i}: {exc}") from None
            s = t.state
            rows.append((action, s, t.events))
        return rows

    def to_json(self) -> dict[str, Any]:
        assert self.dp_config is not None
        return {"asyncspec_dp_trace": DP_TRACE_VERSION, "violated": self.violated, "mutant": self.mutant,
                "config": dp_config_to_dict(self.dp_config), "actions": [str(a) for a in self.dp_actions]}


def carrier(cfg: DPConfig) -> SpecConfig:
    """The scheduler config a ``DPTrace`` carries as its ``config``: only its name is read."""
    return SpecConfig(name=cfg.name, requests=((1, 1),))


class DPModel(Model[DPState, DPAction]):
    """``spec/dp.py``'s relation as a ``Model`` (``checker/model.py``)."""

    def __init__(self, cfg: DPConfig, required_witnesses: tuple[str, ...] = (),
                 expect_violation: str | None = None, mutant: str | None = None) -> None:
        self.cfg = cfg
        self.name = cfg.name
        self.witnesses = dp.DP_EVENTS
        self.required_witnesses = required_witnesses
        self.expect_violation = expect_violation
        self.mutant = mutant

    def initial_states(self) -> list[DPState]:
        return [dp.initial_state(self.cfg)]

    def next_states(self, s: DPState) -> list[DPTransition]:
        return dp.next_states(self.cfg, s)

    def always(self, s: DPState, skip: Collection[str]) -> Found:
        return [(p.name, m) for p in DP_ALWAYS if p.name not in skip and (m := p.check(self.cfg, s)) is not None]

    def eventually(self, g: StateGraph[Any, DPAction]) -> Iterator[tuple[str, int, str]]:
        """A terminal state that is not every wave's end; a reachable cycle."""
        for i, succ in enumerate(g.edges):
            if not succ and (why := unfinished_wave(self.cfg, g.states[i])) is not None:
                yield "dp_wave_completes", i, f"the wave never completes: {why}"
                break
        cycles = cycle_nodes(g)
        if cycles:
            yield "no_livelock", cycles[0], "livelock: the ranks can step forever"

    def trace(self, root: DPState, actions: list[DPAction], violated: str) -> DPTrace:
        return DPTrace(carrier(self.cfg), (), [], violated=violated, dp_config=self.cfg, dp_actions=list(actions),
                       mutant=self.mutant)


def explore_dp(cfg: DPConfig, *, max_states: int | None = None, stop_on_first: bool = True,
               required_witnesses: tuple[str, ...] | None = None, expect_violation: str | None = None,
               mutant: str | None = None) -> CheckResult:
    """Explore every reachable state of DP config ``cfg`` and check its properties; the config's
    own witnesses and expected violation unless given."""
    required = dp_witnesses(cfg) if required_witnesses is None else required_witnesses
    model = DPModel(cfg, required, expect_violation, mutant)
    return Search(model, max_states, stop_on_first, partial_on_interrupt=False).run()


# ---------------------------------------------------------------- configs/dp/*.toml

_WITNESSES: dict[str, tuple[str, ...]] = {}


def dp_config_schema() -> dict[str, Any]:
    """The closed JSON Schema of a DP config file."""
    pair = {"type": "array", "prefixItems": [{"type": "integer"}, {"type": "integer"}], "minItems": 2,
            "maxItems": 2, "x-hint": "each request is a [rank, model steps] pair"}
    return {"type": "object", "required": ["name", "requests"], "additionalProperties": False, "properties": {
        "name": {"type": "string", "pattern": NAME_PATTERN},
        "description": {"type": "string"},
        "set": {"enum": [DP_SET]},
        "requests": {"type": "array", "items": pair, "minItems": 1},
        "dp_size": {"type": "integer", "minimum": 2, "maximum": dp.MAX_RANKS},
        "dp_sync_interval": {"type": "integer", "minimum": 1, "maximum": 64},
        "witnesses": {"type": "array", "items": {"enum": list(dp.DP_EVENTS), "x-hint": "the events of spec/dp.py (docs/spec.md)"}},
    }}


def dp_config_from_dict(data: Any, origin: str = "DP config") -> DPConfig:
    """A validated ``DPConfig``; ``DPConfigError`` (one line) if bad.  Its witnesses are kept aside."""
    if not isinstance(data, dict):
        raise DPConfigError(f"{origin}: expected a table of settings")
    problem = schema_problem(data, dp_config_schema(), noun="setting")
    if problem:
        raise DPConfigError(f"{origin}: {problem}")
    cfg = DPConfig(name=data["name"], requests=tuple((int(r), int(n)) for r, n in data["requests"]),
                   dp_size=data.get("dp_size", 2), dp_sync_interval=data.get("dp_sync_interval", 16),
                   description=data.get("description", ""))
    _WITNESSES[cfg.name] = tuple(data.get("witnesses", ()))
    return cfg


def dp_config_to_dict(cfg: DPConfig) -> dict[str, Any]:
    """The JSON form of ``cfg`` (round-trips through ``dp_config_from_dict``)."""
    return {"name": cfg.name, "requests": [list(r) for r in cfg.requests], "dp_size": cfg.dp_size,
            "dp_sync_interval": cfg.dp_sync_interval}


def dp_witnesses(cfg: DPConfig) -> tuple[str, ...]:
    """The witnesses config ``cfg``'s file requires (none for a config built in code)."""
    return _WITNESSES.get(cfg.name, ()) if dp_configs().get(cfg.name) == cfg else ()


def _dp_dir() -> Path:
    return Path(str(resources.files("asyncspec.configs"))) / "dp"


def dp_configs() -> dict[str, DPConfig]:
    """Every DP config of ``configs/dp/``, by name, sorted by file."""
    out: dict[str, DPConfig] = {}
    for path in sorted(_dp_dir().glob("*.toml")):
        try:
            data = loads_toml(path.read_text())
        except (OSError, ValueError) as exc:
            raise DPConfigError(f"{path}: {exc}".splitlines()[0]) from exc
        cfg = dp_config_from_dict(data, str(path))
        out[cfg.name] = cfg
    return out


def resolve_dp(names: Collection[str]) -> tuple[list[DPConfig], list[str]]:
    """The DP configs among ``check -c`` values (a DP config's name, or the set ``dp``), and the
    other values, in order."""
    configs = dp_configs()
    found: list[DPConfig] = []
    rest: list[str] = []
    for name in names:
        if name == DP_SET:
            found += [c for c in configs.values() if c not in found]
        elif name in configs:
            found += [configs[name]] if configs[name] not in found else []
        else:
            rest.append(name)
    return found, rest


def dp_trace_json(trace: DPTrace) -> str:
    """A DP trace file's text."""
    return json.dumps(trace.to_json(), indent=2) + "\n"
