"""The vLLM surface each driver part needs, as named capabilities, and the probe of the installed vLLM.

One capability per part a campaign can run or skip:

* ``SCHEDULER`` — ``scheduler_driver.py``: the scheduler classes, their
  constructor keywords, the counters read after each call (request and
  scheduler attributes), the config classes and the fields ``vllm_config.py``
  always passes;
* ``LONG_PREFILL_ADAPTIVE`` — ``SchedulerConfig.long_prefill_token_threshold_adaptive``
  (absent in 0.30.0: the config builder then leaves it out, and a part that
  turns it on is skipped);
* ``KV_HOLDING_WAITING`` — ``Scheduler.kv_holding_waiting``, the queue of requests
  whose KV a connector is loading (absent in 0.30.0);
* ``PRIORITY``, ``SLIDING_WINDOW``, ``SPEC_DECODE``, ``STRUCTURED_OUTPUT``,
  ``KV_CONNECTOR`` (``toy_connector.py``, ``KVTransferConfig``), ``NIXL_CONNECTOR``, ``OFFLOADING_CONNECTOR``
  (its scheduler half and ``OffloadingWorkerMetadata``, offloading/common.py),
  ``STREAMING_INPUT`` (``Request.resumable``, ``StreamingUpdate``: streaming-input sessions);
  ``STOP_CONDITIONS`` (``SamplingParams.stop_token_ids``, ``min_tokens``, ``repetition_detection`` and
  ``RepetitionDetectionParams``: the stops ``check_stop`` tests besides EOS and the length cap);
  ``KV_CACHE_EVENTS`` (``KVEventsConfig``: the block pool's KV cache events, compared where prefix
  caching is on, ``scheduler/kv_events_obs.py``);
  ``PAUSE`` (``PauseState``, ``Scheduler.set_pause_state``: ``pause_scheduler``'s effect);
  ``ENCODER_INPUTS`` (PaliGemma's processor classes the stand-in derives from, ``MultiModalFeatureSpec``,
  ``PlaceholderRange``: the ``encoder`` part, ``encoder_model.py``); ``ENGINE_ENCODER`` (the V1 runner's
  ``_execute_mm_encoder`` / ``_gather_mm_embeddings``, ``SupportsMultiModal``, the kwargs item classes an
  image's data is built of: the ``vllm-engine`` target's ``encoder`` part, ``oracle_encoder.py``);
  ``MAMBA_GROUPS`` (``MambaSpec`` and its ``mamba_cache_mode``, ``CacheConfig.mamba_cache_mode``, the
  scheduler's ``hash_block_size``: the ``mamba`` part);
  ``ENGINE_DP_WAVES`` (``DPEngineCoreProc``'s busy loop and wave functions, ``ParallelConfig.sync_dp_state``
  and the all-reduce under it: the ``vllm-engine`` target's ``dp`` part, ``dp_driver.py``);
  ``ENGINE_PAUSE`` (``EngineCore.pause_scheduler`` itself, in process, and the caches its
  ``clear_cache`` resets: the ``vllm-engine`` target's ``pause`` part);
* ``MRV2_CONFIG`` — a ``VllmConfig`` for Model Runner V2 built in a process
  without Triton (0.31.0 and 0.32.0 validate "Model Runner V2 requires Triton"
  in ``VllmConfig._validate_v2_model_runner``; 0.33.0 moved that check to the worker);
* ``ENGINE_CORE`` — ``engine_core_driver.py``: ``EngineCore``, its loop, the
  scheduler rebuilt between cases, the executor; ``DECODE_STAGGER`` — the
  depth-3 engine's ``AsyncScheduler.decode_stagger`` (absent in 0.30.0, whose
  stagger is ``pp_size`` itself);
* ``V1_RUNNER`` — ``oracle_worker.py`` / ``runner_stubs.py``: the V1 runner and
  the names its stubs replace; ``ENGINE_SPEC_DECODE`` — the GPU n-gram drafter;
* ``MRV2_RUNNER`` — ``mrv2_runner.py`` / ``mrv2_stubs.py`` / ``mrv2_oracle.py``
  (absent in 0.30.0 and 0.31.0: ``GPUModelRunner.load_model`` there takes no
  ``model``, so the oracle model cannot be handed in);
* ``STOP_TRIM_ROLLBACK``, ``TRIM_NULL_HEAD``, ``ONE_WAITING_QUEUE``,
  ``SYNC_DRAFTS_CACHE_AT_DELIVERY`` — behaviour that
  changed between releases; each one's absence selects a release setting
  (``release_settings.py``), never a skip.

For a campaign: ``vllm_config.needed_capabilities(DriverConfig)`` and
``engine_config.needed_engine_capabilities(EngineDriverConfig)`` name what a
part needs; ``has`` / ``require`` answer before anything is built (a driver
raises ``capabilities.MissingCapability`` itself otherwise, whose ``reason`` is
the line to print for a skipped part); ``vllm_report()`` is the JSON's
``"vllm"`` object.

``tests/engine/test_vllm_capabilities.py`` holds this list against every vLLM
name the drivers import or call (``fidelity/cited.py``), so a new call in a
driver must be added here.
"""
from __future__ import annotations

