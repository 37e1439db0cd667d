"""Named model-checking configs (``configs/*.toml``) and config files.

A config file is TOML with the fields of ``SpecConfig`` plus three checker
fields: ``set`` ("default", "slow", "finding" or "campaign": which runs include it),
``witnesses`` (events that must be reachable, else the config is vacuous)
and the optional ``expect_violation`` (a finding: the property expected to
fail).  Pinned state counts live in ``configs/manifest.json``.
"""
from __future__ import annotations

import dataclasses
import json
import tomllib
from importlib import resources
from pathlib import Path
from typing import Any

from asyncspec.spec.config import ConfigError, SpecConfig
from asyncspec.spec.events import ALL_EVENTS
from asyncspec.spec.properties import ALL_ALWAYS, EVENTUALLY

SETS = ("default", "slow", "finding", "campaign")  # campaign: too big for plain exploration
_CHECKER_KEYS = {"set", "witnesses"}
_TUPLE_FIELDS = {"requests", "eos_positions", "properties"}


def _fields() -> dict[str, dataclasses.Field[Any]]:
    return {f.name: f for f in dataclasses.fields(SpecConfig) if f.name != "extra"}


def _as_tuple(value: Any) -> Any:
    if isinstance(value, list):
        return tuple(_as_tuple(v) for v in value)
    return value


def config_from_dict(data: dict[str, Any], origin: str = "config") -> SpecConfig:
    """Build and validate a ``SpecConfig``; ``ConfigError`` (one line) if it is bad."""
    if not isinstance(data, dict):
        raise ConfigError(f"{origin}: expected a table of settings")
    fields = _fields()
    unknown = sorted(set(data) - set(fields) - _CHECKER_KEYS)
    if unknown:
        raise ConfigError(f"{origin}: unknown setting '{unknown[0]}'")
    if "name" not in data or "requests" not in data:
        raise ConfigError(f"{origin}: 'name' and 'requests' are required")
    kwargs = {k: _as_tuple(v) for k, v in data.items() if k in fields}
    _check_types(kwargs, origin)
    extra = {k: _as_tuple(data[k]) for k in _CHECKER_KEYS if k in data}
    _check_checker_keys(extra, origin)
    _check_property_names(kwargs, origin)
    try:
        return SpecConfig(**kwargs, extra=extra)
    except TypeError as exc:
        raise ConfigError(f"{origin}: {exc}") from exc


def _check_types(kwargs: dict[str, Any], origin: str) -> None:
    reqs = kwargs["requests"]
    if not isinstance(reqs, tuple) or not all(
        isinstance(r, tuple) and len(r) == 2 and all(isinstance(x, int) for x in r) for r in reqs
    ):
        raise ConfigError(f"{origin}: 'requests' must be a list of [prompt_len, max_tokens] pairs")
    for key, value in kwargs.items():
        default = _fields()[key].default
        if isinstance(default, bool) and not isinstance(value, bool):
            raise ConfigError(f"{origin}: '{key}' must be true or false")
        if isinstance(default, int) and not isinstance(default, bool) and (
            not isinstance(value, int) or isinstance(value, bool)
        ):
            raise ConfigError(f"{origin}: '{key}' must be an integer")


def _check_checker_keys(extra: dict[str, Any], origin: str) -> None:
    if extra.get("set", "default") not in SETS:
        raise ConfigError(f"{origin}: 'set' must be one of {', '.join(SETS)}")
    for w in extra.get("witnesses", ()):
        if w not in ALL_EVENTS:
            raise ConfigError(f"{origin}: unknown witness '{w}'")


def _check_property_names(kwargs: dict[str, Any], origin: str) -> None:
    known = set(ALL_ALWAYS) | {p.name for p in EVENTUALLY}
    names = list(kwargs.get("properties") or ()) + [kwargs.get("expect_violation") or ""]
    for name in names:
        if name and name not in known:
            raise ConfigError(f"{origin}: unknown property '{name}'")


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
    try:
        data = tomllib.loads(path.read_text())
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: invalid TOML: {exc}") from exc
    return config_from_dict(data, origin=str(path))


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
    raise ConfigError(f"no config or set named '{spec}' (see 'asyncspec configs')")


def manifest_path() -> Path:
    """Where pinned state counts live."""
    return _config_dir() / "manifest.json"


def load_manifest() -> dict[str, dict[str, int]]:
    """Pinned ``distinct_states`` and ``depth`` per config name."""
    path = manifest_path()
    if not path.exists():
        return {}
    data: dict[str, dict[str, int]] = json.loads(path.read_text())
    return data
