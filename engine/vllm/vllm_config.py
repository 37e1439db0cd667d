"""The vLLM configuration a driver is built from, offline: a tiny local model, no hub, no weights.

``DriverConfig`` is what a caller chooses (block size, pool, budget, chunked
prefill, async scheduling, prefix caching, deferred frees, speculative
tokens); ``configs_for`` turns it into vLLM's ``VllmConfig`` and
``KVCacheConfig`` (cached, since vLLM never mutates them).
"""

from __future__ import annotations

import contextlib
import functools
import math
import os
import random
import threading
from dataclasses import dataclass
from collections.abc import Iterator
from typing import Any

from asyncspec.engine.vllm import surfaces
from asyncspec.engine.vllm.encoder_model import paligemma_dir
from asyncspec.engine.vllm.vllm_environment import config_only_dir, load_vllm

VOCAB_SIZE = 1000
FIRST_PROMPT_TOKEN = 3  # ids 0..2 are left to bos/eos/pad of the tiny model

TINY_LLAMA_CONFIG: dict[str, Any] = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 4,
    "vocab_size": VOCAB_SIZE,
    "bos_token_id": 1,
    "eos_token_id": 2,
    "max_position_embeddings": 1 << 20,
    "torch_dtype": "float32",
}


@dataclass(frozen=True)
class DriverConfig:
    """What the scheduler is built from.

    ``num_blocks`` counts usable KV blocks: the pool gets one more, because vLLM
    reserves block 0 as the null block.  ``defer_block_free`` is forced onto the
    scheduler after construction (vLLM only derives it from a KV-consumer connector,
    and vLLM's own tests force it the same way).
    """

    block_size: int = 16
    num_blocks: int = 64
    max_num_seqs: int = 8
    max_num_batched_tokens: int = 64
    enable_chunked_prefill: bool = True
    async_scheduling: bool = True
    defer_block_free: bool = False
    enable_prefix_caching: bool = False
    max_model_len: int = 256
    eos_token_id: int = 2
    num_speculative_tokens: int = 0  # k > 0: an n-gram SpeculativeConfig with k drafts per step
    sliding_window: int = 0  # W > 0: a second KV cache group, sliding window W, sharing the pool
    kv_connector: bool = False  # a KV connector's scheduler half, kv_role kv_both
    policy: str = "fcfs"  # SchedulerConfig.policy: "fcfs" or "priority"
    long_prefill_token_threshold: int = 0  # SchedulerConfig's; 0 = no cap
    long_prefill_adaptive: bool = False  # SchedulerConfig.long_prefill_token_threshold_adaptive
    mrv2_pp: bool = False  # Model Runner V2 with pipeline parallelism 2: batch-queue depth 3, decode stagger 2
    kv_connector_name: str = "toy"  # "toy" (engine/vllm/toy_connector.py), "nixl" (vLLM's NixlConnector)
    # or "offloading" (vLLM's OffloadingConnector, kv_both, a CPU tier)
    offload_prompt_only: bool = True  # the OffloadingConnector's offload_prompt_only (its default)
    kv_load_failure_policy: str = "recompute"  # KVTransferConfig.kv_load_failure_policy: recompute | fail
    streaming_input: bool = False  # streaming-input sessions (Request.resumable); needs STREAMING_INPUT only
    max_image_tokens: int = 0  # > 0: the tiny PaliGemma (encoder_model.py), its stand-in processor's tokens per image
    encoder_cache_size: int = 0  # SchedulerConfig.encoder_cache_size (images only)
    encoder_compute_budget: int = 0  # SchedulerConfig.max_num_encoder_input_tokens (images only)
    mamba_cache_mode: str = ""  # "none" / "align": a MambaSpec group after full attention (CacheConfig.mamba_cache_mode)
    kv_cache_events: bool = False  # KVEventsConfig.enable_kv_cache_events, "null" publisher (vllm/config/kv_events.py)


@functools.cache
def model_dir() -> str:
    """A folder holding only a tiny Llama config.json (written atomically, reused)."""
    return config_only_dir("tiny-llama", TINY_LLAMA_CONFIG)


_CONFIG_LOCK = threading.Lock()