import functools
import inspect
from typing import Any

from asyncspec.engine.vllm.capabilities import Attr, Behaviour, Capabilities, Exists, Field, Param, Surface, probe

SCHEDULER = "scheduler"
LONG_PREFILL_ADAPTIVE = "scheduler.long-prefill-adaptive"
KV_HOLDING_WAITING = "scheduler.kv-holding-waiting"
PRIORITY = "scheduler.priority"
SLIDING_WINDOW = "scheduler.sliding-window"
SPEC_DECODE = "scheduler.spec-decode"
STRUCTURED_OUTPUT = "structured-output"
KV_CONNECTOR = "kv-connector"
NIXL_CONNECTOR = "kv-connector.nixl"
OFFLOADING_CONNECTOR = "kv-connector.offloading"
MRV2_CONFIG = "mrv2.config"
ENGINE_CORE = "engine-core"
DECODE_STAGGER = "engine.decode-stagger"
V1_RUNNER = "runner.v1"
STOP_TRIM_ROLLBACK = "scheduler.stop-trim-rollback"
TRIM_NULL_HEAD = "kv.trim-null-head"
ONE_WAITING_QUEUE = "scheduler.one-waiting-queue"
SYNC_DRAFTS_CACHE_AT_DELIVERY = "scheduler.drafts-cache-at-delivery"
ENGINE_SPEC_DECODE = "engine.spec-decode"
STREAMING_INPUT = "scheduler.streaming-input"
PAUSE = "scheduler.pause"
ENGINE_PAUSE = "engine.pause"
ENCODER_INPUTS = "scheduler.encoder-inputs"
MAMBA_GROUPS = "scheduler.mamba-groups"
STOP_CONDITIONS = "scheduler.stop-conditions"
KV_CACHE_EVENTS = "scheduler.kv-cache-events"
ENGINE_KV_CONNECTOR = "engine.kv-connector"
ENGINE_ENCODER = "engine.encoder"
ENGINE_DP_WAVES = "engine.dp-waves"
MRV2_RUNNER = "runner.mrv2"

_SCHED = "vllm.v1.core.sched.scheduler.Scheduler"
_ASYNC = "vllm.v1.core.sched.async_scheduler.AsyncScheduler"
_REQUEST = "vllm.v1.request.Request"
_SCHED_CFG = "vllm.config.SchedulerConfig"
_ENGINE = "vllm.v1.engine.core.EngineCore"
_V1 = "vllm.v1.worker.gpu_model_runner.GPUModelRunner"
_MRV2 = "vllm.v1.worker.gpu.model_runner"
_BASE = "vllm.distributed.kv_transfer.kv_connector.v1.base"


def _members(kind: type[Surface], capability: str, path: str, *members: str) -> list[Surface]:
    """``kind(capability, path, m)`` for each member ``m``."""
    return [kind(capability, path, m) for m in members]


def _exist(capability: str, *paths: str) -> list[Surface]:
    """``Exists(capability, p)`` for each path."""
    return [Exists(capability, p) for p in paths]


