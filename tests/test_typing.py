"""The whole package type-checks under ``mypy --strict`` (slow tier: about a minute).

mypy cannot follow the editable install's folder mapping, so the package is
installed into a temporary target first and checked there as ``asyncspec``.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.slow
def test_package_is_strictly_typed(tmp_path: Path) -> None:
    pytest.importorskip("mypy")
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target),
                    str(ROOT)], check=True, capture_output=True, timeout=300)
    env = dict(os.environ, MYPYPATH=str(target))
    p = subprocess.run([sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml"),
                        "-p", "asyncspec"], capture_output=True, text=True, cwd=tmp_path, env=env,
                       timeout=600)
    assert p.returncode == 0, p.stdout[-3000:]
