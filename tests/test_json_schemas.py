"""Every command's ``--json`` output is valid against its shipped JSON Schema (``cli/schemas/``).

The schemas require the keys CI scripts already read (names, types, places) and a
top-level ``schema_version``; added keys are allowed.
"""
from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

import pytest

from tests.cli_contract import assert_matches_schema, invoke, schema

D3 = ('name = "d3"\nrequests = [[3, 2], [2, 2]]\nbatch_queue_depth = 3\ndecode_stagger = 1\n'
      'token_budget = 4\nblock_size = 2\nnum_blocks = 3\n')


def _json(*args: str, code: int) -> dict[str, object]:
    o = invoke(*args, "--json")
    assert o.code == code, (o.code, o.stderr[-800:])
    data: dict[str, object] = json.loads(o.stdout)
    return data


def test_every_shipped_schema_is_a_valid_schema_with_a_version() -> None:
    names = sorted(p.name[:-5] for p in resources.files("asyncspec.cli").joinpath("schemas").iterdir()
                   if p.name.endswith(".json"))
    assert len(names) >= 15
    for name in names:
        s = schema(name)
        assert s["properties"]["schema_version"] == {"const": 1, "description": s["properties"]["schema_version"]
                                                     ["description"]}
        assert "schema_version" in s["required"]


def test_check_json_lists_its_trace_files(tmp_path: Path) -> None:
    ok = _json("check", "-c", "async-d2", "--trace-dir", str(tmp_path / "t"), code=0)
    assert_matches_schema(ok, "check")
    assert ok["trace_files"] == []
    cfg = tmp_path / "d3.toml"
    cfg.write_text(D3)
    bad = _json("check", "-c", str(cfg), "--trace-dir", str(tmp_path / "t"), code=1)
    assert_matches_schema(bad, "check")
    written = tmp_path / "t" / "d3.no_wasted_step_on_max_tokens.trace.json"
    assert bad["trace_files"] == [str(written)] and written.exists()
    assert bad["configs"][0]["trace_files"] == [str(written)]  # type: ignore[index]
    replayed = _json("replay", str(written), code=1)
    assert_matches_schema(replayed, "replay")


def test_check_show_witness(tmp_path: Path) -> None:
    data = _json("check", "-c", "async-d2", "-c", "sync-d1", "--show-witness", "wasted_step",
                 "--trace-dir", str(tmp_path), code=1)
    assert_matches_schema(data, "check-witness")
    reached, never = data["configs"]  # type: ignore[misc]
    assert reached["reached"] and reached["steps"] >= 1 and Path(reached["trace_file"]).exists()
    assert never == {"name": "sync-d1", "reached": False, "partial": False, "steps": None, "trace_file": None}
    stopped = _json("check", "-c", "async-d2", "--show-witness", "stale_delivery", "--max-states", "3",
                    "--trace-dir", str(tmp_path), code=3)
    assert_matches_schema(stopped, "check-witness")
    assert stopped["result"] == "partial" and stopped["configs"][0]["partial"]  # type: ignore[index]
    text = invoke("check", "-c", "async-d2", "--show-witness", "wasted_step", "--trace-dir", str(tmp_path))
    assert text.code == 0 and "wasted_step reached after" in text.stdout
    assert _json("replay", reached["trace_file"], code=0)["violations"] == []


def test_mutants_sweep_worker_explain_json() -> None:
    assert_matches_schema(_json("mutants", "--only", "stale_delivery_decrements_placeholders", code=0), "mutants")
    assert_matches_schema(_json("sweep", "--requests", "2x1", "--depth", "1,2", "--blocks", "3", "--defer", "off",
                                "--stale", "deliver", code=0), "sweep")
    assert_matches_schema(_json("worker", "--strategy", "v1", code=0), "worker")
    assert_matches_schema(_json("explain-config", code=0), "explain-config")
    assert_matches_schema(_json("explain-config", "--async-scheduling", "on", "--pp", "2", code=1), "explain-config")


