"""The stand-ins that let Model Runner V2 run under EngineCore on a CPU, and nothing more.

Model Runner V2 (``vllm/v1/worker/gpu/model_runner.py``, ``GPUModelRunner``)
imports three module-level functions of ``vllm/v1/worker/gpu/attn_utils.py``
into its own module and calls them from ``initialize_kv_cache`` /
``get_kv_cache_spec``.  Each walks the model's vLLM ``Attention`` layers,
which the oracle model does not have (they need a compiled attention
backend); the stand-ins answer for the one KV layer the oracle model keeps
in its own paged store:

* ``get_kv_cache_spec``: one full-attention layer (as ``runner_stubs`` does
  for the V1 runner), so EngineCore's KV planning, the block pool and the
  scheduler's KV manager run on it;
* ``init_attn_backend``: no attention groups, the widest CUDA-graph support
  (unused: the graph mode is NONE, ``enforce_eager``) and the KV block size as
  the kernel block size (what ``prepare_kernel_block_sizes`` picks when no
  backend asks for another);
* ``init_kv_cache``: no KV tensors; the worker has the oracle model allocate
  its store instead (``OracleWorker.initialize_from_config``).

Two kernels are replaced too, each one Triton 3.9.0's interpreter refuses with
``ValueError('mask has unsupported dtype')`` (a mask that ands a scalar
comparison of loaded values with a block of booleans):

* ``_apply_grammar_bitmask_kernel`` (``vllm/v1/worker/gpu/structured_outputs.py``):
  ``GrammarBitmaskKernel`` applies the same contract in numpy over the same
  tensors; ``StructuredOutputsWorker.apply_grammar_bitmask`` (which bitmask row
  goes to which logits row, in MRV2's batch order) stays vLLM's;
* ``_ngram_finalize_kernel`` (``vllm/v1/worker/gpu/spec_decode/ngram/speculator.py``),
  the second half of the n-gram drafter: ``NgramFinalizeKernel`` reads the
  per-block match scores the real ``_ngram_scan_kernel`` wrote (which the
  interpreter runs) and writes the drafts by the kernel's rule;
  ``NgramGPUSpeculator.propose`` and the scan stay vLLM's.

The runner's bookkeeping around them stays vLLM's: ``BlockTables``, its
Triton kernels (block-table writes and gathers, slot mappings), the request
state, ``prepare_inputs`` and the async token feedback.  With no attention
group vLLM's own ``build_attn_metadata`` builds nothing.  Everything else
MRV2 needs on a CPU comes from vLLM itself: ``vllm.v1.worker.cpu.shm`` (CUDA
events and streams, pinned memory, the UVA buffer) and
``vllm.v1.worker.cpu.model_runner.CPUModelRunner``.
"""
from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import numpy as np

from asyncspec.engine.vllm.vllm_environment import load_vllm
from asyncspec.engine.vllm.runner_stubs import LAYER_NAME

RUNNER_MODULE = "vllm.v1.worker.gpu.model_runner"
STRUCTURED_OUTPUTS_MODULE = "vllm.v1.worker.gpu.structured_outputs"
NGRAM_MODULE = "vllm.v1.worker.gpu.spec_decode.ngram.speculator"


def _kv_cache_spec(vllm_config: Any) -> dict[str, Any]:
    from vllm.v1.kv_cache_interface import FullAttentionSpec

    return {LAYER_NAME: FullAttentionSpec(block_size=vllm_config.cache_config.block_size, num_kv_heads=1,
                                          head_size=1, dtype=load_vllm().torch.float32)}


def _attn_backend(kv_cache_config: Any, vllm_config: Any, device: Any, *args: Any,
                  **kwargs: Any) -> tuple[list[list[Any]], Any, list[int]]:
    from vllm.v1.worker.gpu.attn_utils import AttentionCGSupportInfo

    groups = kv_cache_config.kv_cache_groups
    return [[] for _ in groups], AttentionCGSupportInfo(), [g.kv_cache_spec.block_size for g in groups]


