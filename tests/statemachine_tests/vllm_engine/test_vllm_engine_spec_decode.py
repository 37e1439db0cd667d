"""The ``vllm-engine`` target with speculative decoding: vLLM's GPU n-gram drafter (``ngram_gpu``).

``ngram_gpu`` is the drafter without a draft model for which vLLM 0.33.0 keeps
async scheduling on with the V1 runner (depth 2; depth 1 runs it with async
scheduling off).  Default tier: the ``spec-decode`` profile runs clean with
drafts proposed, accepted and rejected; the stand-in
for the greedy rejection-sampling kernel keeps the kernel's contract.  Slow
tier: the mutant of ``EngineCore.post_step`` that only speculative decoding
reaches (``core_post_step_async_drafts``) is caught; the real kernel under
Triton's interpreter (``test_vllm_engine_triton.py``).
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from asyncspec.engine.vllm import oracle_model as om
from asyncspec.engine.vllm.vllm_environment import load_vllm
from asyncspec.engine.vllm.runner_stubs import _GreedyRejection
from asyncspec.statemachine_tests.scheduler.draft_coverage import DRAFT_COVERAGE
from asyncspec.statemachine_tests.vllm_engine.engine_campaign import run_fixed, run_for_mutants
from asyncspec.statemachine_tests.vllm_engine.engine_fuzz import engine_replay
from asyncspec.statemachine_tests.vllm_engine.engine_profile import SPEC_DECODE_ENGINE_PROFILE
from tests.vllm_guard import require_pinned_vllm

require_pinned_vllm()

MUTANT_RUNNER = """
import sys
from asyncspec.engine.vllm.vllm_mutants import MUTANTS_BY_ID
from asyncspec.engine.vllm.overlay import install
install(MUTANTS_BY_ID[sys.argv[1]])
from asyncspec.cli.main import main
sys.argv = ["asyncspec", *sys.argv[2:]]
main()
"""


def test_spec_decode_campaign_is_clean_with_drafts_accepted_and_rejected() -> None:
    """20 cases (one batch) of seed 0 already reach every draft category."""
    summary = run_fixed(20, seed=0, depths=SPEC_DECODE_ENGINE_PROFILE.depths, profile=SPEC_DECODE_ENGINE_PROFILE)
    assert summary["divergences"] == 0, summary["first_divergence"]
    assert summary["depths"] == [1, 2]
    coverage = summary["coverage"]
    for key in (*DRAFT_COVERAGE, "spec_decode_rejection", "spec_decode_all_accepted"):
        assert coverage[key] > 0, (key, coverage)


def test_periodic_requests_mostly_repeat_and_still_depend_on_the_whole_history() -> None:
    prompt = (11, 12, 13, 14)
    stream = om.expected_stream(prompt, 30, period=3)
    history = [*prompt, *stream]
    repeats = sum(history[p] == history[p - 3] for p in range(len(prompt), len(history)))
    assert 15 <= repeats < 30  # the pattern holds mostly, and breaks
    assert om.expected_stream((11, 12, 99, 14), 30, period=3) != stream  # one prompt token changes it
    assert om.expected_stream(prompt, 30) != stream  # period 0: the plain oracle


def _greedy(drafts: list[list[int]], targets: list[list[int]], bonus: list[int],
            greedy: list[bool] | None = None) -> list[list[int]]:
    """The stand-in over one batch; -1 marks positions it left alone (vLLM's placeholder)."""
    torch = load_vllm().torch
    width = max(len(d) for d in drafts) + 1
    out = torch.full((len(drafts), width), -1, dtype=torch.int32)
    ends = torch.tensor([sum(len(d) for d in drafts[:i + 1]) for i in range(len(drafts))], dtype=torch.int32)
    _GreedyRejection()(out, ends, torch.tensor([t for d in drafts for t in d], dtype=torch.int32),
                       torch.tensor([t for d in targets for t in d], dtype=torch.int64),
                       torch.tensor(bonus, dtype=torch.int64).view(-1, 1),
                       None if greedy is None else torch.tensor(greedy), width - 1, None, None)
    return [list(map(int, row)) for row in out.tolist()]


def test_greedy_rejection_stand_in_keeps_the_kernels_contract() -> None:
    # all accepted: the targets, then the bonus token; a mismatch: the target there, then nothing
    assert _greedy([[5, 6], [5, 6], [5, 6]], [[5, 6], [5, 7], [4, 6]], [9, 9, 9]) == \
        [[5, 6, 9], [5, 7, -1], [4, -1, -1]]
    # a -1 padding draft never matches; a request without drafts gets its bonus token
    assert _greedy([[-1, -1], []], [[8, 8], []], [3, 4]) == [[8, -1, -1], [4, -1, -1]]
    # a non-greedy row is the random kernel's: left alone
    assert _greedy([[5], [5]], [[5], [5]], [1, 2], greedy=[True, False]) == [[5, 1], [-1, -1]]


def test_mutate_vllm_runs_spec_decode_after_a_clean_default_campaign() -> None:
    summary = run_for_mutants(20, seed=0, spec_examples=20, pause_examples=20, streaming_examples=0)  # pause last
    assert summary["divergences"] == 0, summary["first_divergence"]
    assert summary["examples"] == 20 + 20 + 20 and summary["depths"] == [1, 2, 3]  # the pause profile's


@pytest.mark.slow  # the default tier kills a runner mutant in test_vllm_engine.py
def test_the_async_post_step_drafts_mutant_is_caught(tmp_path: Path) -> None:
    """``core_post_step_async_drafts`` (vllm#24799): under async scheduling ``post_step`` also
    pushes the worker's drafts to the scheduler, over the placeholders of the step just scheduled."""
    args = ("fuzz", "--target", "vllm-engine", "--profile", "spec-decode", "--examples", "20",
            "--out-dir", str(tmp_path))
    p = subprocess.run([sys.executable, "-c", MUTANT_RUNNER, "core_post_step_async_drafts", *args],
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 1, p.stdout[-3000:] + p.stderr[-3000:]
    assert "DIVERGENCE" in p.stdout + p.stderr
    # on vLLM as installed (this process's, so no second vLLM start-up): what `asyncspec replay` runs
    assert engine_replay(tmp_path / "fuzz-vllm-engine-seed0.json") == 0


def test_spec_decode_at_depth_3_is_refused_in_one_line() -> None:
    p = subprocess.run([sys.executable, "-m", "asyncspec", "fuzz", "--target", "vllm-engine", "--profile",
                        "spec-decode", "--depth", "3", "--examples", "20"], capture_output=True, text=True, timeout=300)
    assert p.returncode == 2 and p.stdout == ""
    assert p.stderr.count("\n") == 1 and "--profile spec-decode runs depths 1 and 2" in p.stderr
