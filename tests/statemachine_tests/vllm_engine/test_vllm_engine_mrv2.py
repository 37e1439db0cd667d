"""Slow tier: Model Runner V2 under EngineCore, its Triton kernels run by Triton's interpreter.

``engine/vllm/mrv2_runner.py`` hosts vLLM's CPU MRV2 runner
(vllm/v1/worker/cpu/model_runner.py) below the real ``EngineCore``; the
oracle model reads MRV2's per-step batch, gathered block table and slot
mapping.  Each run is a process of its own with Triton from the private
folder (``test_vllm_engine_triton.triton_folder``), ``TRITON_INTERPRET=1``,
``CUDA_VISIBLE_DEVICES=`` and ``VLLM_USE_V2_MODEL_RUNNER=1``
(``mrv2_runner.mrv2_environment``).

A short fixed-work campaign at depth 2 (async scheduling, queue of 2: what
MRV2 gives with one pipeline rank) and one at depth 3 (queue of 3, the
scheduler staggering decodes by 2 as with two pipeline ranks) must stay
clean, and two one-line changes
to vLLM, loaded through the overlay (``engine/vllm/overlay.py``), must be
caught: one in MRV2's token feedback, one in what the scheduler sends MRV2
for a resumed request.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import pytest

from asyncspec.engine.vllm.mrv2_runner import mrv2_environment

from tests.statemachine_tests.vllm_engine.test_vllm_engine_triton import triton_folder

CAMPAIGN = """
import json, sys
mutant, depth, profile, seed = json.loads(sys.argv[1]), int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
finder = None
if mutant:
    from asyncspec.engine.vllm.vllm_mutants import VllmMutant
    from asyncspec.engine.vllm.overlay import install
    finder = install(VllmMutant(**mutant))
from asyncspec.engine.vllm.vllm_environment import prepare_environment
prepare_environment()
from asyncspec.statemachine_tests.vllm_engine.engine_campaign import EngineCampaign
from asyncspec.statemachine_tests.vllm_engine.engine_profile import MRV2_PROFILES
from dataclasses import replace
c = EngineCampaign(seconds=float("inf"), seed=seed, profile=replace(MRV2_PROFILES[profile], depths=(depth,)), batch=20,
                   max_batches=1)
found = c.run()
runner = next(iter(c.targets._targets.values())).driver.worker.runner
print(json.dumps({"examples": c.stats.examples, "divergences": int(found is not None),
                  "first": str(found.rows[-1].differences[0]) if found else None,
                  "at": c.stats.first_divergence_example, "runner": type(runner).__module__,
                  "loaded": finder.loaded if finder else None, "coverage": c.coverage()}))
