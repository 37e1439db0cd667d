"""``asyncspec check`` with the fast explorer: --explorer, --jobs, --ray,
--max-memory, checkpoints, the cost fields of --json, one-line errors."""
from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import cli_json, run_cli

_COST = ("seconds", "cpu_seconds", "bytes_per_state", "explorer")


def _verdicts(data: Any) -> list[dict[str, Any]]:
    """A check's JSON without what differs between runs (time, memory, the explorer's name)."""
    return [{k: v for k, v in c.items() if k not in _COST} for c in data["configs"]]


def test_json_reports_cpu_seconds_and_bytes_per_state() -> None:
    code, data = cli_json("check", "-c", "async-free", "--explorer", "fast")
    assert code == 0
    c = data["configs"][0]
    assert c["explorer"] == "fast" and c["cpu_seconds"] > 0 and c["bytes_per_state"] >= 0


@pytest.mark.slow  # the default tier compares the explorers config by config (tests/test_fast_explorer.py)
def test_fast_plain_and_jobs_2_agree() -> None:
    runs = [cli_json("check", "-c", "default", *extra) for extra in
            ((), ("--explorer", "plain"), ("--explorer", "fast", "--jobs", "2"))]
    assert [code for code, _ in runs] == [0, 0, 0]
    assert _verdicts(runs[0][1]) == _verdicts(runs[1][1]) == _verdicts(runs[2][1])
    assert [c["explorer"] for c in runs[2][1]["configs"]][:1] == ["fast x2"]


def test_a_run_stopped_by_max_states_resumes_to_the_whole_result(tmp_path: Path) -> None:
    whole_code, whole = cli_json("check", "-c", "async-free")
    code, partial = cli_json("check", "-c", "async-free", "--max-states", "2000", "--checkpoint", str(tmp_path))
    assert code == 3 and partial["configs"][0]["partial"] and (tmp_path / "async-free.ckpt").exists()
    code, resumed = cli_json("check", "-c", "async-free", "--checkpoint", str(tmp_path), "--resume")
    assert (code, whole_code) == (0, 0) and _verdicts(resumed) == _verdicts(whole)


def test_a_checkpoint_of_another_config_exits_2(tmp_path: Path) -> None:
    run_cli("check", "-c", "async-d2-aborts", "--max-states", "100", "--checkpoint", str(tmp_path))
    shutil.copy(tmp_path / "async-d2-aborts.ckpt", tmp_path / "async-free.ckpt")
    p = run_cli("check", "-c", "async-free", "--checkpoint", str(tmp_path), "--resume")
    assert p.returncode == 2 and p.stderr.count("\n") == 1 and "async-d2-aborts" in p.stderr


@pytest.mark.parametrize("args, message", [
    (("--jobs", "0"), "--jobs must be at least 1"),
    (("--max-memory", "1K"), "is below what the process holds"),
    (("--max-memory", "lots"), "cannot read memory size"),
    (("--explorer", "plain", "--jobs", "2"), "--jobs needs --explorer fast"),
    (("--resume",), "--resume needs --checkpoint"),
])
def test_bad_settings_give_one_line_errors(args: tuple[str, ...], message: str) -> None:
    p = run_cli("check", "-c", "async-d2", *args)
    assert p.returncode == 2 and p.stderr.count("\n") == 1 and message in p.stderr, p.stderr


@pytest.mark.slow
def test_max_memory_gives_a_partial_report_and_exit_3() -> None:
    # the CLI starts at about 40 MiB resident; async-d2-large takes it past 60 MiB
    p = run_cli("check", "-c", "async-d2-large", "--max-memory", "52M")
    assert p.returncode == 3 and "partial: stopped at --max-memory 52 MiB" in p.stdout, p.stdout + p.stderr


@pytest.mark.slow  # the default tier compares them mutant by mutant (tests/test_fast_explorer.py)
def test_mutants_fast_and_plain_agree() -> None:
    fast = cli_json("mutants", "--explorer", "fast")
    plain = cli_json("mutants", "--explorer", "plain")
    assert fast == plain and fast[0] == 0


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("ray") is None, reason="Ray is not installed (asyncspec[ray])")
def test_a_two_worker_local_ray_run_agrees_with_one_process() -> None:
    one = cli_json("check", "-c", "async-free", "-c", "async-d2-aborts")
    ray = cli_json("check", "-c", "async-free", "-c", "async-d2-aborts", "--ray", "local", "--jobs", "2")
    assert one[0] == ray[0] == 0 and _verdicts(one[1]) == _verdicts(ray[1])
    assert ray[1]["configs"][0]["explorer"] == "fast, ray x2"
