"""Release settings and back-test findings on the older releases themselves (slow tier).

Each older release runs in its own venv, ``$ASYNCSPEC_VLLM_VENVS/vllm-VERSION`` (default
``/root/venvs``; made as ``tests/engine/test_vllm_older_releases.py`` says); a release whose venv
is absent is skipped with the reason.  The traces in ``tests/data/releases`` were shrunk by the
default campaign on those releases:

* a release setting's trace diverges on its release with the settings off
  (``ASYNCSPEC_RELEASE_SETTINGS=none``) and agrees with them on: the setting covers exactly it;
* a finding's trace (V5, V6) diverges on its release, settings on, and agrees on the release
  that fixed it.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cli_contract import assert_matches_schema

VENVS = Path(os.environ.get("ASYNCSPEC_VLLM_VENVS", "/root/venvs"))
DATA = Path(__file__).resolve().parent.parent / "data" / "releases"

pytestmark = pytest.mark.slow


def _python(version: str) -> str:
    if version == "0.33.0":
        return sys.executable
    python = VENVS / f"vllm-{version}" / "bin" / "python"
    if not python.exists():
        pytest.skip(f"no venv for vLLM {version} at {python.parent.parent}")
    return str(python)


def _replay(version: str, trace: str, settings: bool = True, target: str = "vllm") -> int:
    env = dict(os.environ)
    env.pop("ASYNCSPEC_RELEASE_SETTINGS", None)
    if not settings:
        env["ASYNCSPEC_RELEASE_SETTINGS"] = "none"
    done = subprocess.run([_python(version), "-m", "asyncspec", "replay", str(DATA / trace), "--target", target],
                          capture_output=True, text=True, env=env, timeout=600, check=False)
    assert done.returncode in (0, 1), done.stderr[-2000:]
    return done.returncode


@pytest.mark.parametrize("trace, target", [("stop-trim-0.32.0.json", "vllm"), ("null-head-0.32.0.json", "vllm"),
                                           ("sync-drafts-engine-0.32.0.json", "vllm-engine")])
def test_an_older_release_diverges_without_its_setting_and_agrees_with_it(trace: str, target: str) -> None:
    assert _replay("0.32.0", trace, settings=False, target=target) == 1
    assert _replay("0.32.0", trace, target=target) == 0
    assert _replay("0.33.0", trace, target=target) == 0


def test_blocked_in_skipped_waiting_makes_the_divergence_the_order() -> None:
    """Without the setting 0.30.0's grammar request is missing from waiting; with it, it is there,
    in the wrong place (finding V6)."""
    assert _replay("0.30.0", "v6-arrival-0.30.0.json", settings=False) == 1
    assert _replay("0.30.0", "v6-arrival-0.30.0.json") == 1
    assert _replay("0.31.0", "v6-arrival-0.30.0.json") == 0


@pytest.mark.parametrize("trace, release, fixed_in", [
    ("v5-priority-0.32.0.json", "0.32.0", "0.33.0"),
    ("v6-preempted-0.30.0.json", "0.30.0", "0.31.0"),
])
def test_a_finding_diverges_on_its_release_and_not_on_the_fix(trace: str, release: str, fixed_in: str) -> None:
    assert _replay(release, trace) == 1
    assert _replay(fixed_in, trace) == 0


def test_a_short_backtest_over_a_real_older_release(tmp_path: Path) -> None:
    older = _python("0.32.0")
    done = subprocess.run([sys.executable, "-m", "asyncspec", "backtest", older, sys.executable, "--target", "vllm",
                           "--examples", "40", "--out-dir", str(tmp_path), "--json"],
                          capture_output=True, text=True, timeout=900, check=False)
    data = json.loads(done.stdout)
    assert_matches_schema(data, "backtest")
    assert [r["version"] for r in data["releases"]] == ["0.32.0", "0.33.0"]
    first = data["releases"][0]
    assert "vllm:base" in first["parts_run"]
    assert [s["part"] for s in first["parts_skipped"]] == ["vllm:depth3"]
    assert first["runs"][0]["release_settings"] == ["stop-trim-keeps-counters", "null-head-in-deferred-frees"]
    assert done.returncode == (1 if any(b["classification"] == "unclassified" for b in first["buckets"]) else 0)
