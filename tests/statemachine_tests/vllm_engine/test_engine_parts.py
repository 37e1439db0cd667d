"""The default campaign of ``--target vllm-engine``: named parts, each fixed work (issue 27, item 4).

Default tier: the parts and their order; the bare command runs them and a budget, a depth or a runner
runs the V1 profile as before; ``--profile all`` with a budget is one line and exit 2; ``fuzz --help``
lists every part; the combination counters (``combo_coverage.py``); the whole campaign with a stand-in
for the engine (``drive_case``) and for the MRV2 process, clean (exit 0, ``parts`` in the JSON,
schema-valid, the CPU-limited part listed with its one line), and partial (exit 3) when the MRV2 process
cannot start; a real run of 40 cases of the ``structured+spec-decode`` part, clean, drafts and grammars
in one engine.  Slow: the real default campaign, clean, every part run.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from asyncspec.cli.main import main
from asyncspec.statemachine_tests.core.harness import ABORT, RESET_PREFIX_CACHE
from asyncspec.statemachine_tests.vllm_engine import engine_campaign, engine_parts
from asyncspec.statemachine_tests.vllm_engine import engine_case as ec
from asyncspec.statemachine_tests.vllm_engine.combo_coverage import COMBO_COVERAGE, ComboCoverage
from asyncspec.statemachine_tests.vllm_engine.engine_parts import (
    CPU_LIMITS, ENGINE_PART_NAMES, ENGINE_PARTS, EnginePart, PartResult,
)
from asyncspec.statemachine_tests.vllm_engine.engine_profile import (
    STRUCTURED_SPEC_ENGINE_PROFILE, SYNC_PP_ENGINE_PROFILE, SYNC_UNREACHABLE,
)
from asyncspec.statemachine_tests.vllm_engine.engine_run import EngineRunResult
from asyncspec.spec import events as ev
from asyncspec.statemachine_tests.scheduler.profile_type import KV_RECOVERY_COVERAGE
from asyncspec.statemachine_tests.scheduler.workload_draw import ENCODER_COVERAGE
from asyncspec.statemachine_tests.vllm_engine.logprobs_check import LOGPROBS_COVERAGE
from asyncspec.statemachine_tests.vllm_engine.mamba_coverage import MAMBA_ENGINE_COVERAGE
from tests.cli_contract import assert_matches_schema


def test_the_parts_are_mrv2_at_depth_3_beside_v1_and_drafts_with_grammars() -> None:
    assert ENGINE_PART_NAMES == ("v1", "structured+spec-decode", "pause", "streaming", "mrv2-pp2",
                                 "sync+mrv2+spec-decode", "sync-pp2", "kv-recovery", "encoder", "mrv2-encoder", "mamba",
                                 "dp", "logprobs")
    by_name = {p.name: p for p in ENGINE_PARTS}
    assert by_name["v1"].profile.depths == (1, 2, 3) and by_name["v1"].examples == 600
    mrv2 = by_name["mrv2-pp2"]
    assert mrv2.runner == "mrv2" and mrv2.profile.depths == (3,) and mrv2.profile.depth3_stagger == 2
    both = by_name["structured+spec-decode"].profile
    assert any(both.spec_tokens) and both.shape.structured_share > 0 and 2 in both.depths
    assert set(COMBO_COVERAGE) <= set(both.categories())
    sync = by_name["sync+mrv2+spec-decode"]
    assert sync.runner == "mrv2" and sync.profile.depths == (1,) and sync.profile.spec_tokens == (2,)
    pp = by_name["sync-pp2"].profile
    assert pp.sync_scheduler and pp.depths == (2,) and all(c.sync_scheduler for c in pp.configs())
    kv = by_name["kv-recovery"].profile
    assert all(c.kv_connector for c in kv.configs()) and set(KV_RECOVERY_COVERAGE) <= set(kv.categories())
    encoder = by_name["encoder"].profile
    assert all(c.images for c in encoder.configs()) and set(ENCODER_COVERAGE) <= set(encoder.categories())
    on_mrv2 = by_name["mrv2-encoder"]
    assert on_mrv2.runner == "mrv2" and on_mrv2.profile.depths == (2, 1) and on_mrv2.examples == 100
    assert all(c.images and c.runner == "mrv2" for c in on_mrv2.profile.configs())
    assert set(ENCODER_COVERAGE) <= set(on_mrv2.profile.categories())
    mamba = by_name["mamba"].profile
    assert all(c.mamba_cache_mode == "none" and not c.enable_prefix_caching for c in mamba.configs())
    assert set(MAMBA_ENGINE_COVERAGE) <= set(mamba.categories()) and by_name["mamba"].examples == 1000
    assert by_name["dp"].runner == "dp" and by_name["dp"].examples == 300
    logprobs = by_name["logprobs"].profile
    assert logprobs.shape.logprobs_share > 0 and by_name["logprobs"].examples == 300
    assert set(LOGPROBS_COVERAGE) <= set(logprobs.categories()) and "stale_drop" not in logprobs.categories()
    assert CPU_LIMITS == {} and all(p.examples > 0 for p in ENGINE_PARTS)


def test_fuzz_help_lists_the_engine_parts() -> None:
    text = "".join(CliRunner().invoke(main, ["fuzz", "--help"]).output.split())  # wrapped at any hyphen
    for name in ENGINE_PART_NAMES:
        assert name in text, name


def test_the_bare_command_runs_the_parts_and_a_budget_the_v1_profile() -> None:
    from asyncspec.cli.fuzz_command import _engine_profile

    assert _engine_profile(None, True, None, "v1", ()) == "all"
    assert _engine_profile(None, False, None, "v1", ()) == "default"  # --examples or --seconds
    assert _engine_profile(None, True, 2, "v1", ()) == "default"
    assert _engine_profile(None, True, None, "mrv2", ()) == "default"
    assert _engine_profile("spec-decode", True, None, "v1", ()) == "spec-decode"


def test_profile_all_with_a_budget_is_one_line_and_exit_2() -> None:
    p = subprocess.run([sys.executable, "-m", "asyncspec", "fuzz", "--target", "vllm-engine", "--profile", "all",
                        "--examples", "20"], capture_output=True, text=True, timeout=120)
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1 and "Traceback" not in p.stderr
    assert "--profile all" in p.stderr


def test_combinations_count_what_lands_while_drafts_and_a_grammar_are_in_flight() -> None:
    coverage: dict[str, int] = {}
    combos = ComboCoverage(coverage, structured=(1,))
    combos.note(ABORT, ())  # nothing in flight
    combos.schedule([0], [(0, 2)])  # drafts for r0, no grammar
    combos.note(RESET_PREFIX_CACHE, ())
    assert coverage == {}
    combos.schedule([1], [])  # r1 has a grammar
    combos.note(ABORT, ())
    combos.note(RESET_PREFIX_CACHE, ())
    combos.note("schedule", (ev.PREEMPT_IN_FLIGHT_DROP,))
    assert coverage == dict.fromkeys(COMBO_COVERAGE, 1)
    combos.deliver()  # the drafts' step is processed: only the grammar is in flight
    combos.note(ABORT, ())
    assert coverage["abort_with_drafts_and_grammar_in_flight"] == 1


def _clean(case: ec.EngineCase, choices: bytes, *_: Any) -> EngineRunResult:
    return EngineRunResult(case.workload(), [], {}, case=case)


class _Child:
    """A finished MRV2 process: its exit code and output."""

    def __init__(self, returncode: int, out: str, err: str = "") -> None:
        self.returncode, self._out, self._err = returncode, out, err

    def communicate(self) -> tuple[str, str]:
        return self._out, self._err


def _mrv2_json(examples: int) -> str:
    return json.dumps({"examples": examples, "partial": False, "buckets": [], "coverage": {"wasted_step": 3},
                       "zero_coverage": [], "skipped_parts": [], "depths": [3], "timing": {}, "explained": {}})


def _campaign(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str],
              child: _Child) -> tuple[int, dict[str, Any], str]:
    monkeypatch.setattr(engine_campaign, "drive_case", _clean)
    monkeypatch.setattr(engine_parts, "start_mrv2_part", lambda *a: child)
    small = tuple(EnginePart(p.name, p.profile, min(p.examples, 20), p.runner) for p in ENGINE_PARTS)
    monkeypatch.setattr(engine_parts, "ENGINE_PARTS", small)
    real = engine_parts.run_parts
    monkeypatch.setattr(engine_parts, "run_parts", lambda *a: real(*a, parts=small))
    code = engine_parts.engine_parts_main(0, True, False, tmp_path)
    out, err = capsys.readouterr()
    return code, json.loads(out), err


def test_the_campaign_reports_each_part_and_stays_complete_with_a_cpu_limit(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    line = "vLLM 0.33.0's MRV2 n-gram speculator does not run under Triton's interpreter: InterpreterError"
    monkeypatch.setitem(CPU_LIMITS, "sync+mrv2+spec-decode", line)  # as before its finalize kernel's stand-in
    code, data, err = _campaign(monkeypatch, tmp_path, capsys, _Child(0, _mrv2_json(20)))
    assert code == 0 and data["result"] == "ok" and not data["partial"]
    assert_matches_schema(data, "fuzz-vllm-engine")
    assert [p["name"] for p in data["parts"]] == list(ENGINE_PART_NAMES)
    parts = {p["name"]: p for p in data["parts"]}
    assert parts["v1"]["examples"] == parts["structured+spec-decode"]["examples"] == parts["pause"]["examples"] == 20
    assert parts["streaming"]["examples"] == parts["mrv2-pp2"]["examples"] == parts["sync-pp2"]["examples"] == 20
    assert parts["kv-recovery"]["examples"] == parts["encoder"]["examples"] == parts["dp"]["examples"] == 20
    assert parts["mamba"]["examples"] == parts["mrv2-encoder"]["examples"] == parts["logprobs"]["examples"] == 20
    assert parts["dp"]["runner"] == "dp" and parts["dp"]["divergences"] == 0
    assert data["examples"] == 240
    limited = parts["sync+mrv2+spec-decode"]
    assert limited["examples"] == 0 and limited["skipped"] == line
    assert data["skipped_parts"] == []  # a limit of the release on a CPU, not of this machine
    assert "skipped part sync+mrv2+spec-decode: vLLM 0.33.0's MRV2" in err
    assert data["coverage"]["wasted_step"] == 6  # the two MRV2 parts' that ran, added in


def test_an_mrv2_process_that_cannot_start_makes_the_run_partial(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    line = "asyncspec: error: Model Runner V2 needs Triton in /nowhere (or $ASYNCSPEC_TRITON_DIR): pip ..."
    code, data, err = _campaign(monkeypatch, tmp_path, capsys, _Child(2, "", line + "\n"))
    assert code == 3 and data["result"] == "partial"
    assert_matches_schema(data, "fuzz-vllm-engine")
    assert data["skipped_parts"] == [{"part": name, "reason": line.removeprefix("asyncspec: error: "), "examples": 0}
                                     for name in ("mrv2-pp2", "sync+mrv2+spec-decode", "mrv2-encoder")]
    assert "skipped part mrv2-pp2: Model Runner V2 needs Triton" in err


def test_forty_cases_of_drafts_and_grammars_in_one_engine_are_clean(tmp_path: Path) -> None:
    pytest.importorskip("vllm")
    result = engine_parts.run_v1_part(EnginePart("structured+spec-decode", STRUCTURED_SPEC_ENGINE_PROFILE, 40),
                                      0, tmp_path, 20, False)
    assert result.examples == 40 and result.buckets == [] and result.skipped is None, result.buckets[:1]
    assert result.coverage["drafts_proposed"] > 0 and result.coverage["structured_output_deferral"] > 0


def test_pipeline_parallelism_2_over_the_plain_scheduler_is_clean(tmp_path: Path) -> None:
    """The ``sync-pp2`` part: the batch queue of two over ``Scheduler`` (no placeholders), preemptions and
    stale outputs of steps in flight reached, the spec's ``sync_scheduler`` step for step."""
    pytest.importorskip("vllm")
    result = engine_parts.run_v1_part(EnginePart("sync-pp2", SYNC_PP_ENGINE_PROFILE, 40), 1, tmp_path, 20, False)
    assert result.examples == 40 and result.buckets == [] and result.skipped is None, result.buckets[:1]
    assert result.coverage["preemption_with_output_in_flight"] > 0 and result.coverage["chunked_prefill"] > 0
    assert not set(SYNC_UNREACHABLE) & set(SYNC_PP_ENGINE_PROFILE.categories())


