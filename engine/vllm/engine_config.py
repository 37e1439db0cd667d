"""The ``VllmConfig`` an ``EngineCoreDriver`` is built from: the tiny offline model, CPU, eager.

Wraps vllm/config/{model,scheduler,cache,parallel,vllm}.py as
``engine/vllm/vllm_config.py`` does for the scheduler driver, with the executor
class in ``ParallelConfig.distributed_executor_backend`` (vLLM accepts an
``Executor`` subclass there: ``Executor.get_class``) and the KV pool size
fixed by ``num_gpu_blocks_override``.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, cast

from asyncspec.engine.vllm import surfaces
from asyncspec.engine.vllm.encoder_model import paligemma_dir
from asyncspec.engine.vllm.vllm_config import MAMBA_NONE_BLOCK, model_dir
from asyncspec.engine.vllm.vllm_environment import load_vllm
from asyncspec.engine.vllm.mrv2_runner import mrv2_problem


NGRAM_GPU = "ngram_gpu"
"""The speculative method the engine target drafts with."""


@dataclass(frozen=True)
class EngineDriverConfig:
    """What an engine is built from; ``num_blocks`` counts usable blocks (vLLM adds its null block)."""

    depth: int = 2  # max_concurrent_batches: 1 = EngineCore.step, 2, 3 = step_with_batch_queue
    block_size: int = 4
    num_blocks: int = 16
    max_num_seqs: int = 4
    max_num_batched_tokens: int = 16
    enable_chunked_prefill: bool = True
    enable_prefix_caching: bool = False
    max_model_len: int = 64
    eos_token_id: int = 2
    device: str = "cpu"  # "cuda": vLLM's GPUModelRunner with real streams (bench/gpu_engine_fuzz.py)
    num_speculative_tokens: int = 0  # k > 0: speculative decoding with vLLM's GPU n-gram drafter (ngram_gpu)
    runner: str = "v1"  # "mrv2": Model Runner V2 under Triton's interpreter (mrv2_runner.py)
    sync_scheduler: bool = False  # depth 2 over the plain Scheduler: pipeline parallelism 2 without async scheduling
    kv_connector: bool = False  # the toy KV connector (toy_connector.py), kv_both, both halves
    kv_load_failure_policy: str = "recompute"  # KVTransferConfig.kv_load_failure_policy: recompute | fail
    images: bool = False  # the tiny PaliGemma (encoder_model.py): encoder inputs, the stand-in encoder (oracle_encoder.py)
    mamba_cache_mode: str = ""  # "none": a MambaSpec layer beside attention (runner_stubs.stub_runner), CacheConfig's mode

    @property
    def async_scheduling(self) -> bool:
        """AsyncScheduler at depths 2 and 3, unless ``sync_scheduler`` (the batch queue over ``Scheduler``)."""
        return self.depth > 1 and not self.sync_scheduler


def needed_engine_capabilities(cfg: EngineDriverConfig) -> tuple[str, ...]:
    """The capabilities (``surfaces.py``) an engine built from ``cfg`` needs: the engine core,
    the scheduler, the runner ``cfg`` names, and the GPU n-gram drafter when it drafts."""
    needed = [surfaces.SCHEDULER, surfaces.ENGINE_CORE,
              surfaces.MRV2_RUNNER if cfg.runner == "mrv2" else surfaces.V1_RUNNER]
    if cfg.runner == "mrv2":
        needed.append(surfaces.MRV2_CONFIG)
    if cfg.num_speculative_tokens:
        needed += [surfaces.SPEC_DECODE, surfaces.ENGINE_SPEC_DECODE]
    if cfg.kv_connector:  # the toy connector's both halves (toy_connector.py, oracle_worker.py)
        needed += [surfaces.KV_CONNECTOR, surfaces.ENGINE_KV_CONNECTOR]
    if cfg.images:  # the scheduler's encoder inputs and the runner's encoder path (oracle_encoder.py)
        needed += [surfaces.ENCODER_INPUTS, surfaces.ENGINE_ENCODER]
    if cfg.mamba_cache_mode:  # the hybrid KV manager's Mamba group (MambaManager)
        needed.append(surfaces.MAMBA_GROUPS)
    return tuple(needed)


def build_engine_config(cfg: EngineDriverConfig, executor_class: type,
                        parallel: Mapping[str, Any] | None = None, model: Mapping[str, Any] | None = None,
                        extra: Mapping[str, Any] | None = None) -> Any:
    """A fresh ``VllmConfig`` (EngineCore mutates its cache config at start-up).

    ``parallel``, ``model``: more (or other) ``ParallelConfig`` and ``ModelConfig`` fields;
    ``extra``: more ``VllmConfig`` fields (``compilation_config``, ...): what
    ``cpu_limit_attempts.py`` tries on this build path.

    The CPU platform turns ``async_scheduling`` off during ``VllmConfig``
    initialisation (``CpuPlatform.check_and_update_config``); it is set back
    afterwards for depths 2 and 3, as on a GPU.

    With ``num_speculative_tokens`` k > 0 the config drafts with method
    ``ngram_gpu`` (``NgramProposerGPU``, vllm/v1/spec_decode/ngram_proposer_gpu.py,
    n-grams of 1..k tokens): the one drafter without a draft model for which
    ``VllmConfig`` keeps async scheduling on with the V1 runner
    (the V1 incompatibility test in ``VllmConfig.__post_init__``; ``asyncspec
    explain-config --speculative-method ngram_gpu``).

    Raises ``MissingCapability`` (capabilities.py) first when this vLLM lacks a
    capability of ``needed_engine_capabilities``.
    """
    v = load_vllm()
    surfaces.require(*needed_engine_capabilities(cfg))
    from vllm.config import DeviceConfig, ParallelConfig

    model_config = v.ModelConfig(**{"model": paligemma_dir() if cfg.images else model_dir(), "skip_tokenizer_init": True, "dtype": "float32", "seed": 0,
                                    "max_model_len": cfg.max_model_len, "enforce_eager": True, **dict(model or {})})
    scheduler_config = v.SchedulerConfig(
        max_num_seqs=cfg.max_num_seqs, max_num_batched_tokens=cfg.max_num_batched_tokens,
        max_model_len=cfg.max_model_len, is_encoder_decoder=False,
        enable_chunked_prefill=cfg.enable_chunked_prefill, async_scheduling=cfg.async_scheduling, policy="fcfs",
    )
    cache_config = v.CacheConfig(block_size=cfg.block_size, enable_prefix_caching=cfg.enable_prefix_caching,
                                 num_gpu_blocks_override=cfg.num_blocks + 1)
    parallel_config = ParallelConfig(distributed_executor_backend=executor_class, **dict(parallel or {}))
    speculative_config = None
    if cfg.num_speculative_tokens:
        k = cfg.num_speculative_tokens
        speculative_config = v.SpeculativeConfig(method=NGRAM_GPU, num_speculative_tokens=k,
                                                 prompt_lookup_min=1, prompt_lookup_max=k)
    vllm_config = v.VllmConfig(model_config=model_config, scheduler_config=scheduler_config,
                               cache_config=cache_config, parallel_config=parallel_config,
                               device_config=DeviceConfig(device=cast(Any, cfg.device)),
                               speculative_config=speculative_config, kv_transfer_config=kv_transfer_config(cfg),
                               **dict(extra or {}))
    vllm_config.scheduler_config.async_scheduling = cfg.async_scheduling
    if cfg.mamba_cache_mode:  # a hybrid model's cache settings (HybridAttentionMambaModelConfig sets them for one)
        vllm_config.cache_config.mamba_cache_mode = cfg.mamba_cache_mode  # Scheduler.__init__, the runner read it
        vllm_config.cache_config.mamba_block_size = mamba_block_size(cfg)  # the stub's MambaSpec (runner_stubs.py)
    if (cfg.runner == "mrv2") != bool(vllm_config.use_v2_model_runner):  # decided by the process's environment
        raise RuntimeError(mrv2_problem() or f"runner {cfg.runner!r} cannot run in a process that hosts Model "
                                              f"Runner V2 (VLLM_USE_V2_MODEL_RUNNER=1)")
    return vllm_config


def mamba_block_size(cfg: EngineDriverConfig) -> int:
    """The Mamba layer's block: ``vllm_config.MAMBA_NONE_BLOCK`` in mode ``none`` (a request holds one state
    block, as with the scheduler target's group), attention's in ``align``."""
    return cfg.block_size if cfg.mamba_cache_mode == "align" else MAMBA_NONE_BLOCK


def kv_transfer_config(cfg: EngineDriverConfig) -> Any:
    """``KVTransferConfig`` (vllm/config/kv_transfer.py) of the toy connector, role kv_both, by
    module path (``toy_connector.py``: vLLM builds its scheduler half in the scheduler and its
    worker half in ``ensure_kv_transfer_initialized``); None without ``kv_connector``."""
    if not cfg.kv_connector:
        return None
    from vllm.config import KVTransferConfig

    from asyncspec.engine.vllm import toy_connector

    policy: Any = "fail" if cfg.kv_load_failure_policy == "fail" else "recompute"
    return KVTransferConfig(kv_connector=toy_connector.CONNECTOR_NAME, kv_role="kv_both",
                            kv_connector_module_path=toy_connector.__name__, kv_load_failure_policy=policy)