def _mrv2_validator_without_triton(cls: Any) -> str | None:
    """A problem when ``VllmConfig._validate_v2_model_runner`` demands Triton and this process has none."""
    validator = getattr(cls, "_validate_v2_model_runner", None)
    if validator is None:
        return None
    try:
        text = inspect.getsource(validator)
    except (OSError, TypeError):
        return None
    if "HAS_TRITON" not in text:
        return None
    from vllm.triton_utils import HAS_TRITON

    if HAS_TRITON:
        return None
    return ("vllm.config.VllmConfig._validate_v2_model_runner requires Triton "
            "(raises 'Model Runner V2 requires Triton'; 0.33.0 checks it in the worker)")


def _source_lacks(method: Any, needle: str, problem: str) -> str | None:
    """``problem`` when the source of ``method`` does not contain ``needle`` (None without a source)."""
    try:
        text = inspect.getsource(method)
    except (OSError, TypeError):
        return None
    return None if needle in text else problem


def _stop_trim_keeps_computed(method: Any) -> str | None:
    """A problem when ``Scheduler._update_request_with_output`` never lowers ``num_computed_tokens``
    (0.30.0-0.32.0: the tokens trimmed at a stop stay counted; 0.33.0 takes them back)."""
    return _source_lacks(method, "num_computed_tokens -=",
                         f"{_SCHED}._update_request_with_output keeps num_computed_tokens at a stop that "
                         "trims tokens (0.33.0 takes them back)")


def _caches_at_delivery(method: Any) -> str | None:
    """A problem when ``Scheduler.update_from_output`` caches no block (0.30.0-0.32.0: the synchronous
    scheduler hashes a step's full blocks at the next ``schedule()``, in ``allocate_slots``)."""
    return _source_lacks(method, "cache_blocks(",
                         f"{_SCHED}.update_from_output caches no block: with drafts, the synchronous scheduler "
                         "hashes full blocks at the next schedule() (0.33.0 at delivery)")


def _skipped_waiting_queue(cls: Any) -> str | None:
    """A problem when the scheduler keeps blocked requests in a queue of their own (0.30.0's
    ``Scheduler.skipped_waiting``; 0.31.0 on keep them in ``waiting``)."""
    if not Attr(ONE_WAITING_QUEUE, _SCHED, "skipped_waiting").check(cls):
        return (f"{_SCHED} queues blocked requests in skipped_waiting, read before waiting "
                "(0.31.0 keeps them in waiting)")
    return None


