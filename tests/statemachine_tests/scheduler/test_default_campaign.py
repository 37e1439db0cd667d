"""The default campaign of ``asyncspec fuzz --target reference|vllm``: the mix over the configuration space.

Cheap checks (the reference target, no vLLM import): what runs without ``--profile``, which parts the
reference keeps, and the JSON that lets a reader see which parts and depths ran.  The vLLM campaign at
its documented size is ``tests/statemachine_tests/scheduler/test_campaigns.py`` (``-m campaign``).
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from asyncspec.cli.fuzz_options import default_profile
from asyncspec.cli.main import main
from asyncspec.statemachine_tests.scheduler.fuzz import fuzz_main
from asyncspec.statemachine_tests.scheduler.profiles import (
    ALL_PROFILE, BASE_PROFILE, DEFAULT_PROFILE_NAME, PROFILES, for_target, part_names, profile_name,
    reference_gaps,
)
from tests.cli_contract import assert_matches_schema


def test_without_profile_reference_and_vllm_run_all_and_vllm_engine_its_own_default() -> None:
    assert DEFAULT_PROFILE_NAME == "all" and PROFILES["all"] is ALL_PROFILE
    assert default_profile("vllm") == default_profile("reference") == "all"
    assert default_profile("vllm-engine") == "default"
    assert "default" not in PROFILES and PROFILES["base"] == BASE_PROFILE  # today's base was `default`


def test_the_mix_has_depth_3_hybrid_groups_and_connectors_and_the_reference_keeps_what_it_models() -> None:
    names = part_names(ALL_PROFILE)
    assert {"base", "depth3", "hybrid", "connector", "priority", "long-prompt", "pause", "kv-recovery",
            "streaming"} <= set(names)
    assert names[1] == "depth3" and len(names) == 20 and names[10:] == ["reset", "self-hit", "reset-storm", "pause",
                                                                       "kv-recovery", "streaming", "encoder",
                                                                       "offload", "mamba", "stop"]
    on_reference = for_target(ALL_PROFILE, "reference")
    assert part_names(on_reference) == ["base", "depth3", "prefix-caching", "reset", "self-hit", "reset-storm"]
    assert reference_gaps(on_reference) == [] and profile_name(on_reference) == "all"
    assert for_target(ALL_PROFILE, "vllm") is ALL_PROFILE


def test_default_reference_json_says_which_parts_and_depths_ran(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert fuzz_main("reference", 600.0, 0, True, False, tmp_path, examples=60) == 0
    data = json.loads(capsys.readouterr().out)
    assert_matches_schema(data, "fuzz")
    assert data["profile"] == "all"
    assert data["parts"] == {"base": 20, "depth3": 20, "prefix-caching": 20, "reset": 0, "self-hit": 0, "reset-storm": 0}
    assert data["depths"]["3"] == 20 and sum(data["depths"].values()) == data["examples"] == 60
    assert set(data["depths"]) == {"1", "2", "3"}


def test_fuzz_help_names_the_default() -> None:
    text = " ".join(CliRunner().invoke(main, ["fuzz", "--help"]).output.split())
    assert "default all" in text and "depth3" in text


def test_the_bare_command_runs_the_default_campaign_at_its_saturating_size() -> None:
    """Neither --examples nor --seconds: reference and vllm run fixed work of DEFAULT_EXAMPLES (so the
    bare command reaches every witness, and its result reproduces); any budget given is kept."""
    from asyncspec.cli.fuzz_options import default_budget
    from asyncspec.statemachine_tests.scheduler.profiles import DEFAULT_EXAMPLES

    assert DEFAULT_EXAMPLES == 1800
    assert default_budget("vllm", None, None) == default_budget("reference", None, None) == (1800, 3600.0)
    assert default_budget("vllm", None, 10.0) == (None, 10.0)  # a time-bounded run when asked for
    assert default_budget("vllm", 50, None) == (50, 3600.0)
    assert default_budget("vllm-engine", None, None) == default_budget("sglang", None, None) == (None, 30.0)