@pytest.mark.slow
def test_the_default_engine_campaign_is_clean_and_runs_every_part() -> None:
    """``asyncspec fuzz --target vllm-engine --json`` on vLLM 0.33.0 (Triton in its private folder)."""
    pytest.importorskip("vllm")
    p = subprocess.run([sys.executable, "-m", "asyncspec", "fuzz", "--target", "vllm-engine", "--json"],
                       capture_output=True, text=True, timeout=1800)
    assert p.returncode == 0, p.stderr[-3000:]
    data = json.loads(p.stdout)
    assert_matches_schema(data, "fuzz-vllm-engine")
    parts = {part["name"]: part for part in data["parts"]}
    assert all(parts[n]["examples"] == e.examples and parts[n]["divergences"] == 0
               for n, e in ((e.name, e) for e in ENGINE_PARTS if e.name not in CPU_LIMITS))
    assert data["depths"] == [1, 2, 3] and data["zero_coverage"] == []
    assert data["coverage"]["preempted_with_drafts_and_grammar_in_flight"] > 0
    assert data["coverage"]["pause_in_flight"] > 0 and data["coverage"]["pause_held_waiting"] > 0
    assert data["coverage"]["stream_resume"] > 0
    assert isinstance(PartResult("x", "v1").to_json()["divergences"], int)


def test_mrv2_takes_the_spec_decode_and_encoder_profiles_and_refuses_the_others() -> None:
    from asyncspec.statemachine_tests.vllm_engine.engine_profile import MRV2_PROFILES

    assert set(MRV2_PROFILES) == {"default", "spec-decode", "encoder"} and MRV2_PROFILES["spec-decode"].spec_tokens == (2,)
    assert MRV2_PROFILES["encoder"].images and MRV2_PROFILES["encoder"].runner == "mrv2"
    result = CliRunner().invoke(main, ["fuzz", "--target", "vllm-engine", "--runner", "mrv2", "--profile", "pause"])
    assert result.exit_code == 2 and "--runner mrv2 takes --profile spec-decode, encoder" in result.output
    assert "Traceback" not in result.output
