"""``bench/bench_vllm_coverage.py``: the gap listing and the check of ``vllm-tests --tests``."""
from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench" / "bench_vllm_coverage.py"


def _bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_vllm_coverage", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _report(unreached: dict[str, list[list[int]]]) -> dict[str, Any]:
    functions = {name: {"arcs": [0, 4], "lines": [0, 4], "unreached_arcs": arcs} for name, arcs in unreached.items()}
    return {"files": {"vllm/v1/core/block_pool.py": {"functions": functions}}}


def test_gap_counts_arcs_only_the_core_tests_reach(capsys: pytest.CaptureFixture[str]) -> None:
    core = _report({"BlockPool.touch": [], "BlockPool.free_blocks": [[1, 2], [2, 3]]})
    after = {"vllm": _report({"BlockPool.touch": [[5, 6], [6, 7]], "BlockPool.free_blocks": [[1, 2]]}),
             "vllm-engine": _report({"BlockPool.touch": [[5, 6], [6, 7], [7, 8]], "BlockPool.free_blocks": []})}
    _bench().gap(after, core, top=5)
    out = capsys.readouterr().out.splitlines()
    # touch: both campaigns miss 5->6 and 6->7, which the core tests reach; free_blocks: the campaigns
    # together reach both arcs the core tests miss.
    assert out[0] == "v1/core/block_pool.py: core tests ahead by 0 arcs"
    assert out[1].split() == ["+2", "BlockPool.touch", "(core", "tests", "only", "2,", "campaigns", "only", "0)"]
    assert out[2].split()[:2] == ["-2", "BlockPool.free_blocks"]


def test_vllm_tests_refuses_a_folder_that_shadows_vllm(tmp_path: Path) -> None:
    (tmp_path / "tests" / "v1" / "core").mkdir(parents=True)
    (tmp_path / "vllm").mkdir()
    done = subprocess.run([sys.executable, str(BENCH), "vllm-tests", "--tests", str(tmp_path), "--out",
                           str(tmp_path / "core.json")], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "shadow the installed vLLM" in done.stderr
    assert _bench().tests_problem(tmp_path.parent) is not None  # no tests/v1/core there
