"""The Ray paths in the default tier: a short ``check --ray local`` and a short
``fuzz --target reference --ray local``, each the same JSON (apart from timing)
as the run in one process.

``.ci/run`` installs the ``ray`` extra, so in CI (``CI`` set) a missing Ray
fails here; on a developer's machine without it these tests skip.  Each starts
a local Ray cluster of two CPUs (about 10-20 s on a 2-core machine).
"""
from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import cli_json, run_cli

COST = ("seconds", "cpu_seconds", "bytes_per_state", "explorer")
"""What a check's config entry may differ in between one process and Ray: time, memory, the explorer's name."""


@pytest.fixture(autouse=True)
def _ray() -> None:
    if importlib.util.find_spec("ray") is None:
        reason = "Ray is not installed (pip install -e '.[ray]')"
        if os.environ.get("CI"):
            pytest.fail(f"the Ray tests cannot run in CI: {reason} (.ci/run installs it)", pytrace=False)
        pytest.skip(reason)


def without_cost(data: dict[str, Any]) -> dict[str, Any]:
    """A check's JSON without its cost fields."""
    return data | {"configs": [{k: v for k, v in c.items() if k not in COST} for c in data["configs"]]}


@pytest.mark.parametrize("explorer, config", [("compiled", "finding-stream-paused-starves"), ("fast", "async-free")])
def test_check_on_local_ray_is_the_one_process_check(explorer: str, config: str, tmp_path: Path) -> None:
    """The same JSON as one process; on the compiled explorer a finding config: its livelock, found
    on the edges the actors' expansions gave, and the trace."""
    if explorer == "compiled":
        from asyncspec.checker.compiled import built

        if not built():
            pytest.skip("the C extension is not built")
    configs = ("-c", config, "--explorer", explorer)
    code, one = cli_json("check", *configs, "--jobs", "1", cwd=tmp_path)
    ray_code, ray = cli_json("check", *configs, "--ray", "local", "--jobs", "2", cwd=tmp_path)
    assert (code, ray_code) == (0, 0)
    assert [c["explorer"] for c in ray["configs"]] == [f"{explorer}, ray x2"]
    assert one["configs"][0]["distinct_states"] > 1000  # not a trivial config
    assert explorer == "fast" or one["configs"][0]["violations"][0]["trace"]
    assert without_cost(ray) == without_cost(one)


def fuzz_json(folder: Path, *extra: str) -> tuple[int, dict[str, Any]]:
    """``asyncspec fuzz --target reference --examples 40 --seed 3 --json EXTRA`` run in ``folder``."""
    folder.mkdir()
    p = run_cli("fuzz", "--target", "reference", "--examples", "40", "--seed", "3", *extra, "--json", cwd=folder)
    return p.returncode, json.loads(p.stdout)


@pytest.mark.slow  # the default tier runs --ray with check (test_check_on_local_ray_is_the_one_process_check)
def test_fuzz_campaign_on_local_ray_is_the_one_job_campaign(tmp_path: Path) -> None:
    """40 examples are two shards: two Ray tasks, merged as one process merges them."""
    code, one = fuzz_json(tmp_path / "one", "--jobs", "1")
    ray_code, ray = fuzz_json(tmp_path / "ray", "--ray", "local", "--jobs", "2")
    assert (code, ray_code) == (0, 0)
    assert one["examples"] == 40 and one["events"] > 0 and one["divergences"] == 0
    assert {k: v for k, v in ray.items() if k != "timing"} == {k: v for k, v in one.items() if k != "timing"}


@pytest.mark.parametrize("command", [["check", "-c", "sync-d1"],
                                     ["fuzz", "--target", "reference", "--examples", "4"]])
def test_an_unreachable_ray_address_is_one_line_and_exit_2_within_seconds(command: list[str]) -> None:
    """``ray.init`` retries an address nobody listens on for minutes: the tool asks first."""
    start = time.monotonic()
    p = subprocess.run([sys.executable, "-m", "asyncspec", *command, "--ray", "127.0.0.1:9"],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 2, p.stderr
    lines = [line for line in p.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "cannot reach the Ray cluster at '127.0.0.1:9'" in lines[0]
    assert time.monotonic() - start < 60
