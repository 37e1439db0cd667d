"""A ``vllm-engine`` part (runner and depth) is skipped only when this vLLM lacks a surface it drives.

Stand-ins: ``drive_case`` records the cases it is given (no vLLM start-up) and
``surfaces.probed`` answers for an older release.  A skipped part's cases are
drawn but not run, so the cases of the other parts are exactly those of the
unskipped campaign; they fill the fixed work; the run ends partial (exit 3)
with ``skipped_parts``, ``vllm`` and the version driven in the JSON.
"""
from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from asyncspec.engine.vllm import surfaces
from asyncspec.engine.vllm.capabilities import Capabilities, MissingCapability
from asyncspec.statemachine_tests.vllm_engine import engine_campaign, engine_fuzz
from asyncspec.statemachine_tests.vllm_engine import engine_case as ec
from asyncspec.statemachine_tests.vllm_engine.engine_profile import DEFAULT_ENGINE_PROFILE, MRV2_ENGINE_PROFILE
from asyncspec.statemachine_tests.vllm_engine.engine_run import EngineRunResult


def lacking(*names: str) -> Callable[[str], Capabilities]:
    """A probe that lacks ``names`` (one line each) and has every other capability."""
    def probed(name: str) -> Capabilities:
        if name in names:
            return Capabilities(frozenset(), {name: f"vllm.Stand.in has no {name}"})
        return Capabilities(frozenset({name}), {})
    return probed


@pytest.fixture()
def seen(monkeypatch: pytest.MonkeyPatch) -> list[ec.EngineCase]:
    cases: list[ec.EngineCase] = []

    def clean(case: ec.EngineCase, choices: bytes, *_: Any) -> EngineRunResult:
        cases.append(case)
        return EngineRunResult(case.workload(), [], {}, case=case)
    monkeypatch.setattr(engine_campaign, "drive_case", clean)
    monkeypatch.setattr(engine_campaign, "explain", lambda _: None)
    return cases


def run(**kwargs: Any) -> engine_campaign.EngineCampaign:
    c = engine_campaign.EngineCampaign(seconds=float("inf"), seed=0, max_batches=3, max_examples=60, keep_going=True,
                                       **kwargs)
    assert c.run() is None
    return c


def test_the_probe_names_the_parts_an_older_release_lacks(monkeypatch: pytest.MonkeyPatch) -> None:
    assert DEFAULT_ENGINE_PROFILE.parts() == ["v1/depth1", "v1/depth2", "v1/depth3"]
    monkeypatch.setattr(surfaces, "probed", lacking())
    assert engine_fuzz.skipped_engine_parts(DEFAULT_ENGINE_PROFILE) == {}
    assert engine_fuzz.skipped_engine_parts(MRV2_ENGINE_PROFILE) == {}
    monkeypatch.setattr(surfaces, "probed", lacking(surfaces.MRV2_RUNNER, surfaces.DECODE_STAGGER))  # 0.30.0
    assert engine_fuzz.skipped_engine_parts(DEFAULT_ENGINE_PROFILE) == {}  # the V1 depth 3 does not stagger
    assert engine_fuzz.skipped_engine_parts(MRV2_ENGINE_PROFILE) == {
        f"mrv2/depth{d}": "runner.mrv2: vllm.Stand.in has no runner.mrv2" for d in (1, 2, 3)}
    monkeypatch.setattr(surfaces, "probed", lacking(surfaces.ENGINE_CORE))
    assert list(engine_fuzz.skipped_engine_parts(DEFAULT_ENGINE_PROFILE)) == DEFAULT_ENGINE_PROFILE.parts()


def test_a_skipped_part_changes_no_other_case(seen: list[ec.EngineCase]) -> None:
    run()
    every = list(seen)
    seen.clear()
    c = run(skipped={"v1/depth3": "engine.decode-stagger: vllm.Stand.in has no decode_stagger"})
    assert seen == [case for case in every if case.engine.depth != 3]
    assert c.stats.examples == len(seen) and c.stats.drawn() == 60
    assert c.stats.skipped == {"v1/depth3": 60 - len(seen)} and 0 < len(seen) < 60


def test_a_driver_missing_capability_skips_its_part_from_then_on(monkeypatch: pytest.MonkeyPatch,
                                                                  seen: list[ec.EngineCase]) -> None:
    clean = engine_campaign.drive_case

    def drive(case: ec.EngineCase, *args: Any) -> EngineRunResult:
        if case.engine.depth == 2:
            raise MissingCapability("engine-core", "vllm.Stand.in has no x")
        return clean(case, *args)
    monkeypatch.setattr(engine_campaign, "drive_case", drive)
    c = run()
    assert c.skipped == {"v1/depth2": "engine-core: vllm.Stand.in has no x"}
    assert all(case.engine.depth != 2 for case in seen) and c.stats.drawn() == 60


def test_engine_fuzz_json_names_the_version_and_the_skipped_parts(
        monkeypatch: pytest.MonkeyPatch, seen: list[ec.EngineCase], tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    from tests.cli_contract import assert_matches_schema

    monkeypatch.setattr(surfaces, "probed", lacking(surfaces.V1_RUNNER))
    monkeypatch.setattr(engine_fuzz, "check_engine_available", lambda allow_version: None)
    code = engine_fuzz.engine_fuzz_main(600.0, 0, True, False, tmp_path, depths=(1, 2), examples=20)
    out, err = capsys.readouterr()
    data = json.loads(out)
    assert code == 3 and data["result"] == "partial" and data["examples"] == 0 and not seen
    assert [(p["part"], p["reason"]) for p in data["skipped_parts"]] == [
        (f"v1/depth{d}", "runner.v1: vllm.Stand.in has no runner.v1") for d in (1, 2)]
    assert sum(p["examples"] for p in data["skipped_parts"]) == 20
    assert "skipped part v1/depth1: runner.v1: vllm.Stand.in has no runner.v1" in err
    assert data["vllm_version"] == data["vllm"]["version"] and "runner.v1" in data["vllm"]["missing"]
    assert_matches_schema(data, "fuzz-vllm-engine")


def test_a_time_bounded_engine_run_with_every_part_skipped_ends_at_once(seen: list[ec.EngineCase]) -> None:
    skipped = {part: "engine-core: x" for part in DEFAULT_ENGINE_PROFILE.parts()}
    c = engine_campaign.EngineCampaign(seconds=30.0, seed=0, keep_going=True, skipped=skipped)
    assert c.run() is None and c.stats.drawn() == 0 and not seen
