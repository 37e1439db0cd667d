"""Named model-checking configs (``configs/*.toml``) and config files.

A config file is TOML with the fields of ``SpecConfig`` plus three checker
fields: ``set`` ("default", "slow", "finding" or "campaign": which runs include it),
``witnesses`` (events that must be reachable, else the config is vacuous)
and the optional ``expect_violation`` (a finding: the property expected to
fail).  Pinned state counts live in ``configs/manifest.json``.

The joint (scheduler + worker) configs live apart, in ``configs/worker/``:
each is a scheduler config plus one ``[[worker]]`` table per strategy
checked on it (``worker_config_schema``); their pins are the manifest's
``CONFIG/STRATEGY`` entries.
"""
from __future__ import annotations

import dataclasses
import json
import tomllib
from collections.abc import Iterable
from importlib import resources
from pathlib import Path
from typing import Any, NamedTuple, cast

from asyncspec.spec.config import LIMITS, MAX_TOKENS, ConfigError, SpecConfig
from asyncspec.spec.events import ALL_EVENTS
from asyncspec.spec.properties import ALL_ALWAYS, EVENTUALLY
from asyncspec.spec.worker import STRATEGIES, WORKER_ALWAYS, WORKER_EVENTS, Strategy

from asyncspec.checker.schema import (
    MAX_NAME, NAME_PATTERN, InputLimitError, annotation_schema, loads_json, loads_toml, nearest, schema_problem,
)

SETS = ("default", "slow", "finding", "campaign")  # campaign: too big for plain exploration
_CHECKER_KEYS = {"set", "witnesses"}
_TUPLE_FIELDS = {"requests", "eos_positions", "properties"}


def _fields() -> dict[str, dataclasses.Field[Any]]:
    return {f.name: f for f in dataclasses.fields(SpecConfig) if f.name != "extra"}


def _as_tuple(value: Any) -> Any:
    if isinstance(value, list):
        return tuple(_as_tuple(v) for v in value)
    return value


def config_schema() -> dict[str, Any]:
    """The closed JSON Schema of a config file (TOML) and of a trace's ``config`` object."""
    integer: dict[str, Any] = {"type": "integer"}
    tokens: dict[str, Any] = {"type": "integer", "maximum": MAX_TOKENS, "x-hint": "a token count"}
    known = sorted(set(ALL_ALWAYS) | {p.name for p in EVENTUALLY})
    pair = {"type": "array", "prefixItems": [tokens, tokens], "minItems": 2, "maxItems": 2,
            "x-hint": "each request is a [prompt_len, max_tokens] pair of integers"}
    props: dict[str, Any] = {
        "name": {"type": "string", "pattern": NAME_PATTERN,
                 "x-hint": f"letters, digits, '.', '_' and '-', starting with a letter or digit, at most {MAX_NAME} "
                           f"characters (it names trace files)"},
        "requests": {"type": "array", "items": pair, "minItems": 1,
                     "x-hint": "a list of [prompt_len, max_tokens] pairs"},
        "loop": {"enum": ["exact", "free"]},
        "stale_mode": {"enum": ["deliver", "drop"]},
        "abort_mode": {"enum": ["immediate", "deferred"],
                       "x-hint": "'deferred' is SGLang's abort of a running request (docs/sglang.md)"},
        "eos_positions": {"type": "array", "items": {"type": "array", "items": tokens,
                          "x-hint": "one list of integer EOS positions per request (0 = never)"}},
        "structured_output": {"type": "array", "items": integer},
        "resumable": {"type": "array", "items": integer},
        "stream_updates": {"type": "array", "items": pair | {"x-hint": "each update is [new prompt tokens, max_tokens]"}},
        "images": {"type": "array", "items": {"type": "array", "prefixItems": [integer, tokens, tokens, integer],
                   "minItems": 4, "maxItems": 4, "x-hint": "each image is [request, offset, length, item]"}},
        "mamba_cache_mode": {"enum": ["", "none", "align"], "x-hint": "'' = no Mamba group (spec/mamba.py)"},
        "properties": {"type": "array", "items": {"enum": known, "x-hint": "see docs/properties.md"}, "minItems": 1,
                       "x-hint": "leave 'properties' out to check every property that applies"},
        "expect_violation": {"enum": known, "x-hint": "see docs/properties.md"},
        "description": {"type": "string"},
        "set": {"enum": list(SETS)},
        "witnesses": {"type": "array", "items": {"enum": list(ALL_EVENTS), "x-hint": "see docs/spec.md for the events"}},
    }
    for name, f in _fields().items():  # the rest by their annotation
        if name not in props:
            props[name] = annotation_schema(str(f.type))
    for name, (lowest, highest, why) in LIMITS.items():  # what the explorer and the engines can hold
        props[name] = props[name] | {"minimum": lowest, "maximum": highest, "x-hint": why}
    return {"type": "object", "properties": props, "required": ["name", "requests"],
            "additionalProperties": False}


