"""Shared fixtures: the named configs and a runner for the CLI."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any



def run_cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``python -m asyncspec ARGS`` and capture its output."""
    return subprocess.run([sys.executable, "-m", "asyncspec", *args], capture_output=True,
                          text=True, cwd=cwd, timeout=600)


def cli_json(*args: str, cwd: Path | None = None) -> tuple[int, Any]:
    """Run the CLI with ``--json``; (exit code, parsed stdout)."""
    p = run_cli(*args, "--json", cwd=cwd)
    return p.returncode, json.loads(p.stdout)
