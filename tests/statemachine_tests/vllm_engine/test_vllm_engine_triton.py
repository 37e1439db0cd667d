"""Slow tier: the slot-mapping stub against vLLM's real Triton kernel, run by Triton's interpreter.

``BlockTable.compute_slot_mapping`` launches a Triton kernel, which a CPU-only
host cannot run natively; the ``vllm-engine`` target replaces it with the
same formula in numpy (``engine/vllm/runner_stubs.py``).  Here Triton (from
the package registry, into a private folder, never the main environment:
installing it there would make vLLM pick Model Runner V2) runs vLLM's own
kernel under ``TRITON_INTERPRET=1`` and a campaign must stay clean: the stub
changes nothing the spec can see.  The same for the greedy rejection-sampling
kernel that speculative decoding runs (``rejection_greedy_sample_kernel``,
stood in for by ``runner_stubs._GreedyRejection``), under the ``spec-decode``
profile.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from asyncspec.engine.vllm.mrv2_runner import triton_dir, triton_install_command
from tests.vllm_guard import require_pinned_vllm

require_pinned_vllm()

CAMPAIGN = """
import json
from asyncspec.engine.vllm.vllm_environment import prepare_environment
prepare_environment()
from vllm.triton_utils import HAS_TRITON
from asyncspec.statemachine_tests.vllm_engine.engine_campaign import run_fixed
from vllm.v1.worker.block_table import BlockTable
summary = run_fixed(20, 3, (1, 2))
print(json.dumps({"has_triton": bool(HAS_TRITON), "examples": summary["examples"],
                  "kernel_module": BlockTable.compute_slot_mapping.__module__,
                  "divergences": summary["divergences"], "first": summary["first_divergence"]}))
"""


def triton_folder() -> Path:
    """The private Triton folder (``mrv2_runner.triton_dir``), installed there on first use."""
    folder = triton_dir()
    if not (folder / "triton").is_dir():
        subprocess.run([sys.executable, *triton_install_command(folder)], check=True, timeout=900)
    return folder


@pytest.mark.slow
def test_the_real_slot_mapping_kernel_agrees_with_the_stub() -> None:
    env = dict(os.environ, PYTHONPATH=str(triton_folder()), TRITON_INTERPRET="1", CUDA_VISIBLE_DEVICES="",
               ASYNCSPEC_TRITON_SLOT_MAPPING="1", VLLM_USE_V2_MODEL_RUNNER="0")
    p = subprocess.run([sys.executable, "-c", CAMPAIGN], capture_output=True, text=True, env=env, timeout=1200)
    assert p.returncode == 0, p.stderr[-3000:]
    result = json.loads(p.stdout.strip().splitlines()[-1])
    assert result["has_triton"] and result["examples"] >= 20
    assert result["kernel_module"] == "vllm.v1.worker.block_table"  # vLLM's own, not the numpy stub
    assert result["divergences"] == 0, result["first"]


SPEC_DECODE_CAMPAIGN = """
import json
from asyncspec.engine.vllm.vllm_environment import prepare_environment
prepare_environment()
from vllm.triton_utils import HAS_TRITON
from asyncspec.statemachine_tests.vllm_engine.engine_campaign import run_fixed
from asyncspec.statemachine_tests.vllm_engine.engine_profile import SPEC_DECODE_ENGINE_PROFILE
from vllm.v1.sample import rejection_sampler
summary = run_fixed(20, 3, (2,), SPEC_DECODE_ENGINE_PROFILE)
print(json.dumps({"has_triton": bool(HAS_TRITON), "examples": summary["examples"],
                  "kernel": type(rejection_sampler._rejection_greedy_sample).__module__,
                  "accepted": summary["coverage"]["drafts_accepted"],
                  "rejected": summary["coverage"]["drafts_rejected"],
                  "divergences": summary["divergences"], "first": summary["first_divergence"]}))
"""


@pytest.mark.slow
def test_the_real_greedy_rejection_kernel_agrees_with_the_stub() -> None:
    env = dict(os.environ, PYTHONPATH=str(triton_folder()), TRITON_INTERPRET="1", CUDA_VISIBLE_DEVICES="",
               ASYNCSPEC_TRITON_REJECTION="1", VLLM_USE_V2_MODEL_RUNNER="0")
    p = subprocess.run([sys.executable, "-c", SPEC_DECODE_CAMPAIGN], capture_output=True, text=True, env=env,
                       timeout=1200)
    assert p.returncode == 0, p.stderr[-3000:]
    result = json.loads(p.stdout.strip().splitlines()[-1])
    assert result["has_triton"] and result["examples"] >= 20
    # vLLM's kernel dispatcher (Triton), not the stand-in from runner_stubs
    assert result["kernel"] == "vllm.model_executor.warmup.jit_warmup_triton_helper"
    assert result["accepted"] > 0 and result["rejected"] > 0
    assert result["divergences"] == 0, result["first"]