@functools.cache
def _build_configs(cfg: DriverConfig) -> tuple[Any, Any]:
    """(VllmConfig, KVCacheConfig) for ``cfg``; cached, since vLLM never mutates them.

    Wraps the config classes in vllm/config/{model,scheduler,cache,vllm}.py, after
    the probe (``needed_capabilities``): a field the release lacks is left out when
    ``cfg`` leaves it at its default, else ``MissingCapability`` is raised.  The
    first ModelConfig of a process inspects the architecture (a subprocess; cached on
    disk under VLLM_CACHE_ROOT), later ones are cheap.  The CPU platform turns
    ``async_scheduling`` off during VllmConfig init; it is set back here so that
    ``max_concurrent_batches`` is 2 as on a GPU.

    With ``num_speculative_tokens`` k > 0 the config carries an n-gram
    ``SpeculativeConfig`` (vllm/config/speculative.py; no draft model, no
    lookahead slots, no drafting slots: the scheduler's arithmetic is the
    plain k-draft one).  vLLM refuses ``--async-scheduling`` with n-gram on the
    V1 runner (``VllmConfig.__post_init__``), so the flag is left unset while the
    config is built and set afterwards: the driver builds the scheduler classes
    directly, the enablement decision is checked separately
    (``statemachine_tests/scheduler/enablement_check.py``).
    """
    v = load_vllm()
    surfaces.require(*needed_capabilities(cfg))
    model_config = v.ModelConfig(
        model=paligemma_dir() if cfg.max_image_tokens else model_dir(),
        skip_tokenizer_init=True,
        dtype="float32",
        seed=0,
        max_model_len=cfg.max_model_len,
    )
    scheduler_config = v.SchedulerConfig(
        max_num_seqs=cfg.max_num_seqs,
        max_num_batched_tokens=cfg.max_num_batched_tokens,
        max_model_len=cfg.max_model_len,
        is_encoder_decoder=False,
        enable_chunked_prefill=cfg.enable_chunked_prefill,
        async_scheduling=cfg.async_scheduling if not cfg.num_speculative_tokens else None,
        long_prefill_token_threshold=cfg.long_prefill_token_threshold,
        **_optional_scheduler_fields(cfg),
    )
    cache_config = v.CacheConfig(
        block_size=cfg.block_size, enable_prefix_caching=cfg.enable_prefix_caching
    )
    speculative_config = None
    if cfg.num_speculative_tokens:
        speculative_config = v.SpeculativeConfig(
            method="ngram",
            num_speculative_tokens=cfg.num_speculative_tokens,
            prompt_lookup_max=cfg.num_speculative_tokens,
            prompt_lookup_min=1,
        )
    extra: dict[str, Any] = {}
    if cfg.mrv2_pp:
        from vllm.config import ParallelConfig

        extra["parallel_config"] = ParallelConfig(pipeline_parallel_size=2)
    if cfg.kv_cache_events:  # BlockPool queues BlockStored / BlockRemoved / AllBlocksCleared
        from vllm.config import KVEventsConfig

        extra["kv_events_config"] = KVEventsConfig(enable_kv_cache_events=True, publisher="null")
    with mrv2_environment(cfg.mrv2_pp):
        vllm_config = v.VllmConfig(
            model_config=model_config,
            scheduler_config=scheduler_config,
            cache_config=cache_config,
            speculative_config=speculative_config,
            kv_transfer_config=_kv_transfer_config(cfg),
            **extra,
        )
    vllm_config.scheduler_config.async_scheduling = cfg.async_scheduling
    if cfg.mamba_cache_mode:  # read by Scheduler.__init__ (need_mamba_block_aligned_split) and MambaSpec
        vllm_config.cache_config.mamba_cache_mode = cfg.mamba_cache_mode
    if cfg.max_image_tokens:  # init=False fields, read by Scheduler.__init__'s MultiModalBudget
        vllm_config.scheduler_config.encoder_cache_size = cfg.encoder_cache_size
        vllm_config.scheduler_config.max_num_encoder_input_tokens = cfg.encoder_compute_budget
    num_pool_blocks = cfg.num_blocks + 1  # + the null block
    vllm_config.cache_config.num_gpu_blocks = num_pool_blocks
    return vllm_config, v.KVCacheConfig(
        num_blocks=num_pool_blocks, kv_cache_tensors=[], kv_cache_groups=_kv_cache_groups(cfg)
    )


