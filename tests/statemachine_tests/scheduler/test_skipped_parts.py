"""A ``vllm`` campaign part is skipped only when the probe says this vLLM lacks a surface it drives.

Stand-in probes (``surfaces.probed`` replaced) stand for older releases: the
part that needs the absent capability is skipped with its one line, the other
parts run exactly the shards they run on any release, skipped examples are
counted apart, and the run ends partial (exit 3) with ``skipped_parts`` and
``vllm`` in the JSON.  Only the last test starts vLLM (a short campaign).
"""
from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path

import pytest

from asyncspec.engine.vllm import surfaces
from asyncspec.engine.vllm.capabilities import Capabilities
from asyncspec.statemachine_tests.core.fuzz_end import Work
from asyncspec.statemachine_tests.core.skipped_parts import SkippedPart, first_missing
from asyncspec.statemachine_tests.scheduler import shards
from asyncspec.statemachine_tests.scheduler.profiles import (
    ALL_PROFILE, BASE_PROFILE, DEPTH3_PROFILE, PREFIX_CACHING_PROFILE, Profile,
)


def stand_in(*lacking: str, others: Callable[[str], Capabilities] | None = None) -> Callable[[str], Capabilities]:
    """A probe lacking ``lacking`` (one line each); every other capability present (or ``others``' answer)."""
    def probed(name: str) -> Capabilities:
        if name in lacking:
            return Capabilities(frozenset(), {name: f"vllm.Stand.in has no {name}"})
        return others(name) if others is not None else Capabilities(frozenset({name}), {})
    return probed


@pytest.mark.parametrize(("lacking", "skipped"), [
    ((), []),
    ((surfaces.MRV2_CONFIG,), ["depth3"]),  # 0.31.0 and 0.32.0 without Triton
    ((surfaces.MRV2_CONFIG, surfaces.KV_HOLDING_WAITING, surfaces.LONG_PREFILL_ADAPTIVE),
     ["depth3", "connector", "long-prompt", "pause", "kv-recovery", "offload"]),  # 0.30.0 (pause draws the toy connector)
    ((surfaces.PRIORITY,), ["priority", "encoder"]),  # drawn twice in the mix, listed once; encoder draws it too
    ((surfaces.SCHEDULER,), ["base", "depth3", "prefix-caching", "priority", "spec-decode", "structured-output",
                             "hybrid", "connector", "long-prompt", "reset", "self-hit", "reset-storm", "pause",
                             "kv-recovery", "streaming", "encoder", "offload", "mamba", "stop"]),
    ((surfaces.STREAMING_INPUT,), ["streaming"]),  # vLLM before streaming-input sessions
    ((surfaces.OFFLOADING_CONNECTOR,), ["offload"]),  # a vLLM without the OffloadingConnector's scheduler half
    ((surfaces.MAMBA_GROUPS,), ["mamba"]),  # a vLLM without MambaSpec's mamba_cache_mode
    ((surfaces.STOP_CONDITIONS,), ["stop"]),  # a vLLM without RepetitionDetectionParams
])
def test_the_part_that_needs_an_absent_capability_is_skipped_with_its_line(
        monkeypatch: pytest.MonkeyPatch, lacking: tuple[str, ...], skipped: list[str]) -> None:
    monkeypatch.setattr(surfaces, "probed", stand_in(*lacking))
    found = shards.skipped_for("vllm", ALL_PROFILE)
    assert [part for part, _ in found] == skipped
    for part, reason in found:
        assert "\n" not in reason and reason.split(": ")[0] in lacking, reason
        assert SkippedPart(part, reason).line() == f"skipped part {part}: {reason}"
    assert shards.skipped_for("reference", ALL_PROFILE) == ()  # the reference is not vLLM


