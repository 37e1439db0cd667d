"""Fast tests of the torch engine: async == sync, wasted steps == spec, seeded bugs caught."""

from __future__ import annotations

import importlib.util
import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from asyncspec.engine.torch.scheduler_api import EOS, LENGTH, SpecScheduler
from asyncspec.engine.torch.torch_engine import (
    EngineConfig, SchedulerKind, EngineError, Workload, default_model, run_workload,
)
from asyncspec.engine.torch.model import TinyTransformer
from asyncspec.engine.torch.torch_oracle import FUZZ_MODEL, check_workload, fuzz_torch
from asyncspec.engine.torch.torch_worker import FeedError, Strategy

ROOT = Path(__file__).resolve().parents[2]

#: Three requests, a pool of 6 blocks of 4 (preemption), a budget of 6 (chunked prefill).
SMALL = Workload(
    prompts=((5, 9, 13), (17, 4), (3, 4, 5, 6, 7, 8, 9)),
    max_tokens=(6, 5, 8),
    num_blocks=6,
    token_budget=6,
)

#: r0 ends after two tokens and r1 moves into its row: catches the feed and materialise bugs.
ROW_SHIFT = Workload(
    prompts=((24,), (33, 13, 23)),
    max_tokens=(2, 5),
    token_budget=5,
    max_num_seqs=3,
    block_size=4,
    num_blocks=2,
    stale_mode="drop",
)

#: With a KV connector (late KV writes), a block reused right after a free gets overwritten.
CONNECTOR = Workload(
    prompts=((26, 9, 39, 54, 60, 31, 61), (45, 26, 21), (22, 13, 13)),
    max_tokens=(3, 4, 3),
    token_budget=5,
    max_num_seqs=1,
    block_size=4,
    num_blocks=11,
    kv_connector=True,
    stale_mode="drop",
)


@pytest.fixture(autouse=True)
def _one_thread() -> Iterator[None]:
    """Tests share two cores: one intra-op thread."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def model() -> TinyTransformer:
    """The fuzzed model (more EOS than the default)."""
    return default_model("cpu", FUZZ_MODEL)


@pytest.mark.parametrize("scheduler", ["reference", "spec"])
@pytest.mark.parametrize("strategy", ["v2", "v1", "neuron"])
def test_async_equals_sync(
    model: TinyTransformer, scheduler: SchedulerKind, strategy: Strategy
) -> None:
    depths = (1, 2) if strategy == "v1" else (1, 2, 3)
    report = check_workload(
        SMALL, strategy=strategy, scheduler=scheduler, depths=depths, model=model
    )
    assert report.ok, report.problems
    assert report.results[1].forward_passes > 0
    assert report.spec_wasted == {d: r.wasted for d, r in report.results.items()}


def test_sync_engine_equals_dense_oracle(model: TinyTransformer) -> None:
    """At D = 1 every request finished by the engine has the dense model's greedy tokens."""
    result = run_workload(SMALL, EngineConfig(depth=1), model)
    for req, prompt in enumerate(SMALL.prompts):
        assert result.reasons[req] in (EOS, LENGTH)
        assert result.outputs[req] == model.generate_dense(prompt, SMALL.max_tokens[req])


def test_eos_comes_from_the_model_and_wastes_steps_as_the_spec_says(model: TinyTransformer) -> None:
    """EOS is the model's own token; at D = 2, 3 the steps after it are wasted, as predicted."""
    w = Workload(prompts=((17,), (33, 13, 23), (40, 41)), max_tokens=(12, 12, 12), num_blocks=24)
    report = check_workload(w, model=model)
    assert report.ok, report.problems
    sync = report.results[1]
    assert EOS in sync.reasons.values()
    for req, pos in enumerate(sync.eos_positions):
        if pos:
            assert sync.outputs[req][pos - 1] == model.config.eos_token_id
    assert sync.wasted == 0 and report.results[2].wasted > 0
    assert report.spec_wasted[2] == report.results[2].wasted
    assert report.spec_wasted[3] == report.results[3].wasted


def test_environment_aborts_arrivals_resets(model: TinyTransformer) -> None:
    w = Workload(
        prompts=((5, 9, 13), (17, 4), (3, 4, 5, 6, 7, 8, 9)),
        max_tokens=(8, 8, 8),
        arrivals=(0, 3, 9),
        aborts=((12, 1),),
        resets=(6,),
        num_blocks=7,
        token_budget=5,
        stale_mode="drop",
    )
    report = check_workload(w, model=model)
    assert report.ok, report.problems
    assert report.events["preemption"] > 0