def needed_capabilities(cfg: DriverConfig) -> tuple[str, ...]:
    """The capabilities (``surfaces.py``) a scheduler built from ``cfg`` needs.

    ``long_prefill_adaptive`` off needs nothing: the field is then left out where
    ``SchedulerConfig`` lacks it (0.30.0), which is its default anyway.
    """
    needed = [surfaces.SCHEDULER]
    if cfg.long_prefill_adaptive:
        needed.append(surfaces.LONG_PREFILL_ADAPTIVE)
    if cfg.policy == "priority":
        needed.append(surfaces.PRIORITY)
    if cfg.sliding_window:
        needed.append(surfaces.SLIDING_WINDOW)
    if cfg.num_speculative_tokens:
        needed.append(surfaces.SPEC_DECODE)
    if cfg.kv_connector:
        needed += [surfaces.KV_CONNECTOR, surfaces.KV_HOLDING_WAITING]
        if cfg.kv_connector_name == "nixl":
            needed.append(surfaces.NIXL_CONNECTOR)
        if cfg.kv_connector_name == "offloading":
            needed.append(surfaces.OFFLOADING_CONNECTOR)
    if cfg.mrv2_pp:
        needed.append(surfaces.MRV2_CONFIG)
    if cfg.streaming_input:
        needed.append(surfaces.STREAMING_INPUT)
    if cfg.mamba_cache_mode:
        needed.append(surfaces.MAMBA_GROUPS)
    if cfg.kv_cache_events:
        needed.append(surfaces.KV_CACHE_EVENTS)
    return tuple(needed)


def _optional_scheduler_fields(cfg: DriverConfig) -> dict[str, Any]:
    """``SchedulerConfig`` keywords a release may lack, given only where it has them.

    A field left out is one ``cfg`` leaves at vLLM's default (``needed_capabilities``
    has already refused a ``cfg`` that sets a field this vLLM lacks).
    """
    fields: dict[str, Any] = {}
    if surfaces.has(surfaces.PRIORITY):
        fields["policy"] = "priority" if cfg.policy == "priority" else "fcfs"
    if surfaces.has(surfaces.LONG_PREFILL_ADAPTIVE):
        fields["long_prefill_token_threshold_adaptive"] = cfg.long_prefill_adaptive
    return fields


def _kv_cache_groups(cfg: DriverConfig) -> list[Any]:
    """One full-attention group; with ``sliding_window`` W a sliding-window group after it.

    Both groups share the one pool (vllm/v1/kv_cache_interface.py ``KVCacheGroupSpec``,
    ``FullAttentionSpec``, ``SlidingWindowSpec``); the scheduler reads only this
    config, so the tiny model stays a plain Llama.  Without prefix caching vLLM picks
    ``KVCacheCoordinatorNoPrefixCache`` (kv_cache_coordinator.py).
    """
    v = load_vllm()
    shape = {"block_size": cfg.block_size, "num_kv_heads": 1, "head_size": 1, "dtype": v.torch.float32}
    groups = [v.KVCacheGroupSpec(["layer"], v.FullAttentionSpec(**shape))]
    if cfg.sliding_window:
        sliding = v.SlidingWindowSpec(**shape, sliding_window=cfg.sliding_window)
        groups.append(v.KVCacheGroupSpec(["swa.layer"], sliding))
    if cfg.mamba_cache_mode:
        from vllm.v1.kv_cache_interface import MambaSpec

        mamba = MambaSpec(block_size=mamba_block_size(cfg), shapes=((2,), (2,)),
                          dtypes=(v.torch.float32, v.torch.float32), mamba_cache_mode=cfg.mamba_cache_mode)
        groups.append(v.KVCacheGroupSpec(["mamba.layer"], mamba))
    return groups


MAMBA_NONE_BLOCK = 256
"""A Mamba block in mamba_cache_mode "none": wider than any sequence (max_model_len at most this), so a
request holds one state block (vLLM sizes it from the model's state; the attempt in feature_attempts.py)."""


def mamba_block_size(cfg: DriverConfig) -> int:
    """The Mamba group's block size: attention's in "align", ``MAMBA_NONE_BLOCK`` in "none"."""
    return cfg.block_size if cfg.mamba_cache_mode == "align" else MAMBA_NONE_BLOCK


