"""``fuzz --vllm-coverage FILE``: a short campaign writes a valid report whose totals are the JSON's; without
coverage.py one line and exit 2.  The same report for any ``--jobs`` (the workers followed) and the engine
target's counted runner scenarios are the slow tier's."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from asyncspec.statemachine_tests.core.coverage_reasons import COUNTED, MEASURED
from asyncspec.statemachine_tests.core.coverage_report import totals
from tests.cli_contract import assert_matches_schema
from tests.vllm_guard import require_pinned_vllm

require_pinned_vllm()
pytest.importorskip("coverage")


def _fuzz(tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "asyncspec", "fuzz", "--json", "--out-dir", str(tmp_path / "t"),
                           *args], capture_output=True, text=True, cwd=tmp_path, timeout=1800,
                          env={**os.environ, **(env or {})})


def _check_report(report: dict[str, Any]) -> None:
    assert set(report["files"]) == set(MEASURED)
    for entry in report["files"].values():
        for function in entry["functions"].values():
            assert set(function) == {"lines", "arcs", "unreached_arcs", "why_unreachable"}
            (lines_hit, lines), (arcs_hit, arcs) = function["lines"], function["arcs"]
            assert 0 <= lines_hit <= lines and lines > 0 and 0 <= arcs_hit <= arcs
            assert len(function["unreached_arcs"]) == arcs - arcs_hit
            assert set(function["why_unreachable"]) <= {f"{a}->{b}" for a, b in function["unreached_arcs"]}


def test_a_short_scheduler_campaign_writes_the_report_its_json_sums(tmp_path: Path) -> None:
    done = _fuzz(tmp_path, "--target", "vllm", "--examples", "20", "--vllm-coverage", "cov.json")
    assert done.returncode == 0, done.stderr[-2000:]
    summary = json.loads(done.stdout)
    report = json.loads((tmp_path / "cov.json").read_text())
    _check_report(report)
    assert summary["vllm_coverage"] == totals(report)
    assert_matches_schema(summary, "fuzz")
    schedule = report["files"]["vllm/v1/core/sched/scheduler.py"]["functions"]["Scheduler.schedule"]
    assert schedule["arcs"][0] > 100
    assert "vllm coverage: lines" in done.stderr
    assert set(report["counted"]) == {s.name for s in COUNTED}  # the scheduler target runs no model runner
    assert all(c["calls"] == 0 and c["count"] == 0 for c in report["counted"].values())


def test_without_coverage_py_the_option_is_one_line_and_exit_2(tmp_path: Path) -> None:
    shadow = tmp_path / "shadow"
    shadow.mkdir()
    (shadow / "coverage.py").write_text('raise ImportError("No module named \'coverage\'")\n')
    done = _fuzz(tmp_path, "--target", "vllm", "--examples", "20", "--vllm-coverage", "cov.json",
                 env={"PYTHONPATH": str(shadow)})
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and "--vllm-coverage needs coverage.py" in done.stderr
    assert not (tmp_path / "cov.json").exists()


@pytest.mark.slow
def test_the_report_is_the_same_for_any_jobs(tmp_path: Path) -> None:
    """With ``--jobs 2`` the two shards run in two workers: the same report means both were followed."""
    reports = []
    for jobs in ("1", "2"):
        done = _fuzz(tmp_path, "--target", "vllm", "--examples", "40", "--jobs", jobs, "--vllm-coverage",
                     f"cov{jobs}.json")
        assert done.returncode == 0, done.stderr[-2000:]
        reports.append((tmp_path / f"cov{jobs}.json").read_bytes())
    assert reports[0] == reports[1]


@pytest.mark.slow
def test_the_engine_target_counts_the_runner_scenarios(tmp_path: Path) -> None:
    done = _fuzz(tmp_path, "--target", "vllm-engine", "--examples", "20", "--vllm-coverage", "cov.json")
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads((tmp_path / "cov.json").read_text())
    _check_report(report)
    summary = json.loads(done.stdout)
    assert summary["vllm_coverage"] == totals(report)
    assert_matches_schema(summary, "fuzz-vllm-engine")
    counted = report["counted"]
    assert counted["prepare_input_ids: single-slice fast path"]["count"] > 0
    assert all(c["calls"] > 0 and c["arcs"] for c in counted.values())


@pytest.mark.slow
def test_a_part_in_its_own_process_measures_into_the_campaigns_folder(tmp_path: Path) -> None:
    """The engine campaign's ``mrv2-pp2`` part runs in a process of its own (which runs itself again in
    MRV2's environment): given the campaign's folder (``vllm_coverage.INTO``) it writes its data there,
    no report, and the campaign combines it (MRV2's own file is reached only there)."""
    from asyncspec.statemachine_tests.core import vllm_coverage

    assert vllm_coverage.child_environment() == {}  # nothing measured in this process
    folder = tmp_path / "campaign"
    folder.mkdir()
    done = _fuzz(tmp_path, "--target", "vllm-engine", "--runner", "mrv2", "--depth", "3", "--examples", "2",
                 env={vllm_coverage.INTO: str(folder)})
    if done.returncode == 2 and "needs Triton" in done.stderr:
        pytest.skip(done.stderr.strip().splitlines()[-1])
    assert done.returncode == 0, done.stderr[-2000:]
    assert "vllm_coverage" not in json.loads(done.stdout) and not (tmp_path / "cov.json").exists()
    import coverage

    combined = coverage.Coverage(data_file=str(folder / "data"))  # as the campaign combines
    combined.combine(data_paths=[str(folder)])
    measured = combined.get_data().measured_files()
    assert any(f.endswith("v1/worker/gpu/async_utils.py") for f in measured), sorted(measured)[:5]
