"""``asyncspec fuzz`` on older vLLM releases, each in its own venv (slow tier).

The venvs are ``$ASYNCSPEC_VLLM_VENVS/vllm-VERSION`` (default ``/root/venvs``;
``engine/vllm/install.md``); a release whose venv is absent is skipped.  In each,
``fuzz --target vllm --examples 60 --seed 1 --json`` exits 0 or 3 (never 70),
names the release driven and skips exactly the parts whose surface it lacks
(without Triton: ``depth3`` on 0.30.0-0.32.0; on 0.30.0 also ``connector`` and
``long-prompt``); a short ``--target vllm-engine`` names the release too and never
exits 70 (0.30.0 diverges on grammar requests: exit 1 is a finding, not a crash).
"""
from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.cli_contract import assert_matches_schema

VENVS = Path(os.environ.get("ASYNCSPEC_VLLM_VENVS", "/root/venvs"))
SKIPPED = {"0.30.0": ["depth3", "connector", "long-prompt"], "0.31.0": ["depth3"], "0.32.0": ["depth3"]}
"""The parts ``--target vllm`` skips per release in a process without Triton (``install.md``)."""


def fuzz_in(version: str, tmp_path: Path, *args: str) -> tuple[int, dict[str, Any], str]:
    """``asyncspec fuzz ARGS --json`` in the release's venv: exit code, the JSON, stderr."""
    python = VENVS / f"vllm-{version}" / "bin" / "python"
    if not python.exists():
        pytest.skip(f"no venv for vllm {version} at {python.parent.parent} (engine/vllm/install.md)")
    env = {k: v for k, v in os.environ.items() if k != "VLLM_LOGGING_STREAM"}
    p = subprocess.run([str(python), "-m", "asyncspec", "fuzz", *args, "--json", "--out-dir", str(tmp_path)],
                       capture_output=True, text=True, timeout=900, env=env)
    assert p.returncode != 70, p.stderr[-3000:]
    return p.returncode, json.loads(p.stdout), p.stderr


@pytest.mark.slow
@pytest.mark.parametrize("version", sorted(SKIPPED))
def test_fuzz_vllm_on_an_older_release_skips_what_it_lacks(version: str, tmp_path: Path) -> None:
    code, data, err = fuzz_in(version, tmp_path, "--target", "vllm", "--examples", "60", "--seed", "1")
    skipped = [p["part"] for p in data["skipped_parts"]]
    assert code in (0, 3) and (code == 3) == bool(skipped), err[-2000:]
    assert data["vllm"]["version"] == version and data["vllm"]["path"]
    assert skipped == SKIPPED[version], data["skipped_parts"]
    for p in data["skipped_parts"]:
        assert f"skipped part {p['part']}: {p['reason']}" in err
    assert data["examples"] + sum(p["examples"] for p in data["skipped_parts"]) == 60
    assert_matches_schema(data, "fuzz")


@pytest.mark.slow
@pytest.mark.parametrize("version", sorted(SKIPPED))
def test_fuzz_vllm_engine_on_an_older_release_names_it(version: str, tmp_path: Path) -> None:
    code, data, err = fuzz_in(version, tmp_path, "--target", "vllm-engine", "--examples", "20", "--depth", "2",
                              "--seed", "0")
    assert code in (0, 1, 3), err[-2000:]
    assert data["vllm_version"] == data["vllm"]["version"] == version
    assert data["skipped_parts"] == [] and data["examples"] == 20
    assert_matches_schema(data, "fuzz-vllm-engine")