def scheduler_block_size(cfg: DriverConfig) -> int:
    """``Scheduler``'s block size: the LCM of the groups' (``KVCacheCoordinator.__init__`` refuses
    less); prompts are hashed at attention's (``hash_block_size``)."""
    return math.lcm(cfg.block_size, mamba_block_size(cfg)) if cfg.mamba_cache_mode else cfg.block_size


@contextlib.contextmanager
def mrv2_environment(enabled: bool) -> Iterator[None]:
    """``VLLM_USE_V2_MODEL_RUNNER=1`` while a config or a scheduler is built (vLLM reads it
    through ``VllmConfig.use_v2_model_runner``, which overrides its no-Triton fallback to the
    V1 runner; ``Scheduler.__init__`` keeps the answer), then the variable as it was."""
    if not enabled:
        yield
        return
    import vllm.envs as envs

    # An in-process EngineCore built earlier freezes vLLM's env cache (EngineCore's start-up calls
    # enable_envs_cache): without this the variable below is never read and V1's shape is built.
    envs.disable_envs_cache()
    old = os.environ.get("VLLM_USE_V2_MODEL_RUNNER")
    os.environ["VLLM_USE_V2_MODEL_RUNNER"] = "1"
    try:
        yield
    finally:
        if old is None:
            del os.environ["VLLM_USE_V2_MODEL_RUNNER"]
        else:
            os.environ["VLLM_USE_V2_MODEL_RUNNER"] = old


def _kv_transfer_config(cfg: DriverConfig) -> Any:
    """``KVTransferConfig`` (vllm/config/kv_transfer.py), role kv_both: the toy connector by
    module path, or vLLM's ``NixlConnector`` (its scheduler half is pure Python: no nixl
    library, no thread at build); None without a connector."""
    if not cfg.kv_connector:
        return None
    from vllm.config import KVTransferConfig

    from asyncspec.engine.vllm import toy_connector

    policy: Any = "fail" if cfg.kv_load_failure_policy == "fail" else "recompute"
    if cfg.kv_connector_name == "nixl":
        return KVTransferConfig(kv_connector="NixlConnector", kv_role="kv_both", kv_load_failure_policy=policy)
    if cfg.kv_connector_name == "offloading":  # vLLM's CPU tier (offloading_connector.py): 1 MiB, ample here
        return KVTransferConfig(kv_connector="OffloadingConnector", kv_role="kv_both",
                                kv_connector_extra_config={"cpu_bytes_to_use": OFFLOAD_CPU_BYTES,
                                                           "offload_prompt_only": cfg.offload_prompt_only})
    return KVTransferConfig(kv_connector=toy_connector.CONNECTOR_NAME, kv_role="kv_both",
                            kv_connector_module_path=toy_connector.__name__, kv_load_failure_policy=policy)


OFFLOAD_CPU_BYTES = 1 << 20
"""The OffloadingConnector's CPU tier (``cpu_bytes_to_use``): far more blocks than any workload stores."""


NIXL_REMOTE_PREFILL: dict[str, Any] = {
    "do_remote_prefill": True, "do_remote_decode": False, "remote_engine_id": "prefiller",
    "remote_request_id": "remote", "remote_host": "localhost", "remote_port": 1, "remote_block_ids": [1],
    "tp_size": 1,
}
"""``kv_transfer_params`` of a NixlConnector decode-side request whose prompt KV is pulled from a
prefiller (pull mode): the whole prompt is loaded asynchronously, once."""


def configs_for(cfg: DriverConfig) -> tuple[Any, Any]:
    """(VllmConfig, KVCacheConfig) for ``cfg``, built once per process; raises
    ``MissingCapability`` (capabilities.py) before building anything this vLLM cannot."""
    with _CONFIG_LOCK:
        return _build_configs(cfg)


def default_prompt(req_id: str, prompt_len: int, eos_token_id: int = 2) -> list[int]:
    """Deterministic prompt ids for ``req_id``: never EOS, unrelated across ids.

    Seeded by the id string (stable across processes), so two requests share a
    prefix-cache block only with negligible probability.
    """
    rng = random.Random(f"asyncspec-prompt:{req_id}")
    tokens: list[int] = []
    while len(tokens) < prompt_len:
        tok = rng.randrange(FIRST_PROMPT_TOKEN, VOCAB_SIZE)
        if tok != eos_token_id:
            tokens.append(tok)
    return tokens