def test_first_missing_names_the_capability_and_its_piece(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(surfaces, "probed", stand_in(surfaces.DECODE_STAGGER))
    assert first_missing([surfaces.SCHEDULER, surfaces.DECODE_STAGGER]) == (
        "engine.decode-stagger: vllm.Stand.in has no engine.decode-stagger")
    assert first_missing([surfaces.SCHEDULER]) is None


def test_a_skipped_part_changes_no_other_shard() -> None:
    """Reference target (no vLLM): prefix-caching skipped; the base shards are what they are unskipped."""
    mix = Profile(mix=(BASE_PROFILE, PREFIX_CACHING_PROFILE))
    plan = shards.Plan("reference", mix, 3, 60, math.inf, skipped=(("prefix-caching", "x: y"),))
    assert list(plan.shards()) == [(0, 20), (2, 20)]
    merged = shards.run_plan(plan)
    alone = shards.merge([shards.run_shard("reference", mix, 3, i, 20, math.inf) for i in (0, 2)])
    assert merged.examples == 40 and merged.shard_examples == {0: 20, 2: 20}
    assert (merged.coverage, merged.events) == (alone.coverage, alone.events)
    assert shards.skipped_examples(plan, merged) == {"prefix-caching": 20}


def test_a_driver_missing_capability_skips_its_shard(monkeypatch: pytest.MonkeyPatch) -> None:
    """A surface the part's list missed: the driver's MissingCapability ends that shard as skipped."""
    from asyncspec.engine.vllm.capabilities import MissingCapability
    from asyncspec.statemachine_tests.scheduler import campaign

    real = campaign.drive

    def drive(w, *args, **kwargs):  # type: ignore[no-untyped-def]
        if w.prefix_caching or w.depth == 3:
            raise MissingCapability("scheduler.stand-in", "vllm.Stand.in has no x")
        return real(w, *args, **kwargs)
    monkeypatch.setattr(campaign, "drive", drive)
    mix = Profile(mix=(BASE_PROFILE, DEPTH3_PROFILE))
    plan = shards.Plan("reference", mix, 0, 40, math.inf)
    merged = shards.run_plan(plan)
    assert merged.missing == {"depth3": "scheduler.stand-in: vllm.Stand.in has no x"}
    assert merged.shard_examples == {0: 20, 1: 0} and merged.examples == 20
    assert shards.skipped_examples(plan, merged) == {"depth3": 20}


def test_skipped_parts_make_the_run_partial() -> None:
    work = Work(40, 60.0, False, False, skipped=("depth3",))
    assert not work.complete and "1 part(s) skipped (depth3)" in (work.partial_reason() or "")
    nothing = Work(0, 60.0, False, False, skipped=("base",))
    assert (nothing.partial_reason() or "").startswith("no example ran: 1 part(s) skipped (base)")


def test_fuzz_vllm_skips_depth3_runs_base_exit_3(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """vLLM (0.33.0 here) with a probe that says it lacks mrv2.config: depth3 skipped, base runs."""
    pytest.importorskip("vllm")
    from asyncspec.statemachine_tests.scheduler.fuzz import fuzz_main
    from tests.cli_contract import assert_matches_schema

    monkeypatch.setattr(surfaces, "probed", stand_in(surfaces.MRV2_CONFIG, others=surfaces.probed))
    code = fuzz_main("vllm", 600.0, 0, True, False, tmp_path, Profile(mix=(DEPTH3_PROFILE, BASE_PROFILE)),
                     examples=22)
    out, err = capsys.readouterr()
    data = json.loads(out)
    assert code == 3 and data["result"] == "partial", err
    assert data["examples"] == 2 and data["parts"] == {"depth3": 0, "base": 2}
    (skipped,) = data["skipped_parts"]
    assert skipped == {"part": "depth3", "examples": 20,
                       "reason": "mrv2.config: vllm.Stand.in has no mrv2.config"}
    assert "skipped part depth3: mrv2.config: vllm.Stand.in has no mrv2.config" in err
    assert data["vllm"]["version"] and data["vllm"]["path"] and "mrv2.config" in data["vllm"]["missing"]
    assert_matches_schema(data, "fuzz")


def test_a_time_bounded_run_with_every_part_skipped_ends_at_once() -> None:
    plan = shards.Plan("reference", BASE_PROFILE, 0, None, 5.0, skipped=(("base", "scheduler: x"),))
    assert list(plan.shards()) == []
    merged = shards.run_plan(plan)
    assert merged.examples == 0 and shards.skipped_examples(plan, merged) == {"base": 0}


def test_a_skipped_parts_categories_are_not_called_vacuous() -> None:
    from asyncspec.statemachine_tests.scheduler.fuzz import parts_profile
    from asyncspec.statemachine_tests.scheduler.profiles import CONNECTOR_PROFILE

    mix = Profile(mix=(BASE_PROFILE, CONNECTOR_PROFILE))
    plan = shards.Plan("reference", mix, 0, 40, math.inf, skipped=(("connector", "x: y"),))
    ran = parts_profile(plan, shards.Merged())
    assert ran is not None and "kv_async_load" in mix.enabled_categories()
    assert "kv_async_load" not in ran.enabled_categories()
    assert parts_profile(shards.Plan("reference", BASE_PROFILE, 0, 20, math.inf, skipped=(("base", "x: y"),)),
                         shards.Merged()) is None
