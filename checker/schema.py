"""File formats checked against JSON Schemas (``jsonschema``): one-line errors, nearest-name hints.

Every file asyncspec reads (config TOML, checker traces, fuzz replay files,
the manifest) is validated against a closed JSON Schema before it is used,
so a bad file fails with one line naming the key and what to write instead,
never with a traceback.  Integers are strict here (``2.0`` is not an
integer, ``true`` is not a number) and numbers must be finite.

Example:
    >>> schema = {"type": "object", "properties": {"depth": {"type": "integer"}},
    ...           "additionalProperties": False}
    >>> schema_problem({"depht": 2}, schema, noun="setting")
    "unknown setting 'depht' (did you mean 'depth'?)"
    >>> schema_problem({"depth": 2.0}, schema)
    "'depth' must be an integer (got 2.0)"
"""
from __future__ import annotations

import difflib
import json
import math
import re
import tomllib
from collections.abc import Iterable
from typing import Any

from jsonschema import Draft202012Validator, validators
from jsonschema.exceptions import ValidationError, best_match

JSON_SCHEMA_VERSION = 1
"""The ``schema_version`` every ``--json`` output carries (its JSON Schema: one file per command in ``cli/schemas/``);
raised only when a key changes name, type or place, never for an added key."""

MAX_NAME = 100
"""A config name's length at most: ``NAME.PROPERTY.trace.html`` stays within a file name's 255 bytes."""

NAME_PATTERN = "^[A-Za-z0-9][A-Za-z0-9._-]{0,%d}$" % (MAX_NAME - 1)
"""A config name: it names trace files, so no path components, no leading dot, at most ``MAX_NAME`` characters."""


MAX_NESTING = 32
"""Input files nest at most this deep (lists and tables; no file asyncspec writes nests more than 8)."""

MAX_INTEGER = 2**63 - 1
"""Integers in input files lie within +-MAX_INTEGER (64 bits; every count asyncspec writes fits in it)."""


class InputLimitError(ValueError):
    """An input file nested too deep or holding a too large integer (one line)."""


def _parse_int(text: str) -> int:
    """``json.loads``'s integer parser: refuses an integer longer than 64 bits before converting it."""
    if len(text.lstrip("-")) > len(str(MAX_INTEGER)):
        raise InputLimitError(f"an integer of {len(text.lstrip('-'))} digits (integers lie within +-2**63)")
    return int(text)


_TOO_DEEP = f"lists and tables nest deeper than {MAX_NESTING} levels (no asyncspec file nests so deep)"


