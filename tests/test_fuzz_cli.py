"""``asyncspec fuzz`` budgets from the command line: bad input is one line and exit 2."""
from __future__ import annotations

import pytest
from click.testing import CliRunner

from asyncspec.main import main


@pytest.mark.parametrize("args, word", [
    (["--examples", "0"], "--examples"), (["--seconds", "-1"], "--seconds"), (["--seconds", "nan"], "--seconds"),
    (["--jobs", "0"], "--jobs"), (["--examples", "5", "--ray", "127.0.0.1:1"], "Ray"),
    (["--examples", "5", "--ray", "nonsense"], "--ray"), (["--jobs", "2"], "--jobs")])
def test_bad_budget_is_one_line_exit_2(args: list[str], word: str) -> None:
    target = "vllm-engine" if args == ["--jobs", "2"] else "reference"
    result = CliRunner().invoke(main, ["fuzz", "--target", target, *args])
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and word in lines[0], result.output