def test_prove_json() -> None:
    assert_matches_schema(_json("prove", "--only", "sync init x output_within_max_tokens", code=0), "prove")


def test_fuzz_reference_and_torch_json(tmp_path: Path) -> None:
    ref = _json("fuzz", "--target", "reference", "--examples", "3", "--out-dir", str(tmp_path), code=0)
    assert_matches_schema(ref, "fuzz")
    pytest.importorskip("torch")
    assert_matches_schema(_json("fuzz", "--target", "torch", "--seconds", "1", "--out-dir", str(tmp_path), code=0),
                          "fuzz-torch")


def test_fuzz_sglang_summary() -> None:
    """The sglang target's summary (its campaign needs SGLang's own venv; the summary does not)."""
    from types import SimpleNamespace

    from asyncspec.statemachine_tests.core.fuzz_end import fixed_work
    from asyncspec.statemachine_tests.sglang.sglang_fuzz import fuzz_summary

    campaign = SimpleNamespace(coverage={}, configs=("overlap",), mutant=None, seed=0, done=3, iterations=10,
                               forwards=5)
    assert_matches_schema(fuzz_summary(campaign, None, 2.0, 1.0, None, fixed_work(3, 3, 9.0, False)),
                          "fuzz-sglang")  # type: ignore[arg-type]


def test_replay_fuzz_json(tmp_path: Path) -> None:
    path = tmp_path / "fuzz-reference-seed0.json"
    path.write_text(json.dumps({"asyncspec_fuzz_replay": 1, "target": "reference",
                                "workload": {"requests": [[4, 2, 0]]}, "events": ["add_request r0", "schedule"]}))
    data = _json("replay", str(path), "--target", "reference", code=0)
    assert_matches_schema(data, "replay-fuzz")
    assert data["reproduces"] is False and data["divergence"] is None


def test_mutate_vllm_list_json() -> None:
    assert_matches_schema(_json("mutate-vllm", "--list", code=0), "mutate-vllm-list")


def test_drift_json(tmp_path: Path) -> None:
    from tests.test_drift import _installed_or_skip, _wheel

    installed = _installed_or_skip()
    text = installed.module_text("vllm.v1.core.sched.scheduler") or ""
    other = _wheel(tmp_path / "vllm-0.0.1-py3-none-any.whl",
                   {"vllm/__init__.py": "", "vllm/v1/core/sched/scheduler.py": text}, "0.0.1")
    assert_matches_schema(_json("drift", str(other), code=1), "drift")


def test_replay_window_json(tmp_path: Path) -> None:
    from asyncspec.checker.configs import named_configs
    from asyncspec.checker.window_trace import WindowTrace, save_window
    from asyncspec.spec.state import initial_state

    cfg = named_configs()["async-d2"]
    start = initial_state(cfg, (0, 0, 0))
    path = tmp_path / "w.json"
    save_window(WindowTrace(cfg, start, [], [], "seen", {}), path)
    assert_matches_schema(_json("replay", str(path), code=0), "replay-window")


@pytest.mark.slow
def test_mutate_vllm_json() -> None:
    from tests.vllm_guard import require_pinned_vllm

    require_pinned_vllm()
    # an engine-loop mutant the scheduler target cannot reach: it survives (exit 1)
    data = _json("mutate-vllm", "--only", "core_bq_aborts_late", "--target", "vllm", "--examples", "20", code=1)
    assert_matches_schema(data, "mutate-vllm")
    assert data["survivors"] == ["core_bq_aborts_late"]


@pytest.mark.slow
def test_fuzz_vllm_and_vllm_engine_json(tmp_path: Path) -> None:
    from tests.vllm_guard import require_pinned_vllm

    require_pinned_vllm()
    assert_matches_schema(_json("fuzz", "--target", "vllm", "--examples", "2", "--out-dir", str(tmp_path), code=0),
                          "fuzz")
    engine = _json("fuzz", "--target", "vllm-engine", "--examples", "20", "--depth", "2",
                   "--out-dir", str(tmp_path), code=0)
    assert_matches_schema(engine, "fuzz-vllm-engine")
