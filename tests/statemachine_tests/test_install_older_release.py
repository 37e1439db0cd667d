"""An older vLLM release installed from scratch by the project's recipe, then fuzzed (campaign tier).

A fresh venv, ``.ci/install-vllm 0.32.0`` into it (``engine/vllm/install.md``: the CPU torch,
the release ``--no-deps``, its pure-Python dependencies at the bounds its own metadata gives),
the project installed there, and a short ``fuzz --target vllm`` run by that venv: it drives
0.32.0 (the JSON says so), skips only ``depth3`` (MRV2's config validation wants Triton) and
takes the release settings 0.32.0 needs.  Minutes of installing: the ``campaign`` tier.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.campaign


def _run(cmd: list[str], env: dict[str, str] | None = None, timeout: int = 1800) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout, check=False, cwd=ROOT)


def test_a_fresh_venv_with_0_32_0_runs_a_short_campaign(tmp_path: Path) -> None:
    venv = tmp_path / "vllm-0.32.0"
    assert _run([sys.executable, "-m", "venv", str(venv)]).returncode == 0
    python = str(venv / "bin" / "python")
    installed = _run(["bash", ".ci/install-vllm", "0.32.0"], env=dict(os.environ, PYTHON=python))
    assert installed.returncode == 0, installed.stderr[-3000:]
    project = _run([python, "-m", "pip", "install", "-q", "-e", f"{ROOT}[test]"])
    assert project.returncode == 0, project.stderr[-3000:]
    done = _run([python, "-m", "asyncspec", "fuzz", "--target", "vllm", "--examples", "40", "--seed", "1",
                 "--json", "--out-dir", str(tmp_path / "out")], timeout=900)
    assert done.returncode in (0, 1, 3), done.stderr[-3000:]
    data = json.loads(done.stdout)
    assert data["vllm"]["version"] == "0.32.0" and data["vllm"]["path"].startswith(str(venv))
    assert [s["part"] for s in data["skipped_parts"]] == ["depth3"]
    assert set(data["vllm"]["release_settings"]) == {"stop-trim-keeps-counters", "null-head-in-deferred-frees",
                                                     "sync-drafts-cache-at-schedule"}