SCHEDULER_SURFACES: list[Surface] = [
    *_exist(SCHEDULER, _SCHED, _ASYNC, "vllm.v1.request.RequestStatus", "vllm.sampling_params.SamplingParams",
            "vllm.v1.outputs.ModelRunnerOutput", "vllm.v1.kv_cache_interface.KVCacheConfig",
            "vllm.v1.kv_cache_interface.KVCacheGroupSpec", "vllm.v1.kv_cache_interface.FullAttentionSpec",
            "vllm.v1.structured_output.StructuredOutputManager", "vllm.v1.core.kv_cache_utils.init_none_hash",
            "vllm.v1.core.kv_cache_utils.get_request_block_hasher", "vllm.utils.hashing.sha256",
            "vllm.config.ModelConfig", "vllm.config.CacheConfig", "vllm.config.VllmConfig",
            f"{_SCHED}.schedule", f"{_SCHED}.update_from_output", f"{_SCHED}.add_request",
            f"{_SCHED}.finish_requests", f"{_SCHED}.has_requests", f"{_SCHED}._update_after_schedule",
            f"{_ASYNC}._update_after_schedule", "vllm.sampling_params.SamplingParams.update_from_generation_config",
            "vllm.v1.structured_output.StructuredOutputManager.__init__"),
    *_members(Param, SCHEDULER, _SCHED, "vllm_config", "kv_cache_config", "structured_output_manager",
              "block_size", "log_stats"),
    *_members(Param, SCHEDULER, _REQUEST, "request_id", "prompt_token_ids", "sampling_params",
              "pooling_params", "arrival_time", "priority", "block_hasher"),
    *_members(Param, SCHEDULER, "vllm.sampling_params.SamplingParams", "max_tokens", "extra_args"),
    *_members(Attr, SCHEDULER, "vllm.sampling_params.SamplingParams", "eos_token_id"),
    *_members(Param, SCHEDULER, "vllm.v1.outputs.ModelRunnerOutput", "req_ids", "req_id_to_index",
              "sampled_token_ids", "logprobs", "prompt_logprobs_dict", "pooler_output"),
    *_members(Attr, SCHEDULER, "vllm.v1.outputs.ModelRunnerOutput", "kv_connector_output"),
    *_members(Field, SCHEDULER, _SCHED_CFG, "max_num_seqs", "max_num_batched_tokens", "max_model_len",
              "is_encoder_decoder", "enable_chunked_prefill", "async_scheduling", "long_prefill_token_threshold"),
    *_members(Param, SCHEDULER, "vllm.config.ModelConfig", "model", "skip_tokenizer_init", "dtype", "seed",
              "max_model_len"),
    *_members(Field, SCHEDULER, "vllm.config.CacheConfig", "block_size", "enable_prefix_caching", "num_gpu_blocks"),
    *_members(Param, SCHEDULER, "vllm.v1.kv_cache_interface.KVCacheConfig", "num_blocks", "kv_cache_tensors",
              "kv_cache_groups"),
    *_members(Param, SCHEDULER, "vllm.v1.kv_cache_interface.FullAttentionSpec", "block_size", "num_kv_heads",
              "head_size", "dtype"),
    *_members(Attr, SCHEDULER, _SCHED, "requests", "running", "waiting", "sched_step_seq", "processed_step_seq",
              "deferred_frees", "kv_cache_manager", "defer_block_free", "structured_output_manager"),
    *_members(Attr, SCHEDULER, _REQUEST, "num_tokens", "num_prompt_tokens", "num_output_tokens",
              "num_computed_tokens", "num_output_placeholders", "num_in_flight_tokens", "num_stale_output_tokens",
              "drop_stale_output", "is_prefill_chunk", "num_preemptions", "last_sched_seq", "output_token_ids",
              "status", "structured_output_request"),
    *_members(Attr, SCHEDULER, "vllm.v1.core.kv_cache_manager.KVCacheManager", "get_block_ids", "block_pool"),
    *_members(Attr, SCHEDULER, "vllm.v1.core.block_pool.BlockPool", "get_num_free_blocks"),
    *_members(Attr, SCHEDULER, "vllm.v1.core.sched.output.SchedulerOutput", "num_scheduled_tokens",
              "scheduled_new_reqs", "scheduled_cached_reqs", "preempted_req_ids", "finished_req_ids",
              "total_num_scheduled_tokens", "scheduled_spec_decode_tokens", "pending_structured_output_tokens"),
    *_members(Attr, SCHEDULER, "vllm.v1.core.sched.output.CachedRequestData", "resumed_req_ids"),
    Field(LONG_PREFILL_ADAPTIVE, _SCHED_CFG, "long_prefill_token_threshold_adaptive"),
    Attr(KV_HOLDING_WAITING, _SCHED, "kv_holding_waiting"),
    Behaviour(STOP_TRIM_ROLLBACK, f"{_SCHED}._update_request_with_output", test=_stop_trim_keeps_computed),
    Exists(TRIM_NULL_HEAD, "vllm.v1.core.kv_cache_utils.trim_null_head"),
    Behaviour(ONE_WAITING_QUEUE, _SCHED, test=_skipped_waiting_queue),
    Behaviour(SYNC_DRAFTS_CACHE_AT_DELIVERY, f"{_SCHED}.update_from_output", test=_caches_at_delivery),
    Field(PRIORITY, _SCHED_CFG, "policy"),
    *_exist(STREAMING_INPUT, "vllm.v1.request.StreamingUpdate", f"{_SCHED}._update_request_as_session",
            f"{_SCHED}._handle_stopped_request"),
    Param(STREAMING_INPUT, _REQUEST, "resumable"),
    Exists(STOP_CONDITIONS, "vllm.sampling_params.RepetitionDetectionParams"),
    Exists(KV_CACHE_EVENTS, "vllm.config.KVEventsConfig"),
    *_members(Param, STOP_CONDITIONS, "vllm.sampling_params.SamplingParams", "stop_token_ids", "min_tokens",
              "repetition_detection"),
    *_exist(PAUSE, "vllm.v1.core.sched.interface.PauseState", f"{_SCHED}.set_pause_state"),
    *_exist(ENCODER_INPUTS, "vllm.model_executor.models.paligemma", "vllm.multimodal.inputs.MultiModalFeatureSpec",
            "vllm.multimodal.inputs.PlaceholderRange", "vllm.multimodal.registry._ProcessorFactories"),
    *_exist(ENGINE_ENCODER, f"{_V1}._execute_mm_encoder", f"{_V1}._gather_mm_embeddings",
            "vllm.model_executor.models.interfaces.SupportsMultiModal", "vllm.multimodal.inputs.MultiModalKwargsItem",
            "vllm.multimodal.inputs.MultiModalFieldElem", "vllm.multimodal.inputs.MultiModalBatchedField"),
    *_exist(ENGINE_DP_WAVES, "vllm.v1.engine.core.DPEngineCoreProc.run_busy_loop",
            "vllm.v1.engine.core.DPEngineCoreProc._has_global_unfinished_reqs",
            "vllm.v1.engine.core.DPEngineCoreProc._handle_client_request",
            "vllm.v1.engine.core.DPEngineCoreProc.add_request", "vllm.config.parallel.ParallelConfig.sync_dp_state",
            "vllm.config.parallel.cpu_all_reduce_", "vllm.v1.core.sched.interface.PauseState",
            "vllm.distributed.utils.stateless_init_torch_distributed_process_group",
            "vllm.distributed.utils.stateless_destroy_torch_distributed_process_group",
            "vllm.v1.engine.EngineCoreRequestType", "vllm.v1.engine.core.DPEngineCoreProc",
            "vllm.v1.engine.core.DPEngineCoreProc.__init__", "vllm.v1.engine.core.DPEngineCoreProc.resume_scheduler",
            "vllm.v1.core.sched.scheduler.Scheduler.pause_state"),
    Exists(MAMBA_GROUPS, "vllm.v1.kv_cache_interface.MambaSpec"),
    Field(MAMBA_GROUPS, "vllm.v1.kv_cache_interface.MambaSpec", "mamba_cache_mode"),
    Field(MAMBA_GROUPS, "vllm.config.CacheConfig", "mamba_cache_mode"),
    Param(MAMBA_GROUPS, _SCHED, "hash_block_size"),
    *_exist(ENGINE_PAUSE, f"{_ENGINE}.pause_scheduler", f"{_ENGINE}.resume_scheduler", f"{_ENGINE}.is_scheduler_paused",
            f"{_ENGINE}.reset_mm_cache", f"{_ENGINE}.reset_encoder_cache", f"{_SCHED}.reset_encoder_cache",
            f"{_V1}.reset_mm_cache", f"{_V1}.reset_encoder_cache"),
    *_members(Param, SLIDING_WINDOW, "vllm.v1.kv_cache_interface.SlidingWindowSpec", "sliding_window",
              "block_size"),
    *_exist(SPEC_DECODE, "vllm.config.SpeculativeConfig", "vllm.v1.outputs.DraftTokenIds",
            f"{_SCHED}.update_draft_token_ids", f"{_SCHED}.update_draft_token_ids_in_output"),
    *_members(Field, SPEC_DECODE, "vllm.config.SpeculativeConfig", "method", "num_speculative_tokens",
              "prompt_lookup_max", "prompt_lookup_min"),
    *_exist(STRUCTURED_OUTPUT, "vllm.sampling_params.StructuredOutputsParams",
            "vllm.v1.structured_output.backend_types.StructuredOutputGrammar", f"{_SCHED}.get_grammar_bitmask",
            "vllm.v1.structured_output.backend_types.StructuredOutputGrammar.reset"),
    *_members(Param, STRUCTURED_OUTPUT, "vllm.sampling_params.SamplingParams", "structured_outputs"),
    *_members(Field, STRUCTURED_OUTPUT, "vllm.sampling_params.StructuredOutputsParams", "regex"),
    *_members(Attr, STRUCTURED_OUTPUT, "vllm.v1.structured_output.StructuredOutputManager", "backend",
              "_use_async_grammar_compilation"),
    *_exist(KV_CONNECTOR, "vllm.config.KVTransferConfig", "vllm.v1.outputs.KVConnectorOutput", f"{_BASE}.KVConnectorBase_V1",
            f"{_BASE}.KVConnectorBase_V1.__init__", f"{_BASE}.KVConnectorMetadata", f"{_BASE}.SupportsHMA",
            f"{_BASE}.SupportsHMA.request_finished_all_groups", f"{_BASE}.KVConnectorBase_V1.requires_kv_delivery"),
    *_members(Field, KV_CONNECTOR, "vllm.config.KVTransferConfig", "kv_connector", "kv_role",
              "kv_connector_module_path", "kv_load_failure_policy"),
    *_members(Param, KV_CONNECTOR, f"{_BASE}.KVConnectorBase_V1.__init__", "vllm_config", "role", "kv_cache_config"),
    *_exist(ENGINE_KV_CONNECTOR, f"{_BASE}.KVConnectorBase_V1._get_connector_metadata",
            f"{_BASE}.KVConnectorTransferResults", "vllm.distributed.kv_transfer.kv_transfer_state",
            "vllm.distributed.kv_transfer.kv_transfer_state.ensure_kv_transfer_initialized",
            "vllm.distributed.kv_transfer.kv_transfer_state.ensure_kv_transfer_shutdown"),
    Attr(ENGINE_KV_CONNECTOR, "vllm.distributed.kv_transfer.kv_transfer_state", "_KV_CONNECTOR_AGENT"),
    Exists(NIXL_CONNECTOR, "vllm.distributed.kv_transfer.kv_connector.v1.nixl.NixlConnector"),
    Exists(OFFLOADING_CONNECTOR,
           "vllm.distributed.kv_transfer.kv_connector.v1.offloading.scheduler.OffloadingConnectorScheduler"),
    Exists(OFFLOADING_CONNECTOR, "vllm.distributed.kv_transfer.kv_connector.v1.offloading.common.OffloadingWorkerMetadata"),
    Exists(MRV2_CONFIG, "vllm.config.ParallelConfig"),
    Field(MRV2_CONFIG, "vllm.config.ParallelConfig", "pipeline_parallel_size"),
    Attr(MRV2_CONFIG, "vllm.config.VllmConfig", "use_v2_model_runner"),
    Exists(MRV2_CONFIG, "vllm.triton_utils.HAS_TRITON"),
    Behaviour(MRV2_CONFIG, "vllm.config.VllmConfig", test=_mrv2_validator_without_triton),
]
"""What ``scheduler_driver.py`` and ``vllm_config.py`` need."""