def limits_problem(data: Any) -> str | None:
    """Why parsed ``data`` is beyond the input limits (nesting deeper than ``MAX_NESTING``, an integer
    outside +-``MAX_INTEGER``), or None; walked without recursion, so any depth is safe to ask about."""
    stack: list[tuple[Any, int]] = [(data, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, (dict, list)):
            if depth > MAX_NESTING:
                return _TOO_DEEP
            stack.extend((v, depth + 1) for v in (value.values() if isinstance(value, dict) else value))
        elif isinstance(value, int) and not isinstance(value, bool) and abs(value) > MAX_INTEGER:
            return f"an integer of {value.bit_length()} bits (integers lie within +-2**63)"
    return None


def _too_deep() -> InputLimitError:
    return InputLimitError(_TOO_DEEP)


def loads_json(text: str) -> Any:
    """``json.loads`` within the input limits: ``InputLimitError`` (a ``ValueError``, one line) for a file
    nested deeper than ``MAX_NESTING`` or holding an integer outside +-``MAX_INTEGER``; the shared
    loader of every JSON input file (traces, fuzz replay files, monitor windows, engine cases)."""
    try:
        data = json.loads(text, parse_int=_parse_int)
    except RecursionError:
        raise _too_deep() from None
    problem = limits_problem(data)
    if problem:
        raise InputLimitError(problem)
    return data


def loads_toml(text: str) -> dict[str, Any]:
    """``tomllib.loads`` within the same limits (``InputLimitError``); its own errors pass through."""
    try:
        data = tomllib.loads(text)
    except RecursionError:
        raise _too_deep() from None
    except tomllib.TOMLDecodeError:
        raise
    except ValueError as exc:  # int() refusing a decimal integer of thousands of digits
        raise InputLimitError("an integer of thousands of digits (integers lie within +-2**63)") from exc
    problem = limits_problem(data)
    if problem:
        raise InputLimitError(problem)
    return data


def _is_integer(_: Any, value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(_: Any, value: Any) -> bool:
    return _is_integer(_, value) or (isinstance(value, float) and math.isfinite(value))


_TYPES = Draft202012Validator.TYPE_CHECKER.redefine_many({"integer": _is_integer, "number": _is_number})
StrictValidator = validators.extend(Draft202012Validator, type_checker=_TYPES)

_TYPE_WORDS = {"boolean": "true or false", "integer": "an integer", "number": "a finite number",
               "string": "a string", "array": "a list", "object": "a table of keys", "null": "null"}


def nearest(name: str, choices: Iterable[str]) -> str:
    """`` (did you mean 'X'?)`` for the closest of ``choices`` to ``name``, or ``""``."""
    close = difflib.get_close_matches(name, sorted(choices), n=1, cutoff=0.6)
    return f" (did you mean '{close[0]}'?)" if close else ""


def _where(path: Iterable[Any]) -> str:
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


def _shown(value: Any) -> str:
    text = json.dumps(value, default=str)
    return text if len(text) <= 40 else text[:37] + "..."


def _message(e: ValidationError, noun: str) -> str:
    where, hint = _where(e.absolute_path), e.schema.get("x-hint") if isinstance(e.schema, dict) else None
    subject = f"'{where}'" if where else "the file"
    if e.validator == "additionalProperties" and isinstance(e.instance, dict):
        known = set(e.schema.get("properties", {}))
        extra = sorted(k for k in e.instance if k not in known)[0]
        inside = f" in '{where}'" if where else ""
        return f"unknown {noun} '{extra}'{inside}{nearest(extra, known)}"
    if e.validator == "required":
        missing = [k for k in e.validator_value if isinstance(e.instance, dict) and k not in e.instance]
        inside = f" in '{where}'" if where else ""
        return f"'{missing[0] if missing else e.validator_value[0]}' is required{inside}"
    if e.validator == "type":
        kinds = e.validator_value if isinstance(e.validator_value, list) else [e.validator_value]
        words = " or ".join(_TYPE_WORDS.get(str(k), str(k)) for k in kinds)
        text = f"{subject} must be {words} (got {_shown(e.instance)})"
    elif e.validator == "enum":
        options = [str(o) for o in e.validator_value]
        hint_name = nearest(str(e.instance), options)
        if len(options) <= 8:
            text = f"{subject} must be one of {', '.join(options)} (got {_shown(e.instance)}){hint_name}"
        else:
            text = f"{subject}: unknown name {_shown(e.instance)}{hint_name}"
    elif e.validator == "const":
        text = f"{subject} must be {_shown(e.validator_value)} (got {_shown(e.instance)})"
    elif e.validator == "pattern":
        text = f"{subject} must match {e.validator_value} (got {_shown(e.instance)})"
    elif e.validator in ("minItems", "maxItems"):
        bound = "at least" if e.validator == "minItems" else "at most"
        text = f"{subject} must list {bound} {e.validator_value} item(s) (got {len(e.instance)})"
    elif e.validator in ("minimum", "maximum") and isinstance(e.schema, dict) and {"minimum", "maximum"} <= set(e.schema):
        text = f"{subject} must be {e.schema['minimum']}..{e.schema['maximum']} (got {_shown(e.instance)})"
    elif e.validator in ("minimum", "maximum", "exclusiveMinimum"):
        op = {"minimum": ">=", "maximum": "<=", "exclusiveMinimum": ">"}[str(e.validator)]
        text = f"{subject} must be {op} {e.validator_value} (got {_shown(e.instance)})"
    elif e.validator == "minLength":
        text = f"{subject} must not be empty"
    else:
        text = f"{subject}: {e.message}".splitlines()[0]
    return f"{text}: {hint}" if hint else text


def annotation_schema(annotation: str) -> dict[str, Any]:
    """The JSON Schema of a dataclass field's annotation (a string, ``from __future__ import annotations``):
    bool, int, str, ``Literal[...]``, ``tuple[X, ...]``, each ``| None``; ``{}`` for any other (unchecked)."""
    kind = annotation.split(" | ")[0]
    simple: dict[str, dict[str, Any]] = {"bool": {"type": "boolean"}, "int": {"type": "integer"},
                                         "str": {"type": "string"}}
    if kind in simple:
        return simple[kind]
    literal = re.fullmatch(r"Literal\[(.*)\]", kind)
    if literal:
        return {"enum": [v.strip().strip("'\"") for v in literal.group(1).split(",")]}
    items = re.fullmatch(r"tuple\[(.*), \.\.\.\]", kind)
    if items:
        return {"type": "array", "items": annotation_schema(items.group(1))}
    return {}


def schema_problem(data: Any, schema: dict[str, Any], noun: str = "key") -> str | None:
    """The first problem of ``data`` against ``schema`` as one line, or None when it is valid.

    ``noun`` names the keys of an object in an unknown-key message ("setting" for configs).
    """
    # the shallowest, most relevant error (a missing or unknown key before a nested type)
    error = best_match(StrictValidator(schema).iter_errors(data))
    if error is None:
        return None
    return _message(error, noun).replace("\n", " ")
