"""The stubs that let vLLM's V1 GPU model runner run on a CPU, and nothing more.

Each replaces only what cannot run here; the logic under test (EngineCore's
loop, the scheduler, the runner's request state, input preparation, the async
token feedback, output handling) stays vLLM's own.  ``docs/vllm-engine.md``
lists every stub with why it is safe.

Process-wide (``install_process_stubs``, once, idempotent):

* ``torch.cuda.Event`` / ``torch.Event`` / ``torch.cuda.Stream`` /
  ``torch.cuda.current_stream`` / ``torch.cuda.stream``: no-op objects.  CPU
  torch has no CUDA runtime; CPU work is synchronous, so an event is complete
  when recorded.  vLLM's own ``CPUModelRunner`` swaps them only during its
  ``__init__``; the async path creates them at run time too.
* ``Sampler.greedy_sample``: ``argmax`` (the GPU path) instead of the CPU
  platform's ``torch.ops._C.greedy_argmax`` (a compiled CPU op not installed).
* ``BlockTable.compute_slot_mapping``: the same formula in numpy, instead of
  a Triton kernel (``vllm/v1/worker/block_table.py``).
* Speculative decoding (``ngram_gpu``): ``rejection_sampler._rejection_greedy_sample``
  (a Triton kernel) -> the same greedy acceptance rule in plain Python over
  the same tensors; pinned host memory, which CPU torch cannot allocate, is
  plain host memory while ``GPUModelRunner.__init__`` allocates the n-gram
  staging buffers and while ``update_ngram_gpu_tensors_incremental`` stages
  its copies (``unpinned_host_memory``).

Per runner (``stub_runner``): ``get_kv_cache_spec`` (one full-attention
layer: the oracle model has no vLLM ``Attention`` layer; with a Mamba mode a
``MambaSpec`` layer beside it, the hybrid KV manager's second group),
``initialize_attn_backend`` (no attention backend: the model does its own
"attention" through the block table), ``initialize_kv_cache_tensors`` (the
model owns its paged store).
"""
from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import Iterator
from typing import Any

import numpy as np

from asyncspec.engine.vllm.vllm_environment import load_vllm, resolve_dotted

LAYER_NAME = "model.layers.0.self_attn.attn"
"""The one KV-cache layer the runner reports."""
MAMBA_LAYER_NAME = "model.layers.0.mixer"
"""The Mamba layer the runner reports beside it with a ``mamba_cache_mode`` (``stub_runner``)."""


class _NoopEvent:
    """A CUDA event on a CPU: always complete."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def record(self, *args: Any, **kwargs: Any) -> None:
        pass

    def synchronize(self) -> None:
        pass

    def wait(self, *args: Any, **kwargs: Any) -> None:
        pass

    def query(self) -> bool:
        return True


class _NoopStream:
    """A CUDA stream on a CPU: work runs in order on the calling thread."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        import torch

        self.device = torch.device("cpu")

    def wait_stream(self, *args: Any, **kwargs: Any) -> None:
        pass

    def wait_event(self, *args: Any, **kwargs: Any) -> None:
        pass

    def synchronize(self) -> None:
        pass

    def record_event(self, *args: Any, **kwargs: Any) -> _NoopEvent:
        return _NoopEvent()


@contextlib.contextmanager
def _noop_stream_context(*args: Any, **kwargs: Any) -> Iterator[None]:
    yield


def _greedy_argmax(logits: Any) -> Any:
    return logits.argmax(dim=-1).view(-1)