ENGINE_SURFACES: list[Surface] = [
    *_exist(ENGINE_CORE, _ENGINE, "vllm.v1.engine.EngineCoreRequest", "vllm.config.DeviceConfig",
            "vllm.config.ParallelConfig", "vllm.config.set_current_vllm_config",
            "vllm.v1.core.kv_cache_utils.resolve_kv_cache_block_sizes",
            "vllm.v1.executor.uniproc_executor.UniProcExecutor",
            "vllm.v1.executor.uniproc_executor.UniProcExecutor._init_executor",
            "vllm.v1.executor.uniproc_executor.UniProcExecutor.execute_model",
            "vllm.v1.executor.uniproc_executor.UniProcExecutor.sample_tokens",
            "vllm.v1.executor.uniproc_executor.UniProcExecutor.take_draft_token_ids",
            f"{_ENGINE}.step", f"{_ENGINE}.step_with_batch_queue", f"{_ENGINE}.post_step",
            f"{_ENGINE}._process_aborts_queue", f"{_ENGINE}.preprocess_add_request", f"{_ENGINE}.add_request",
            f"{_ENGINE}.abort_requests", f"{_ENGINE}.reset_prefix_cache", f"{_SCHED}.reset_prefix_cache",
            "vllm.config.SchedulerConfig.get_scheduler_cls"),
    *_members(Param, ENGINE_CORE, _ENGINE, "vllm_config", "executor_class", "log_stats"),
    *_members(Attr, ENGINE_CORE, _ENGINE, "model_executor", "scheduler", "structured_output_manager",
              "aborts_queue", "batch_queue", "batch_queue_size", "step_fn", "vllm_config", "log_stats"),
    *_members(Param, ENGINE_CORE, _SCHED, "include_finished_set", "hash_block_size"),
    *_members(Attr, ENGINE_CORE, _SCHED, "kv_cache_config", "requires_kv_delivery"),
    *_members(Attr, DECODE_STAGGER, _ASYNC, "decode_stagger", "pp_size", "use_v2_model_runner"),
    *_members(Param, ENGINE_CORE, "vllm.v1.engine.EngineCoreRequest", "request_id", "prompt_token_ids",
              "mm_features", "sampling_params", "pooling_params", "arrival_time", "lora_request", "cache_salt",
              "data_parallel_rank"),
    *_members(Param, ENGINE_CORE, "vllm.sampling_params.SamplingParams", "temperature", "ignore_eos",
              "stop_token_ids", "frequency_penalty"),
    *_members(Param, ENGINE_CORE, "vllm.config.ModelConfig", "enforce_eager"),
    *_members(Field, ENGINE_CORE, "vllm.config.CacheConfig", "num_gpu_blocks_override"),
    *_members(Field, ENGINE_CORE, "vllm.config.ParallelConfig", "distributed_executor_backend"),
    *_members(Field, ENGINE_CORE, "vllm.config.SchedulerConfig", "scheduler_cls", "policy"),
    *_exist(V1_RUNNER, "vllm.v1.worker.cpu_model_runner.CPUModelRunner", _V1,
            "vllm.distributed.init_distributed_environment", "vllm.distributed.ensure_model_parallel_initialized",
            "vllm.distributed.parallel_state.model_parallel_is_initialized",
            "vllm.v1.worker.worker_base.CompilationTimes",
            "vllm.v1.sample.sampler.Sampler", "vllm.v1.sample.sampler.Sampler.greedy_sample",
            "vllm.v1.sample.sampler.Sampler.__init__", "vllm.v1.sample.rejection_sampler",
            "vllm.v1.worker.gpu_model_runner", "vllm.v1.worker.block_table.BlockTable",
            "vllm.v1.worker.block_table.BlockTable.__init__",
            "vllm.v1.worker.block_table.BlockTable.compute_slot_mapping",
            "vllm.v1.worker.block_table.BlockTable.clear", "vllm.sampling_params.SamplingParams.clone",
            f"{_V1}.execute_model", f"{_V1}.sample_tokens", f"{_V1}.get_kv_cache_spec",
            f"{_V1}.initialize_attn_backend", f"{_V1}.initialize_kv_cache_tensors", f"{_V1}.initialize_kv_cache",
            f"{_V1}._model_forward", f"{_V1}.take_draft_token_ids", f"{_V1}.load_model",
            "vllm.v1.worker.cpu_model_runner.CPUModelRunner.__init__",
            "vllm.v1.worker.cpu_model_runner.CPUModelRunner.initialize_kv_cache",
            "vllm.v1.worker.cpu_model_runner.CPUModelRunner.load_model"),
    *_members(Param, V1_RUNNER, "vllm.v1.worker.worker_base.CompilationTimes", "language_model", "encoder"),
    *_members(Param, V1_RUNNER, "vllm.distributed.init_distributed_environment", "world_size", "rank",
              "local_rank", "distributed_init_method", "backend"),
    *_members(Attr, V1_RUNNER, _V1, "input_batch", "query_start_loc", "requests", "attn_groups",
              "reorder_batch_threshold", "use_async_scheduling"),
    *_exist(ENGINE_SPEC_DECODE, "vllm.v1.spec_decode.ngram_proposer_gpu.NgramProposerGPU",
            "vllm.v1.worker.gpu_model_runner.update_ngram_gpu_tensors_incremental",
            "vllm.v1.sample.rejection_sampler._rejection_greedy_sample",
            "vllm.v1.sample.rejection_sampler.rejection_greedy_sample_kernel",
            "vllm.config.speculative.SpeculativeConfig.use_ngram_gpu"),
    *_exist(MRV2_RUNNER, "vllm.v1.worker.cpu.model_runner.CPUModelRunner", "vllm.v1.worker.cpu.shm",
            f"{_MRV2}.get_kv_cache_spec", f"{_MRV2}.init_attn_backend", f"{_MRV2}.init_kv_cache",
            f"{_MRV2}.GPUModelRunner.load_model", f"{_MRV2}.GPUModelRunner.initialize_kv_cache",
            f"{_MRV2}.GPUModelRunner.prepare_inputs", "vllm.v1.worker.gpu.block_table.BlockTables.gather_block_tables",
            "vllm.v1.worker.gpu.attn_utils.AttentionCGSupportInfo", "vllm.forward_context.get_forward_context",
            "vllm.v1.worker.gpu.structured_outputs._apply_grammar_bitmask_kernel",
            "vllm.v1.worker.gpu.structured_outputs.StructuredOutputsWorker.apply_grammar_bitmask"),
    *_members(Attr, MRV2_RUNNER, f"{_MRV2}.GPUModelRunner", "req_states", "block_tables"),
    Param(MRV2_RUNNER, f"{_MRV2}.GPUModelRunner.load_model", "model", named=True),
]
"""What ``engine_core_driver.py``, ``oracle_worker.py``, the stubs and the MRV2 modules need."""