def test_kv_connector_lands_late_writes_safely(model: TinyTransformer) -> None:
    report = check_workload(CONNECTOR, model=model)
    assert report.ok, report.problems
    assert all(r.late_writes_landed > 0 for r in report.results.values())


@pytest.mark.parametrize(
    ("bug", "strategy", "workload"),
    [
        ("feed_by_row", "v2", ROW_SHIFT),
        ("feed_by_row", "v1", ROW_SHIFT),
        ("skip_materialize", "neuron", ROW_SHIFT),
        ("free_while_writing", "v2", CONNECTOR),
    ],
)
def test_seeded_bugs_change_tokens(
    model: TinyTransformer, bug: str, strategy: Strategy, workload: Workload
) -> None:
    """Each seeded engine bug shows up as a token difference from D = 1 (and not without it)."""
    clean = check_workload(workload, strategy=strategy, depths=(1, 2), model=model)
    assert clean.ok, clean.problems
    buggy = check_workload(
        workload, strategy=strategy, depths=(1, 2), bug=bug, model=model, check_spec=False
    )
    assert any("produced" in p for p in buggy.problems), buggy.problems


def test_v1_cannot_feed_a_skipped_request_at_depth_3(model: TinyTransformer) -> None:
    """The documented V1 limit: with the D = 3 decode stagger a request skips a step, and
    ``prev_req_id_to_index`` no longer holds its pending token."""
    w = Workload(prompts=((5, 9), (17, 4)), max_tokens=(4, 3), token_budget=3)
    with pytest.raises(FeedError, match="prev_req_id_to_index"):
        run_workload(w, EngineConfig(depth=3, strategy="v1"), model)


def test_spec_scheduler_learns_eos_positions(model: TinyTransformer) -> None:
    w = Workload(prompts=((17,), (40, 41)), max_tokens=(12, 12), num_blocks=24)
    result = run_workload(w, EngineConfig(depth=2, scheduler="spec"), model)
    assert any(result.eos_positions)
    sched = SpecScheduler(w.spec_config(2), model.config.eos_token_id)
    assert sched.eos_positions == (0, 0)


def test_bad_configs_are_rejected() -> None:
    with pytest.raises(ValueError, match="unknown bug"):
        EngineConfig(bug="nope")
    with pytest.raises(ValueError, match="chunked prefill"):
        Workload(prompts=((1, 2, 3),), max_tokens=(8,), token_budget=4, enable_chunked_prefill=False)
    with pytest.raises(ValueError, match="arrivals"):
        Workload(prompts=((1,), (2,)), max_tokens=(1, 1), arrivals=(3, 0))
    assert issubclass(EngineError, RuntimeError)


def test_fuzz_torch_json_contract(capsys: pytest.CaptureFixture[str]) -> None:
    assert fuzz_torch(3.0, seed=7, json_out=True) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["target"] == "torch" and summary["divergences"] == 0
    assert summary["examples"] > 0 and summary["events"] > 0
    for key in ("preemption_with_output_in_flight", "stale_delivery", "stale_drop",
                "deferred_free", "wasted_step", "max_tokens_guard", "chunked_prefill",
                "abort_in_flight"):
        assert key in summary["coverage"]
    assert isinstance(summary["zero_coverage"], list)
    assert summary["wasted_steps"]["engine"] == summary["wasted_steps"]["spec"]


def _load_script(name: str) -> object:
    """Import a ``bench/`` script as a module."""
    path = ROOT / "bench" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def test_gpu_check_cpu_fallback(capsys: pytest.CaptureFixture[str]) -> None:
    """``bench/gpu_check.py`` runs its CPU fallback here and prints one summary line."""
    gpu_check = _load_script("gpu_check")
    code = gpu_check.main(["--quick", "--device", "cpu"])  # type: ignore[attr-defined]
    lines = capsys.readouterr().out.strip().splitlines()
    assert code == 0, lines
    assert lines[-1].startswith("gpu_check: OK device=cpu")


def test_bench_engine_smoke(capsys: pytest.CaptureFixture[str]) -> None:
    bench = _load_script("bench_engine")
    rows = bench.run_bench(concurrency=(1, 8), steps=6, device="cpu")  # type: ignore[attr-defined]
    assert {(r.concurrency, r.depth) for r in rows} == {(1, 1), (1, 2), (8, 1), (8, 2)}
    assert all(r.steps_per_s > 0 for r in rows)
