"""Logprobs and prompt logprobs (issue 27): the spec's ``skip_reading_prefix_cache`` against vLLM's real
scheduler, the ``vllm-engine`` target's ``logprobs`` part held to the oracle model (``logprobs_check.py``),
its two runner mutants, and finding V12 (a dropped stale output loses the prompt logprobs).

Default tier: the row checks on hand-made rows; the spec gives a skipping request no hit; random walks of
``--target vllm`` workloads with skipping requests agree with vLLM's scheduler, and the same walks diverge
when the spec ignores the flag; 20 cases of the ``logprobs`` part are clean and reach its categories.
Slow: 300 cases on seeds 0 and 1 clean; each runner mutant makes ``fuzz --profile logprobs`` exit 1;
``--known-bug prompt-logprobs-stale-drop`` reproduces V12.
"""
from __future__ import annotations

import dataclasses
import json
import random
from pathlib import Path
from types import SimpleNamespace

import pytest

from asyncspec.spec import blocks
from asyncspec.spec.config import ConfigError, SpecConfig
from asyncspec.spec.draft import Draft
from asyncspec.spec.state import BlockHash, initial_state
from asyncspec.statemachine_tests.core.harness import RequestSpec, RunResult, Workload, first_events, run_one
from asyncspec.statemachine_tests.core.workload import workload_problem
from asyncspec.statemachine_tests.vllm_engine.logprobs_check import (
    LOGPROBS_COVERAGE, predictions, prompt_gap, sampled_gap,
)

PROMPT = (900, 17, 33, 45, 61)


def _rows(ids: list[list[int]], ranks: list[int]) -> SimpleNamespace:
    return SimpleNamespace(logprob_token_ids=ids, selected_token_ranks=ranks)


def test_the_prompt_rows_are_the_oracles_and_a_shifted_row_is_named() -> None:
    predicted = predictions(PROMPT)
    assert len(predicted) == len(PROMPT) - 1
    good = _rows([[PROMPT[p + 1], predicted[p]] for p in range(4)],
                 [1 if PROMPT[p + 1] == predicted[p] else 50_000 for p in range(4)])
    assert prompt_gap(PROMPT, good) == ""
    shifted = _rows([[PROMPT[p], predicted[p]] for p in range(4)], good.selected_token_ranks)
    assert prompt_gap(PROMPT, shifted).startswith("prompt row 0: target 900")
    assert "needs 4" in prompt_gap(PROMPT, _rows(good.logprob_token_ids[:3], good.selected_token_ranks[:3]))


def test_a_sampled_token_must_be_its_own_best_at_rank_one() -> None:
    lists = SimpleNamespace(logprob_token_ids=[[5, 5], [8, 8]], sampled_token_ranks=[1, 1])
    assert sampled_gap([5, 8], lists) == ""
    assert "rank 2" in sampled_gap([5, 8], SimpleNamespace(logprob_token_ids=[[5, 5], [8, 9]], sampled_token_ranks=[1, 2]))
    assert sampled_gap([5], None) == "1 sampled tokens came without logprobs"


def test_a_request_that_skips_reading_the_prefix_cache_gets_no_hit() -> None:
    cfg = SpecConfig("skip", ((8, 2), (4, 2)), block_size=4, num_blocks=8, skip_reading_prefix_cache=(0,))
    d = Draft.of(initial_state(cfg, (0, 0)))
    d.block_hashes[3] = BlockHash(0, 0)
    d.block_hashes[4] = BlockHash(1, 0)
    assert blocks.longest_cache_hit(cfg, d, 0) == ()
    assert blocks.longest_cache_hit(dataclasses.replace(cfg, skip_reading_prefix_cache=()), d, 0) == (3,)
    with pytest.raises(ConfigError, match="skip_reading_prefix_cache"):
        dataclasses.replace(cfg, skip_reading_prefix_cache=(2,))
    assert "skip_reading" in (workload_problem(Workload((RequestSpec(4, 2),), skip_reading=(1,))) or "")


def _walk(seed: int) -> RunResult:
    """A random walk of a prefix-caching workload, half its requests skipping the cache, against vLLM."""
    from asyncspec.statemachine_tests.scheduler.registry import make_target
    from asyncspec.statemachine_tests.scheduler.spec_target import SpecTarget

    rng = random.Random(seed)
    n = rng.randint(2, 4)
    requests = tuple(RequestSpec(rng.randint(4, 12), rng.randint(1, 8), 0) for _ in range(n))
    w = Workload(requests=requests, depth=rng.choice((1, 2)), block_size=4, num_blocks=8, token_budget=8,
                 max_num_seqs=3, prefix_caching=True, reset_prefix_cache=1,
                 skip_reading=tuple(i for i in range(n) if rng.random() < 0.5))
    oracle, target = SpecTarget(w), make_target("vllm", w)
    result = RunResult(w, [], {})
    ok = all(run_one(w, oracle, target, e, result) for e in first_events(w))
    for _ in range(200):
        enabled = list(oracle.enabled())
        if not ok or not enabled:
            break
        steps = [e for e in enabled if e.kind in ("schedule", "deliver", "add_request")]
        ok = run_one(w, oracle, target, rng.choice(steps if steps and rng.random() < 0.95 else enabled), result,
                     enabled_checked=True)
    return result


