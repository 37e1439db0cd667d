"""The progress line (issue 15, item 6): redrawn in place on a terminal, plain periodic
lines on stderr otherwise, nothing in ``--json`` mode."""
from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
import time

import pytest

from asyncspec.checker.progress import ProgressLine, choose_mode

ANSI = re.compile(r"\x1b\[")


def run(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if k != "ASYNCSPEC_PROGRESS"}
    return subprocess.run([sys.executable, "-m", "asyncspec", *args], capture_output=True, text=True,
                          env=environ | {"ASYNCSPEC_PROGRESS_SECONDS": "0.1"} | env, timeout=300)


def test_check_prints_plain_periodic_lines_when_stderr_is_not_a_terminal() -> None:
    # > 1 s on the fast explorer, which reports every 0.5 s (the compiled one is done in well under 1 s)
    p = run("check", "-c", "async-d2-large", "--max-states", "80000", "--explorer", "fast")
    assert p.returncode == 3, p.stderr
    lines = [line for line in p.stderr.splitlines() if line.startswith("asyncspec: check async-d2-large: ")]
    assert len(lines) >= 2, p.stderr
    assert all(re.search(r"[\d,]+ states \([\d,]+/s\), queue [\d,]+, depth \d+$", line) for line in lines), lines
    assert "\r" not in p.stderr and not ANSI.search(p.stderr)


def test_json_mode_prints_no_progress() -> None:
    p = run("check", "-c", "async-d2-large", "--max-states", "20000", "--json")
    assert p.returncode == 3 and json.loads(p.stdout)["result"] == "partial"
    assert "states" not in p.stderr, p.stderr
    p = run("fuzz", "--target", "reference", "--examples", "20", "--json")
    assert p.returncode == 0 and json.loads(p.stdout)["examples"] == 20
    assert "examples" not in p.stderr, p.stderr


def test_fuzz_and_prove_progress_lines() -> None:
    p = run("fuzz", "--target", "reference", "--examples", "40", "--seed", "1")
    assert p.returncode == 0, p.stderr
    assert re.search(r"^asyncspec: fuzz reference: \d+/40 examples \(.*/s\), coverage \d+/\d+ categories$",
                     p.stderr, re.M), p.stderr
    p = run("prove", "--only", "async admit")
    assert p.returncode == 0, p.stderr
    assert re.search(r"^asyncspec: prove: \d+ obligations done, \d+ proved$", p.stderr, re.M), p.stderr


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_on_a_terminal_the_line_is_redrawn_in_place_and_taken_away() -> None:
    screen = Terminal()
    with ProgressLine("check x", stream=screen) as line:
        assert line.mode == "tty"
        for n in range(3):
            line.update(f"{n} states", force=True)
    shown = screen.getvalue()
    assert "check x: 2 states" in shown and ANSI.search(shown)  # cursor control: redrawn, not appended
    assert shown.count("\n") <= 1 and line.lines == 0


def test_modes_and_throttling(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ASYNCSPEC_PROGRESS", raising=False)
    assert choose_mode(True, Terminal()) == "off" and choose_mode(False, io.StringIO()) == "plain"
    monkeypatch.setenv("ASYNCSPEC_PROGRESS_SECONDS", "60")
    log = io.StringIO()
    line = ProgressLine("fuzz", stream=log)
    line.update("1 examples")
    line.update("2 examples")  # within the interval: not printed
    assert log.getvalue() == "asyncspec: fuzz: 1 examples\n" and not line.due()
    quiet = ProgressLine("fuzz", quiet=True, stream=log)
    quiet.update("3 examples", force=True)
    assert log.getvalue().count("\n") == 1
    monkeypatch.setenv("ASYNCSPEC_PROGRESS_SECONDS", "0")
    line = ProgressLine("fuzz", stream=log)
    line.update("4 examples")
    time.sleep(0.01)
    line.update("5 examples")
    assert line.lines == 2