def _kv_cache(*args: Any, **kwargs: Any) -> dict[str, Any]:
    return {}


class GrammarBitmaskKernel:
    """``_apply_grammar_bitmask_kernel[grid](...)`` in numpy: for each of the ``grid[0]`` bitmask
    rows, ``logits_indices`` names (request row ``// MASK_STRIDE``, position ``% MASK_STRIDE``);
    if the position is below that request's logits count (``cu_num_logits``), every token whose
    bit is 0 (bit ``t % 32`` of word ``t // 32``) gets ``-inf`` in logits row
    ``cu_num_logits[request] + position``."""

    def __getitem__(self, grid: tuple[int, ...]) -> Callable[..., None]:
        def launch(logits: Any, logits_stride: int, logits_indices: Any, cu_num_logits: Any, bitmask: Any,
                   bitmask_stride: int, vocab_size: int, MASK_STRIDE: int, BLOCK_SIZE: int) -> None:
            torch = load_vllm().torch
            mapping, cu = logits_indices.cpu().numpy(), cu_num_logits.cpu().numpy()
            words = bitmask.cpu().numpy().astype("<i4")
            for b in range(grid[0]):
                req, position = divmod(int(mapping[b]), MASK_STRIDE)
                if position >= int(cu[req + 1]) - int(cu[req]):
                    continue
                bits = np.unpackbits(words[b].view(np.uint8), bitorder="little")[:vocab_size]
                logits[int(cu[req]) + position, :vocab_size][torch.from_numpy(bits == 0)] = float("-inf")

        return launch


class NgramFinalizeKernel:
    """``_ngram_finalize_kernel[grid](...)`` in torch, on the CPU: for each of the ``grid[0]`` batch
    rows ``b`` (request state row ``r = idx_mapping[b]``), the best score over the row's
    ``N_BLOCKS`` scan blocks packs the longest matching n-gram and its rightmost position as
    ``n * (L + 1) + pos + 1`` (0: no match); the drafts are the ``K`` tokens that followed that
    match in ``r``'s token ids (indices capped at ``L - 1``), each slot past the row's length, and
    every slot of a row without a match or without a sampled token this step, the row's last
    sampled token instead.  Written to ``drafts[b, :K]``."""

    def __getitem__(self, grid: tuple[int, ...]) -> Callable[..., None]:
        def launch(token_ids: Any, token_ids_stride: int, idx_mapping: Any, total_len: Any, num_sampled: Any,
                   last_sampled: Any, scratch: Any, scratch_stride: int, drafts: Any, L: int, N_BLOCKS: int,
                   K: int, K_PO2: int, N_BLOCKS_PO2: int, **launch_options: Any) -> None:
            for b in range(grid[0]):
                r = int(idx_mapping[b])
                score = int(scratch[b, :N_BLOCKS].max())
                seq_len, last = int(total_len[r]), int(last_sampled[r])
                found = score > 0 and int(num_sampled[b]) > 0
                n, pos = divmod(score - 1, L + 1) if score > 0 else (0, 0)
                start = pos + n
                for k in range(K):
                    valid = found and k < seq_len - start
                    drafts[b, k] = int(token_ids[r, min(start + k, L - 1)]) if valid else last

        return launch


@functools.cache
def install_mrv2_stubs() -> None:
    """Replace the three names in MRV2's runner module and the two kernels (once, idempotent)."""
    load_vllm()
    import importlib

    module = importlib.import_module(RUNNER_MODULE)
    setattr(module, "get_kv_cache_spec", _kv_cache_spec)
    setattr(module, "init_attn_backend", _attn_backend)
    setattr(module, "init_kv_cache", _kv_cache)
    structured = importlib.import_module(STRUCTURED_OUTPUTS_MODULE)
    setattr(structured, "_apply_grammar_bitmask_kernel", GrammarBitmaskKernel())
    ngram = importlib.import_module(NGRAM_MODULE)
    setattr(ngram, "_ngram_finalize_kernel", NgramFinalizeKernel())