def test_skipping_requests_agree_with_vllms_scheduler_and_the_flag_matters(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("vllm")
    assert not any(_walk(seed).diverged for seed in range(30))
    plain = blocks.longest_cache_hit
    monkeypatch.setattr(blocks, "longest_cache_hit",
                        lambda cfg, d, req: plain(dataclasses.replace(cfg, skip_reading_prefix_cache=()), d, req))
    ignored = _walk(17)  # a skipping request preempted: the spec would give it its own blocks back
    assert ignored.diverged and ignored.rows[-1].differences[0].field == "scheduled"


def test_twenty_cases_of_the_logprobs_part_are_clean_and_reach_its_categories() -> None:
    pytest.importorskip("vllm")
    from asyncspec.statemachine_tests.vllm_engine.engine_campaign import run_fixed
    from asyncspec.statemachine_tests.vllm_engine.engine_profile import LOGPROBS_ENGINE_PROFILE

    summary = run_fixed(20, 0, LOGPROBS_ENGINE_PROFILE.depths, LOGPROBS_ENGINE_PROFILE)
    assert summary["divergences"] == 0, summary["first_divergence"]
    for name in ("prompt_logprobs_delivered", "prompt_logprobs_chunked", "sampled_logprobs_delivered"):
        assert summary["coverage"].get(name, 0) > 0, name


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1])
def test_the_logprobs_part_is_clean_and_reaches_every_category(seed: int) -> None:
    pytest.importorskip("vllm")
    from asyncspec.statemachine_tests.vllm_engine.engine_campaign import run_fixed
    from asyncspec.statemachine_tests.vllm_engine.engine_profile import LOGPROBS_ENGINE_PROFILE

    summary = run_fixed(300, seed, LOGPROBS_ENGINE_PROFILE.depths, LOGPROBS_ENGINE_PROFILE)
    assert summary["divergences"] == 0, summary["first_divergence"]
    missing = [c for c in LOGPROBS_ENGINE_PROFILE.categories() if summary["coverage"].get(c, 0) == 0]
    assert not missing and set(LOGPROBS_COVERAGE) <= set(summary["coverage"]), missing


@pytest.mark.slow
@pytest.mark.parametrize(("mutant", "examples", "died_at", "kind"), [
    ("runner_prompt_logprobs_chunk_at_zero", 40, 6, "logprobs_gap"),  # a chunked prompt's rows at row 0
    ("runner_prompt_logprobs_returned_a_step_early", 200, 178, "error:AssertionError"),  # update_from_output's
])  # invariant: no output of a step that samples nothing carries prompt logprobs
def test_a_prompt_logprobs_mutant_makes_the_part_diverge(mutant: str, examples: int, died_at: int, kind: str,
                                                         tmp_path: Path) -> None:
    pytest.importorskip("vllm")
    from tests.statemachine_tests.vllm_engine.test_vllm_engine import asyncspec_under

    p = asyncspec_under(mutant, "fuzz", "--target", "vllm-engine", "--profile", "logprobs", "--examples", str(examples),
                        "--json", "--out-dir", str(tmp_path))
    assert p.returncode == 1, p.stdout[-2000:] + p.stderr[-2000:]
    buckets = json.loads(p.stdout)["buckets"]
    assert buckets[0]["first_example"] == died_at and kind in buckets[0]["signature"], buckets


@pytest.mark.slow
def test_finding_v12_a_dropped_stale_output_loses_the_prompt_logprobs(tmp_path: Path) -> None:
    import subprocess
    import sys

    pytest.importorskip("vllm")
    p = subprocess.run([sys.executable, "-m", "asyncspec", "fuzz", "--target", "vllm-engine", "--profile", "logprobs",
                        "--known-bug", "prompt-logprobs-stale-drop", "--examples", "60", "--seed", "1", "--json",
                        "--out-dir", str(tmp_path)], capture_output=True, text=True, timeout=900)
    assert p.returncode == 1, p.stderr[-2000:]
    buckets = json.loads(p.stdout)["buckets"]
    assert buckets and all("logprobs_gap" in b["signature"] and "stale-drop" in b["signature"] for b in buckets)