"""

FEEDBACK_LOST = {
    "id": "mrv2_feedback_lost", "file": "v1/worker/gpu/model_runner.py",
    "function": "GPUModelRunner.postprocess_sampled", "reference": "test-local",
    "original": "self.req_states.last_sampled_tokens,",
    "replacement": "self.req_states.last_sampled_tokens.clone(),",
    "description": "post_update writes each request's sampled token into a copy: the next step's "
                   "combine_sampled_and_draft_tokens feeds a stale token",
}
RESUME_PROMPT_ONLY = {
    "id": "mrv2_resume_prompt_only", "file": "v1/core/sched/scheduler.py",
    "function": "Scheduler.schedule", "reference": "test-local",
    "original": "req._all_token_ids,", "replacement": "req.prompt_token_ids,",
    "description": "a resumed request reaches MRV2 as a new one with only its prompt, not its outputs",
}


def mrv2_campaign(mutant: dict[str, str] | None, depth: int = 2, profile: str = "default",
                  seed: int = 3) -> dict[str, object]:
    """20 cases of ``--runner mrv2 --profile PROFILE`` at ``depth`` in MRV2's environment, ``mutant``
    (a ``VllmMutant``'s fields) loaded through the overlay first."""
    env = mrv2_environment(dict(os.environ), triton_folder())
    p = subprocess.run([sys.executable, "-c", CAMPAIGN, json.dumps(mutant), str(depth), profile, str(seed)],
                       capture_output=True, text=True, env=env, timeout=1200)
    assert p.returncode == 0, p.stderr[-3000:]
    result: dict[str, object] = json.loads(p.stdout.strip().splitlines()[-1])
    return result


@pytest.mark.slow
@pytest.mark.parametrize("depth", [2, 3])
def test_an_mrv2_campaign_is_clean(depth: int) -> None:
    """Depth 2: async scheduling on one rank; depth 3: a queue of 3 and the scheduler's decode
    stagger of pipeline parallelism 2 (``MRV2_ENGINE_PROFILE.depth3_stagger``), over one rank."""
    result = mrv2_campaign(None, depth)
    assert result["runner"] == "vllm.v1.worker.cpu.model_runner"  # MRV2's CPU runner, not V1's
    assert result["examples"] == 20
    assert result["divergences"] == 0, result["first"]
    coverage = result["coverage"]
    assert isinstance(coverage, dict)
    assert coverage["fed_after_preemption"] > 0 and coverage["batch_reordered"] > 0
    assert coverage["structured_output_deferral"] > 0  # grammars, their bitmask kernel stood in for


@pytest.mark.slow
@pytest.mark.parametrize("mutant", [FEEDBACK_LOST, RESUME_PROMPT_ONLY], ids=lambda m: m["id"])
def test_mrv2_mutants_are_caught(mutant: dict[str, str]) -> None:
    result = mrv2_campaign(mutant)
    assert result["loaded"] is True
    assert result["divergences"] == 1, f"{mutant['id']} survived {result['examples']} examples"


def interpreter_outcome(script: str) -> str:
    """The last line ``script`` prints, run under Triton's interpreter in MRV2's environment."""
    env = mrv2_environment(dict(os.environ), triton_folder())
    p = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    return p.stdout.strip().splitlines()[-1]


BITMASK_CASE = """
import numpy as np
from asyncspec.engine.vllm.vllm_environment import load_vllm
torch = load_vllm().torch
rng = np.random.default_rng(0)
vocab = 100
bitmask = torch.from_numpy(rng.integers(-2**31, 2**31, size=(3, 4), dtype=np.int64).astype(np.int32))
logits_indices = torch.tensor([2, 0, 3], dtype=torch.int32)  # MASK_STRIDE 1: the requests of rows 0..2
cu_num_logits = torch.tensor([0, 1, 2, 3, 3, 5], dtype=torch.int32)  # request 3 has no logits row
def run(kernel):
    logits = torch.zeros((5, vocab))
    kernel[(3, 1)](logits, logits.stride(0), logits_indices, cu_num_logits, bitmask, bitmask.stride(0), vocab,
                   MASK_STRIDE=1, BLOCK_SIZE=1024)
    return logits
"""


def test_the_grammar_bitmask_stand_in_keeps_the_kernel_contract() -> None:
    from asyncspec.engine.vllm.mrv2_stubs import GrammarBitmaskKernel

    scope: dict[str, Any] = {}
    exec(BITMASK_CASE, scope)  # noqa: S102 - the shared case, also run under Triton below
    torch, bitmask = scope["torch"], scope["bitmask"]
    logits = scope["run"](GrammarBitmaskKernel())
    expected = torch.zeros((5, 100))
    for row, req in enumerate([2, 0]):  # request 3 has no logits row: untouched
        for t in range(100):
            if (int(bitmask[row, t // 32]) >> (t % 32)) & 1 == 0:
                expected[req, t] = float("-inf")
    assert torch.equal(logits, expected)
    assert 0 < int((logits == float("-inf")).sum()) < 200


@pytest.mark.slow
def test_the_interpreter_still_refuses_vllms_grammar_bitmask_kernel() -> None:
    """Why the stand-in exists (docs/vllm-engine.md): when this fails, Triton's interpreter runs
    the real kernel; compare it with the stand-in and drop the stand-in."""
    script = BITMASK_CASE + """
import vllm.v1.worker.gpu.structured_outputs as so
try:
    run(so._apply_grammar_bitmask_kernel)
    print("ran")
except Exception as exc:
    print(repr(exc))
"""
    assert "mask has unsupported dtype" in interpreter_outcome(script)
