"""The exit-code contract's test helpers: the CLI in-process (click's CliRunner) and its one-line errors.

Every input error is exactly one line on stderr besides click's own ``Usage:`` and
``Try ...`` lines (and the blank line click puts before its ``Error:`` line).
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from importlib import resources
from typing import Any

import click
import jsonschema
from click.testing import CliRunner

from asyncspec.cli.main import main


@dataclass
class Outcome:
    code: int
    stdout: str
    stderr: str

    def problem_lines(self) -> list[str]:
        """stderr without click's Usage/Try lines and blank lines."""
        return [line for line in self.stderr.splitlines()
                if line.strip() and not line.startswith(("Usage: ", "Try '"))]


def invoke(*args: str) -> Outcome:
    """``asyncspec ARGS`` in this process; exit code, stdout, stderr."""
    result = CliRunner().invoke(main, list(args), catch_exceptions=False)
    return Outcome(result.exit_code, result.stdout, result.stderr)


def commands() -> dict[str, click.Command]:
    """Every command of the group, by name, each loaded from its module (the group imports none until used)."""
    ctx = click.Context(main)
    loaded = {name: main.get_command(ctx, name) for name in main.list_commands(ctx)}
    return {name: command for name, command in loaded.items() if command is not None}


def assert_usage_error(o: Outcome, pattern: str) -> None:
    """Exit 2 and exactly one problem line matching ``pattern`` (a regular expression)."""
    lines = o.problem_lines()
    assert o.code == 2, (o.code, o.stdout[-500:], o.stderr[-500:])
    assert len(lines) == 1, o.stderr
    assert re.search(pattern, lines[0]), (pattern, lines[0])
    assert "Traceback" not in o.stderr


def schema(name: str) -> dict[str, Any]:
    """The shipped JSON Schema of one command's ``--json`` output (one file per command in ``cli/schemas/``)."""
    text = resources.files("asyncspec.cli").joinpath("schemas", f"{name}.json").read_text()
    data: dict[str, Any] = json.loads(text)
    return data


def assert_matches_schema(data: Any, name: str) -> None:
    """``data`` is valid against its schema in ``cli/schemas/`` and carries ``schema_version``."""
    s = schema(name)
    jsonschema.Draft202012Validator.check_schema(s)
    errors = sorted(jsonschema.Draft202012Validator(s).iter_errors(data), key=lambda e: list(e.path))
    assert not errors, [f"{list(e.path)}: {e.message}" for e in errors[:5]]
    assert data["schema_version"] == 1