def config_from_dict(data: dict[str, Any], origin: str = "config") -> SpecConfig:
    """Build and validate a ``SpecConfig``; ``ConfigError`` (one line) if it is bad."""
    if not isinstance(data, dict):
        raise ConfigError(f"{origin}: expected a table of settings")
    data = {k: v for k, v in data.items() if v is not None}  # JSON null: the default (as config_to_dict omits it)
    problem = schema_problem(data, config_schema(), noun="setting")
    if problem:
        raise ConfigError(f"{origin}: {problem}")
    fields = _fields()
    kwargs = {k: _as_tuple(v) for k, v in data.items() if k in fields}
    extra = {k: _as_tuple(data[k]) for k in _CHECKER_KEYS if k in data}
    try:
        return SpecConfig(**kwargs, extra=extra)
    except TypeError as exc:
        raise ConfigError(f"{origin}: {exc}") from exc


def config_to_dict(cfg: SpecConfig) -> dict[str, Any]:
    """The JSON/TOML form of ``cfg`` (round-trips through ``config_from_dict``)."""
    out: dict[str, Any] = {}
    for name in _fields():
        value = getattr(cfg, name)
        if value is None:
            continue
        out[name] = json.loads(json.dumps(value))
    for key in sorted(_CHECKER_KEYS):
        if key in cfg.extra:
            out[key] = json.loads(json.dumps(cfg.extra[key]))
    return out


def load_config_file(path: Path) -> SpecConfig:
    """Read one TOML config file."""
    return config_from_dict(_read_toml(path), origin=str(path))


def _read_toml(path: Path) -> dict[str, Any]:
    """The table of one TOML file; ``ConfigError`` (one line) if it cannot be read or parsed."""
    try:
        text = path.read_text()
        data = loads_toml(text)
    except InputLimitError as exc:
        raise ConfigError(f"{path}: {exc}; a config is a flat TOML table") from exc
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror or exc} (give a readable TOML file)") from exc
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 text (a config is a TOML file)") from exc
    except tomllib.TOMLDecodeError as exc:
        if text.lstrip().startswith(("{", "[{")):
            raise ConfigError(f"{path}: this looks like JSON; a config file is TOML "
                              f"(name = \"...\", requests = [[3, 2]])") from exc
        raise ConfigError(f"{path}: invalid TOML: {exc} (fix the syntax; see docs/configs.md)") from exc
    return data


def _config_dir() -> Path:
    return Path(str(resources.files("asyncspec.configs")))


def named_configs() -> dict[str, SpecConfig]:
    """Every config shipped in ``configs/``, by name, sorted."""
    out: dict[str, SpecConfig] = {}
    for path in sorted(_config_dir().glob("*.toml")):
        cfg = load_config_file(path)
        out[cfg.name] = cfg
    return out


def config_set(name: str) -> list[SpecConfig]:
    """The configs of one set ("default", "slow", "finding"), in name order."""
    return [c for c in named_configs().values() if c.extra.get("set", "default") == name]


def resolve(spec: str) -> list[SpecConfig]:
    """A config name, a set name, or a path to a TOML file."""
    configs = named_configs()
    if spec in configs:
        return [configs[spec]]
    if spec in SETS:
        return config_set(spec)
    path = Path(spec)
    if path.suffix == ".toml" or path.exists():
        return [load_config_file(path)]
    hint = nearest(spec, [*configs, *SETS])
    raise ConfigError(f"no config or set named '{spec}'{hint}; see 'asyncspec configs', or give a .toml file")


def resolve_all(specs: Iterable[str]) -> list[SpecConfig]:
    """The configs of several ``-c`` values (``resolve``), in order, one per name: a config selected twice is
    checked once; ``ConfigError`` (one line) when two different configs share a name (their trace files would
    overwrite each other)."""
    found: dict[str, tuple[str, SpecConfig]] = {}
    for spec in specs:
        for cfg in resolve(spec):
            if cfg.name in found and found[cfg.name][1] != cfg:
                raise ConfigError(f"two different configs are named '{cfg.name}' (from -c {found[cfg.name][0]} and "
                                  f"-c {spec}); give each its own name (it names the trace files)")
            found.setdefault(cfg.name, (spec, cfg))
    return [cfg for _, cfg in found.values()]


def manifest_path() -> Path:
    """Where pinned state counts live."""
    return _config_dir() / "manifest.json"


def load_manifest() -> dict[str, dict[str, int]]:
    """Pinned ``distinct_states`` and ``depth`` per config name."""
    path = manifest_path()
    if not path.exists():
        return {}
    try:
        data = loads_json(path.read_text())
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise ConfigError(f"{path}: unreadable manifest ({exc}); restore it with git") from exc
    problem = schema_problem(data, MANIFEST_SCHEMA)
    if problem:
        raise ConfigError(f"{path}: {problem}; restore it with git or fix that entry")
    return cast("dict[str, dict[str, int]]", data)