def _numpy_slot_mapping(self: Any, num_reqs: int, query_start_loc: Any, positions: Any) -> None:
    """``slot = block_table[row, pos // block_size] * block_size + pos % block_size``.

    What ``_compute_slot_mapping_kernel`` computes for one rank without context
    parallelism, read from and written to the same device buffers (the
    committed block table, the slot mapping); tokens past the last request's
    get -1 (``PAD_SLOT_ID``).  A Mamba group's table (``SlotMappingMode.NONE``) has no
    slot mapping: its rows are read as state indices, as vLLM's own method returns at once.
    """
    if getattr(getattr(self, "slot_mapping_mode", None), "name", "") == "NONE":
        return
    starts = query_start_loc[: num_reqs + 1].numpy()
    rows = np.repeat(np.arange(num_reqs), np.diff(starts))
    pos = positions[: len(rows)].numpy().astype(np.int64)
    table = self.block_table.gpu.numpy()
    out = self.slot_mapping.gpu.numpy()
    out[: len(rows)] = table[rows, pos // self.block_size] * self.block_size + pos % self.block_size
    out[len(rows): self.max_num_batched_tokens] = -1


class _GreedyRejection:
    """``_rejection_greedy_sample`` (vllm/v1/sample/rejection_sampler.py) without Triton.

    The contract of ``rejection_greedy_sample_kernel``, one request per row:
    for a greedy request walk its drafts in order, writing the target's
    argmax at each position; stop after the first draft that differs from it
    (synthetic mode: the first one not accepted at its rate, or a -1 padding
    draft); if none was rejected, write the bonus token after the last draft.
    Non-greedy rows are left alone (the random kernel handles them).
    """

    def __call__(self, output_token_ids: Any, cu_num_draft_tokens: Any, draft_token_ids: Any,
                 target_argmax: Any, bonus_token_ids: Any, is_greedy: Any, max_spec_len: int,
                 uniform_probs: Any, synthetic_conditional_rates: Any) -> None:
        ends = cu_num_draft_tokens.tolist()
        drafts, targets = draft_token_ids.tolist(), target_argmax.tolist()
        bonus = bonus_token_ids.reshape(-1).tolist()
        greedy = None if is_greedy is None else is_greedy.tolist()
        uniform = None if uniform_probs is None else uniform_probs.tolist()
        rates = None if synthetic_conditional_rates is None else synthetic_conditional_rates.tolist()
        out = output_token_ids
        start = 0
        for row, end in enumerate(ends):
            if greedy is None or greedy[row]:
                rejected = False
                for pos in range(end - start):
                    draft, target = drafts[start + pos], targets[start + pos]
                    if rates is None:
                        token, rejected = target, draft != target
                    else:
                        assert uniform is not None
                        accepted = uniform[start + pos] < rates[pos] and draft >= 0
                        token, rejected = (draft if accepted else target), not accepted
                    out[row, pos] = token
                    if rejected:
                        break
                if not rejected:
                    out[row, end - start] = bonus[row]
            start = end

    def register_warmup(self, *args: Any, **kwargs: Any) -> None:
        """vLLM's kernel dispatcher registers warm-up shapes; nothing to warm up here."""


@contextlib.contextmanager
def unpinned_host_memory() -> Iterator[None]:
    """Pinned host buffers as plain host buffers (CPU torch has no pinned-memory allocator).

    ``GPUModelRunner.__init__`` allocates the n-gram drafter's staging buffers
    with ``pin_memory=True`` unconditionally, and ``update_ngram_gpu_tensors_incremental``
    calls ``Tensor.pin_memory()``; vLLM gates every other pinned allocation on
    ``is_pin_memory_available()``.  Pinning only makes host-to-device copies
    asynchronous; the values are the same.  Applied only around those two calls.
    """
    import torch

    zeros, pin = torch.zeros, torch.Tensor.pin_memory

    def unpinned_zeros(*args: Any, **kwargs: Any) -> Any:
        kwargs.pop("pin_memory", None)
        return zeros(*args, **kwargs)

    setattr(torch, "zeros", unpinned_zeros)
    setattr(torch.Tensor, "pin_memory", lambda self, *a, **k: self.clone())
    try:
        yield
    finally:
        setattr(torch, "zeros", zeros)
        setattr(torch.Tensor, "pin_memory", pin)


def _staged_unpinned(update: Any) -> Any:
    def update_unpinned(*args: Any, **kwargs: Any) -> Any:
        with unpinned_host_memory():
            return update(*args, **kwargs)

    update_unpinned.__wrapped__ = update  # type: ignore[attr-defined]
    return update_unpinned


REAL_SLOT_MAPPING_ENV = "ASYNCSPEC_TRITON_SLOT_MAPPING"
"""Set to 1 (with Triton importable and ``TRITON_INTERPRET=1``) to run vLLM's real slot-mapping
kernel under Triton's interpreter instead of the numpy stub (the slow tier does)."""
REAL_REJECTION_ENV = "ASYNCSPEC_TRITON_REJECTION"
"""Set to 1 (Triton importable, ``TRITON_INTERPRET=1``) to run vLLM's real greedy rejection-sampling
kernel under Triton's interpreter instead of ``_GreedyRejection`` (the slow tier does)."""


@functools.cache
def install_process_stubs() -> None:
    """Install the process-wide stubs (once)."""
    v = load_vllm()
    torch = v.torch
    from vllm.v1.sample import rejection_sampler
    from vllm.v1.sample.sampler import Sampler
    from vllm.v1.worker import gpu_model_runner
    from vllm.v1.worker.block_table import BlockTable

    torch.cuda.Event = _NoopEvent
    torch.Event = _NoopEvent
    torch.cuda.Stream = _NoopStream
    torch.cuda.current_stream = lambda *a, **k: _NoopStream()
    torch.cuda.stream = _noop_stream_context
    setattr(Sampler, "greedy_sample", staticmethod(_greedy_argmax))
    if os.environ.get(REAL_SLOT_MAPPING_ENV) != "1":
        setattr(BlockTable, "compute_slot_mapping", _numpy_slot_mapping)
    if os.environ.get(REAL_REJECTION_ENV) != "1":
        setattr(rejection_sampler, "_rejection_greedy_sample", _GreedyRejection())
    update = getattr(gpu_model_runner, "update_ngram_gpu_tensors_incremental")
    setattr(gpu_model_runner, "update_ngram_gpu_tensors_incremental", _staged_unpinned(update))


def stub_runner(runner: Any, block_size: int, mamba_block_size: int | None = None,
                mamba_cache_mode: str = "none") -> None:
    """The three per-runner stubs: one KV layer (and with ``mamba_block_size`` a Mamba layer), no
    attention backend, no KV tensors.

    The Mamba layer is a ``MambaSpec`` of two small float32 states (vllm/v1/kv_cache_interface.py) of
    ``CacheConfig.mamba_block_size`` tokens per block in ``CacheConfig.mamba_cache_mode``, as a hybrid
    model's ``MambaBase.get_kv_cache_spec`` reports it (vllm/model_executor/layers/mamba/abstract.py);
    vLLM's own ``get_kv_cache_configs`` puts it in a second group of the one pool.
    """
    from vllm.v1.kv_cache_interface import FullAttentionSpec

    torch = load_vllm().torch

    def get_kv_cache_spec() -> dict[str, Any]:
        spec: dict[str, Any] = {LAYER_NAME: FullAttentionSpec(block_size=block_size, num_kv_heads=1, head_size=1,
                                                              dtype=torch.float32)}
        if mamba_block_size is not None:
            from vllm.v1.kv_cache_interface import MambaSpec

            spec[MAMBA_LAYER_NAME] = MambaSpec(block_size=mamba_block_size, shapes=((2,), (2,)),
                                               dtypes=(torch.float32, torch.float32),
                                               mamba_cache_mode=mamba_cache_mode)
        return spec

    def initialize_attn_backend(kv_cache_config: Any, is_profiling: bool = False) -> None:
        runner.attn_groups = [[] for _ in kv_cache_config.kv_cache_groups]

    def initialize_kv_cache_tensors(kv_cache_config: Any, kernel_block_sizes: Any,
                                    kv_cache_allocation_context: Any = None) -> dict[str, Any]:
        runner.model.allocate(kv_cache_config.num_blocks, block_size)
        return {}

    runner.get_kv_cache_spec = get_kv_cache_spec
    runner.initialize_attn_backend = initialize_attn_backend
    runner.initialize_kv_cache_tensors = initialize_kv_cache_tensors


TOUCHED: tuple[str, ...] = (
    "vllm.v1.engine.core.EngineCore.step",
    "vllm.v1.engine.core.EngineCore.step_with_batch_queue",
    "vllm.v1.engine.core.EngineCore.post_step",
    "vllm.v1.engine.core.EngineCore._process_aborts_queue",
    "vllm.v1.engine.core.EngineCore.preprocess_add_request",
    "vllm.v1.engine.core.EngineCore.add_request",
    "vllm.v1.engine.core.EngineCore.abort_requests",
    "vllm.v1.engine.core.EngineCore.reset_prefix_cache",
    "vllm.v1.core.sched.scheduler.Scheduler.schedule",
    "vllm.v1.core.sched.scheduler.Scheduler.update_from_output",
    "vllm.v1.core.sched.async_scheduler.AsyncScheduler._update_after_schedule",
    "vllm.v1.core.kv_cache_utils.resolve_kv_cache_block_sizes",
    "vllm.v1.executor.uniproc_executor.UniProcExecutor._init_executor",
    "vllm.v1.worker.cpu_model_runner.CPUModelRunner",
    "vllm.v1.worker.gpu_model_runner.GPUModelRunner.execute_model",
    "vllm.v1.worker.gpu_model_runner.GPUModelRunner.sample_tokens",
    "vllm.v1.worker.gpu_model_runner.GPUModelRunner.get_kv_cache_spec",
    "vllm.v1.worker.gpu_model_runner.GPUModelRunner.initialize_attn_backend",
    "vllm.v1.worker.gpu_model_runner.GPUModelRunner.initialize_kv_cache_tensors",
    "vllm.v1.worker.gpu_model_runner.GPUModelRunner.initialize_kv_cache",
    "vllm.v1.worker.gpu_model_runner.GPUModelRunner._model_forward",
    "vllm.v1.worker.block_table.BlockTable.compute_slot_mapping",
    "vllm.v1.sample.sampler.Sampler.greedy_sample",
    "vllm.v1.worker.worker_base.CompilationTimes",
    # Model Runner V2 (mrv2_runner.py, mrv2_stubs.py, mrv2_oracle.py)
    "vllm.v1.worker.cpu.model_runner.CPUModelRunner",
    "vllm.v1.worker.gpu.model_runner.get_kv_cache_spec",
    "vllm.v1.worker.gpu.model_runner.init_attn_backend",
    "vllm.v1.worker.gpu.model_runner.init_kv_cache",
    "vllm.v1.worker.gpu.model_runner.GPUModelRunner.load_model",
    "vllm.v1.worker.gpu.model_runner.GPUModelRunner.initialize_kv_cache",
    "vllm.v1.worker.gpu.model_runner.GPUModelRunner.prepare_inputs",
    "vllm.v1.worker.gpu.block_table.BlockTables.gather_block_tables",
    "vllm.v1.worker.gpu.attn_utils.AttentionCGSupportInfo",
    "vllm.forward_context.get_forward_context",
    "vllm.v1.worker.gpu.structured_outputs._apply_grammar_bitmask_kernel",
    "vllm.v1.worker.gpu.structured_outputs.StructuredOutputsWorker.apply_grammar_bitmask",
    "vllm.v1.worker.gpu_model_runner.update_ngram_gpu_tensors_incremental",
    "vllm.v1.worker.gpu_model_runner.GPUModelRunner.take_draft_token_ids",
    "vllm.v1.sample.rejection_sampler._rejection_greedy_sample",
    "vllm.v1.sample.rejection_sampler.rejection_greedy_sample_kernel",
    "vllm.v1.spec_decode.ngram_proposer_gpu.NgramProposerGPU",
    "vllm.v1.core.sched.scheduler.Scheduler.update_draft_token_ids",
    "vllm.v1.core.sched.scheduler.Scheduler.get_grammar_bitmask",
    "vllm.config.speculative.SpeculativeConfig.use_ngram_gpu",
    # the encoder part (oracle_encoder.py)
    "vllm.v1.worker.gpu_model_runner.GPUModelRunner._execute_mm_encoder",
    "vllm.v1.worker.gpu_model_runner.GPUModelRunner._gather_mm_embeddings",
    "vllm.model_executor.models.interfaces.SupportsMultiModal",
    # the mamba part (a MambaSpec layer beside attention; the slot-mapping stub reads a table's optional
    # slot_mapping_mode by name: a release without it maps every group, as before)
    "vllm.v1.kv_cache_interface.MambaSpec",
)
"""Every vLLM name the engine driver, its worker and its stubs rely on (also read by ``asyncspec drift``)."""


def moved_symbol() -> str | None:
    """One line naming the first vLLM name in ``TOUCHED`` that no longer exists, or None."""
    load_vllm()
    for dotted in TOUCHED:
        if resolve_dotted(dotted) is None:
            return f"vLLM moved {dotted}: the engine target's driver and stubs need it (present in vLLM 0.30.0 to 0.33.0)"
    return None