SURFACES: tuple[Surface, ...] = (*SCHEDULER_SURFACES, *ENGINE_SURFACES)
"""Every surface the drivers probe."""

CAPABILITIES: tuple[str, ...] = tuple(dict.fromkeys(s.capability for s in SURFACES))
"""Every capability name, in the order above."""


@functools.cache
def probed(capability: str) -> Capabilities:
    """The probe of one capability of the vLLM this process imports (once per process).

    One at a time, so a driver pays only for what it uses: resolving the runner
    surfaces imports the model runners, which the scheduler driver never needs.
    A name ``CAPABILITIES`` does not list is a programming error (``ValueError``).
    """
    if capability not in CAPABILITIES:
        raise ValueError(f"no capability named {capability!r}; surfaces.py names {', '.join(CAPABILITIES)}")
    from asyncspec.engine.vllm.vllm_environment import load_vllm, resolve_dotted

    load_vllm()
    return probe([s for s in SURFACES if s.capability == capability], resolve_dotted)


def installed_capabilities() -> Capabilities:
    """The probe of every capability of the vLLM this process imports (what a report lists)."""
    parts = [probed(name) for name in CAPABILITIES]
    return Capabilities(frozenset().union(*(p.present for p in parts)),
                        {name: why for p in parts for name, why in p.missing.items()})


def require(*capabilities: str) -> None:
    """Raise ``MissingCapability`` unless the installed vLLM has every one of ``capabilities``."""
    for name in capabilities:
        probed(name).require(name)


def has(capability: str) -> bool:
    """Whether the installed vLLM has ``capability``."""
    return probed(capability).has(capability)


def vllm_report() -> dict[str, Any]:
    """What a campaign's JSON says of the vLLM driven (imports vLLM, probes it once).

    ``{"version", "path", "version_source", "capabilities": [present, sorted],
    "missing": {capability: one line}}``: the version from the package metadata or,
    for an unbuilt checkout, from its own files (``version_source`` says which;
    ``vllm_identity.driven_vllm``).
    """
    from asyncspec.engine.vllm.vllm_identity import driven_vllm

    caps = installed_capabilities()
    return {**driven_vllm().as_json(), "capabilities": caps.names(), "missing": dict(sorted(caps.missing.items()))}

