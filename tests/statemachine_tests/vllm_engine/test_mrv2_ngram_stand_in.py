"""The stand-in for MRV2's ``_ngram_finalize_kernel`` (``engine/vllm/mrv2_stubs.NgramFinalizeKernel``) and
the synchronous MRV2 + drafts part of the engine campaign that it lets run on a CPU.

Default tier: the stand-in holds the kernel's contract on hand-computed rows.  Slow tier: Triton's
interpreter still refuses vLLM's kernel (when it stops refusing, compare the two and drop the stand-in),
and ``--runner mrv2 --profile spec-decode`` (the ``sync+mrv2+spec-decode`` part) stays clean with drafts
accepted and rejected.
"""
from __future__ import annotations

import json
import subprocess
import sys

import pytest


from tests.statemachine_tests.vllm_engine.test_vllm_engine_mrv2 import interpreter_outcome, mrv2_campaign
from tests.statemachine_tests.vllm_engine.test_vllm_engine_triton import triton_folder

L, K = 16, 3
CASE = f"""
import torch
L, K = {L}, {K}
token_ids = torch.zeros((3, L), dtype=torch.int32)
token_ids[0, :6] = torch.tensor([5, 6, 7, 8, 5, 6])   # suffix (5, 6) matches at 0: drafts 7, 8, 5
token_ids[1, :4] = torch.tensor([9, 4, 9, 4])         # suffix (9, 4) matches at 0: drafts 9, 4, then past the end
idx_mapping = torch.tensor([1, 0, 2], dtype=torch.int64)  # batch row -> request state row
total_len = torch.tensor([6, 4, 3], dtype=torch.int32)
num_sampled = torch.tensor([1, 1, 0], dtype=torch.int32)  # batch row 2 sampled nothing this step
last_sampled = torch.tensor([60, 40, 30], dtype=torch.int64)
n_blocks = 2
scratch = torch.zeros((3, n_blocks), dtype=torch.int64)
scratch[0, 1] = 2 * (L + 1) + 0 + 1   # request row 1: n = 2 at pos 0, in the second scan block
scratch[1, 0] = 2 * (L + 1) + 0 + 1   # request row 0: n = 2 at pos 0
scratch[2, 0] = 1 * (L + 1) + 1 + 1   # request row 2: a match, but no sampled token
drafts = torch.full((3, K), -7, dtype=torch.int64)
def run(kernel):
    kernel[(3,)](token_ids, token_ids.stride(0), idx_mapping, total_len, num_sampled, last_sampled, scratch,
                 scratch.stride(0), drafts, L, n_blocks, K, 4, 2, num_warps=2, num_stages=1)
    return drafts.tolist()
"""


def test_the_ngram_finalize_stand_in_keeps_the_kernel_contract() -> None:
    pytest.importorskip("torch")
    from asyncspec.engine.vllm.mrv2_stubs import NgramFinalizeKernel

    scope: dict[str, object] = {}
    exec(CASE, scope)  # noqa: S102 - the shared case, also run under Triton below
    drafts = scope["run"](NgramFinalizeKernel())  # type: ignore[operator]
    assert drafts == [[9, 4, 40],   # batch row 0 = request row 1: two tokens left, then its last sampled token
                      [7, 8, 5],    # batch row 1 = request row 0: the three tokens after the match
                      [30, 30, 30]]  # nothing sampled: every slot is the last sampled token


@pytest.mark.slow
def test_the_interpreter_still_refuses_vllms_ngram_finalize_kernel() -> None:
    """Why the stand-in exists (docs/vllm-engine.md): when this fails, Triton's interpreter runs the real
    kernel; compare its drafts with the stand-in's on this case and drop the stand-in."""
    script = CASE + """
import vllm.v1.worker.gpu.spec_decode.ngram.speculator as ngram
try:
    print(run(ngram._ngram_finalize_kernel))
except Exception as exc:
    print(repr(exc))
"""
    assert "mask has unsupported dtype" in interpreter_outcome(script)


@pytest.mark.slow
def test_synchronous_mrv2_with_drafts_is_clean() -> None:
    """The ``sync+mrv2+spec-decode`` part, 20 cases: vLLM's MRV2 drafts through ``post_step``."""
    pytest.importorskip("vllm")
    triton_folder()
    p = subprocess.run([sys.executable, "-m", "asyncspec", "fuzz", "--target", "vllm-engine", "--runner", "mrv2",
                        "--profile", "spec-decode", "--examples", "20", "--seed", "0", "--json"],
                       capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, p.stderr[-3000:]
    data = json.loads(p.stdout)
    assert data["examples"] == 20 and data["divergences"] == 0 and data["depths"] == [1]
    assert data["coverage"]["drafts_accepted"] > 0 and data["coverage"]["drafts_rejected"] > 0
    assert data["zero_coverage"] == []


SYNC_DRAFT_SLOTS_SHORT = {
    "id": "mrv2_sync_draft_slots_short", "file": "v1/worker/gpu/spec_decode/utils.py",
    "function": "DraftTokensHandler.get_draft_tokens", "reference": "test-local",
    "original": "draft_token_ids = [[-1] * self.num_draft_tokens for _ in self.req_ids]",
    "replacement": "draft_token_ids = [[-1] * (self.num_draft_tokens - 1) for _ in self.req_ids]",
    "description": "with the synchronous scheduler, MRV2 hands the scheduler one draft placeholder too few "
                   "per request (its drafts stay on the device): the next step verifies k - 1 drafts",
}


@pytest.mark.slow
def test_a_short_draft_handoff_of_synchronous_mrv2_is_caught() -> None:
    result = mrv2_campaign(SYNC_DRAFT_SLOTS_SHORT, depth=1, profile="spec-decode", seed=0)
    assert result["loaded"] is True
    assert result["divergences"] == 1, f"survived {result['examples']} examples"
