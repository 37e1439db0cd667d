"""The ``--runner mrv2`` wiring of ``asyncspec fuzz`` / ``replay`` (cli/fuzz_command.py, cli/mrv2_reexec.py), without vLLM.

The MRV2 campaigns themselves are the slow tier (tests/statemachine_tests/vllm_engine/test_vllm_engine_mrv2.py).
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from asyncspec.engine.vllm.mrv2_runner import mrv2_environment
from asyncspec.cli.mrv2_reexec import replay_runner
from asyncspec.cli.main import main


def test_runner_is_an_option_of_the_engine_target_only() -> None:
    result = CliRunner().invoke(main, ["fuzz", "--target", "vllm", "--runner", "mrv2", "--examples", "1"])
    assert result.exit_code == 2 and "--runner is an option of --target vllm-engine" in result.output


def test_a_missing_triton_folder_is_one_line_with_the_install_command(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ASYNCSPEC_TRITON_DIR", str(tmp_path / "none"))
    monkeypatch.delenv("VLLM_USE_V2_MODEL_RUNNER", raising=False)
    result = CliRunner().invoke(main, ["fuzz", "--target", "vllm-engine", "--runner", "mrv2", "--examples", "1"])
    assert result.exit_code == 2
    assert result.output.count("\n") == 1 and "--no-deps --target" in result.output and "triton==3.9.0" in result.output


def test_a_replay_file_names_its_runner(tmp_path: Path) -> None:
    mrv2, old, bad = tmp_path / "a.json", tmp_path / "b.json", tmp_path / "c.json"
    mrv2.write_text(json.dumps({"case": {"engine": {"runner": "mrv2"}}}))
    old.write_text(json.dumps({"case": {"engine": {}}}))
    bad.write_text("not json")
    assert [replay_runner(p) for p in (mrv2, old, bad, tmp_path / "gone.json")] == ["mrv2", "v1", "v1", "v1"]


def test_the_mrv2_environment_puts_the_private_triton_first() -> None:
    env = mrv2_environment({"PYTHONPATH": "/x"}, Path("/t"))
    assert env["PYTHONPATH"] == os.pathsep.join(["/t", "/x"])
    assert (env["TRITON_INTERPRET"], env["CUDA_VISIBLE_DEVICES"], env["VLLM_USE_V2_MODEL_RUNNER"]) == ("1", "", "1")
