"""The command line starts at once: the group imports no command until one runs, and nothing heavy.

``asyncspec --help`` lists every command from ``cli/main.py``'s table; the
listing must say what each command's own help says, and the start-up must not
import the heavy libraries (the time it takes is ``bench/bench_cli.py``'s
figure; no test here is timed).
"""
from __future__ import annotations

import json
import re
import subprocess
import sys

import click
import pytest
from click.testing import CliRunner

from asyncspec.cli.contract import ContractCommand
from asyncspec.cli.main import COMMANDS, main

HEAVY = ("networkx", "jsonschema", "z3", "hypothesis", "torch", "vllm")
"""Libraries the command line's start-up must not import."""


def test_importing_the_command_line_imports_nothing_heavy() -> None:
    code = ("import json, sys; import asyncspec.cli.main; "
            f"print(json.dumps(sorted(m.split('.')[0] for m in sys.modules if m.split('.')[0] in {HEAVY!r})))")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout) == []


def _imported(*args: str) -> set[str]:
    """The top-level packages ``python -m asyncspec ARGS`` imports (``-X importtime``)."""
    p = subprocess.run([sys.executable, "-X", "importtime", "-m", "asyncspec", *args], capture_output=True,
                       text=True, timeout=60)
    assert p.returncode in (0, 2), p.stderr[-2000:]
    return {m.group(1).split(".")[0] for m in re.finditer(r"^import time:.*\|\s+(\S+)$", p.stderr, re.M)}


@pytest.mark.parametrize("args", [("--help",), ("check", "--max-states", "0"), ("demo", "extra")])
def test_the_listing_and_a_bad_usage_error_import_nothing_heavy(args: tuple[str, ...]) -> None:
    imported = _imported(*args)
    assert "click" in imported  # the measurement sees imports at all
    assert imported & {*HEAVY, "rich"} == set()


def test_the_table_lists_every_command_with_the_short_help_of_its_docstring() -> None:
    assert [e.name for e in COMMANDS] == sorted(e.name for e in COMMANDS)
    for entry in COMMANDS:
        command = entry.load()
        assert isinstance(command, ContractCommand) and command.name == entry.name
        listed = click.Command(entry.name, help=entry.short_help)
        for limit in (20, 45, 60, 10_000):  # as wide or narrow as a terminal makes the listing
            assert listed.get_short_help_str(limit) == command.get_short_help_str(limit), (entry.name, limit)


def test_the_group_help_lists_every_command() -> None:
    text = CliRunner().invoke(main, ["--help"]).output
    listed = re.findall(r"^  (\S+)\s{2,}", text[text.index("Commands:"):], re.M)
    assert listed == [e.name for e in COMMANDS]


WATCH = """
import json, runpy, signal, sys
handled = {}
class Watch:
    def find_spec(self, name, path=None, target=None):
        if name in WATCHED and name not in handled:
            handled[name] = signal.getsignal(signal.SIGTERM) not in (signal.SIG_DFL, None)
        return None
sys.meta_path.insert(0, Watch())
sys.argv = ["asyncspec", *ARGS]
try:
    runpy.run_module("asyncspec", run_name="__main__", alter_sys=True)
except SystemExit:
    pass
print("HANDLED " + json.dumps(handled), file=sys.stderr)
"""


def test_the_signal_handlers_come_before_click_and_anything_heavy() -> None:
    """``python -m asyncspec configs``: at the first import of click, rich, jsonschema and the checker
    SIGTERM already has the program's handler (so a signal then is one line and exit 3)."""
    watched = ["click", "rich", "jsonschema", "asyncspec.checker.configs"]
    code = f"WATCHED = {watched!r}\nARGS = ['configs']\n" + WATCH
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    handled = json.loads(p.stderr.strip().splitlines()[-1].removeprefix("HANDLED "))
    assert handled == {name: True for name in watched}, p.stderr[-2000:]
