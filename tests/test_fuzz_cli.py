"""``asyncspec fuzz`` budgets from the command line: bad input is one line and exit 2."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from asyncspec.cli.main import main


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


@pytest.mark.parametrize("target", ["reference", "vllm-engine"])
def test_an_out_dir_that_cannot_hold_the_replay_file_is_refused_before_the_campaign(
        target: str, tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    p = subprocess.run([sys.executable, "-m", "asyncspec", "fuzz", "--target", target, "--examples", "20",
                        "--out-dir", str(blocker / "traces")], capture_output=True, text=True, timeout=120)
    assert p.returncode == 2 and "Traceback" not in p.stderr
    assert p.stderr.strip().splitlines()[-1].startswith("fuzz: --out-dir") and "not a folder" in p.stderr


@pytest.mark.parametrize("target", ["reference", "vllm-engine"])
def test_seconds_is_an_outer_limit_of_fixed_work_exit_3_with_a_partial_report(target: str, tmp_path: Path) -> None:
    p = subprocess.run([sys.executable, "-m", "asyncspec", "fuzz", "--target", target, "--examples", "100000",
                        "--seconds", "1", "--json", "--out-dir", str(tmp_path)],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 3, p.stderr
    summary = json.loads(p.stdout)
    assert summary["result"] == "partial" and summary["examples"] < 100000
    assert p.stderr.strip().splitlines()[-1].startswith("fuzz: "), p.stderr