MANIFEST_SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": {
        "type": "object", "required": ["distinct_states", "depth"], "additionalProperties": False,
        "properties": {"distinct_states": {"type": "integer", "minimum": 1},
                       "depth": {"type": "integer", "minimum": 0}}},
}
"""``configs/manifest.json``: the pinned distinct-state count and depth per config name."""


# ---------------------------------------------------------------- worker configs (configs/worker/*.toml)


class JointExpectation(NamedTuple):
    """One ``[[worker]]`` table: what exploring its config with one worker strategy must give."""

    config: str
    strategy: Strategy
    expect_violation: str | None  # a finding: the property expected to fail (None = all hold)
    required_witnesses: tuple[str, ...]
    engine_properties: bool


def worker_config_schema() -> dict[str, Any]:
    """The closed JSON Schema of a worker config file.

    A scheduler config without the checker's keys (``set``, ``witnesses``,
    ``expect_violation``: they belong to each strategy here), its place in the
    report (``order``) and one ``[[worker]]`` table per strategy checked on it.
    """
    known = sorted(set(ALL_ALWAYS) | {p.name for p in WORKER_ALWAYS} | {"no_deadlock", "no_livelock"})
    run = {"type": "object", "required": ["strategy", "witnesses"], "additionalProperties": False,
           "properties": {
               "strategy": {"enum": list(STRATEGIES)},
               "witnesses": {"type": "array", "items": {"enum": list(ALL_EVENTS + WORKER_EVENTS),
                                                        "x-hint": "see docs/worker.md for the witnesses"}},
               "expect_violation": {"enum": known, "x-hint": "a worker property (docs/worker.md) or an engine one"},
               "engine_properties": {"type": "boolean"}}}
    props = {k: v for k, v in config_schema()["properties"].items()
             if k not in ("set", "witnesses", "expect_violation")}
    props["order"] = {"type": "integer", "minimum": 1, "x-hint": "the config's place in 'asyncspec worker'"}
    props["worker"] = {"type": "array", "items": run, "minItems": 1,
                       "x-hint": "one [[worker]] table per strategy checked on this config"}
    return {"type": "object", "properties": props, "required": ["name", "requests", "order", "worker"],
            "additionalProperties": False}


def worker_config_from_dict(data: Any, origin: str = "worker config") -> tuple[int, SpecConfig,
                                                                               tuple[JointExpectation, ...]]:
    """(order, the scheduler config, one expectation per ``[[worker]]``); ``ConfigError`` (one line) if bad."""
    if not isinstance(data, dict):
        raise ConfigError(f"{origin}: expected a table of settings")
    problem = schema_problem(data, worker_config_schema(), noun="setting")
    if problem:
        raise ConfigError(f"{origin}: {problem}")
    scheduler = {k: v for k, v in data.items() if k not in ("order", "worker")}
    cfg = config_from_dict(scheduler, origin)
    strategies = [run["strategy"] for run in data["worker"]]
    twice = _first_twice(strategies)
    if twice is not None:
        raise ConfigError(f"{origin}: strategy '{twice}' has two [[worker]] tables; keep one")
    rows = tuple(JointExpectation(cfg.name, run["strategy"], run.get("expect_violation"),
                                  tuple(run["witnesses"]), run.get("engine_properties", True))
                 for run in data["worker"])
    return data["order"], cfg, rows


def _worker_files() -> list[tuple[int, SpecConfig, tuple[JointExpectation, ...]]]:
    """Every worker config file, in report order; ``ConfigError`` on a bad file, name or order."""
    found = [worker_config_from_dict(_read_toml(path), str(path))
             for path in sorted((_config_dir() / "worker").glob("*.toml"))]
    for what, values in (("order", [f[0] for f in found]), ("name", [f[1].name for f in found])):
        twice = _first_twice(values)
        if twice is not None:
            raise ConfigError(f"configs/worker: two files have {what} {twice!r}; give each its own")
    return sorted(found, key=lambda f: f[0])


def _first_twice(values: list[Any]) -> Any:
    """The first of ``values`` that occurs more than once, or None."""
    return next((v for v in values if values.count(v) > 1), None)


def worker_configs() -> dict[str, SpecConfig]:
    """The joint (scheduler + worker) configs of ``configs/worker/``, by name, in report order."""
    return {cfg.name: cfg for _, cfg, _ in _worker_files()}


def worker_expectations() -> tuple[JointExpectation, ...]:
    """Every ``[[worker]]`` table of ``configs/worker/``: config by config, in file order within one."""
    return tuple(row for _, _, rows in _worker_files() for row in rows)
