"""What ``--vllm-coverage`` measures of vLLM 0.33.0, and why an arc no CPU run reaches is not a target.

Data only, kept by hand (``core/vllm_coverage.py`` measures, ``core/coverage_report.py``
reports).  ``MEASURED`` lists the vLLM files (relative to the folder holding the
``vllm`` package) and, where a file counts only some of its functions, which:
``EngineCore``'s own methods in ``vllm/v1/engine/core.py`` (not its process and DP
subclasses), and in ``vllm/v1/worker/gpu_model_runner.py`` the functions the V1
runner executes under ``--target vllm-engine`` on a CPU (measured: every
function of the file with a line reached by the engine target's default campaign).

``WHY_UNREACHABLE`` maps (file, function, "from->to") to the reason the arc cannot
run on a CPU, each with the exact error of a real attempt; the report copies it
into ``why_unreachable``.  An unreached arc without an entry is a target for the
campaigns (docs/coverage.md).

``COUNTED`` names the scenarios whose hit count the report measures (issue 27,
item 6): each is a function and the arcs that must all run in one call of it,
each arc given by the source text of its two lines (stripped), so a line shift
between builds of 0.33.0 does not move it.
"""
from __future__ import annotations

from dataclasses import dataclass

from asyncspec.statemachine_tests.core.coverage_reasons_data import GROUPS

EVERY_FUNCTION: tuple[str, ...] = ()
"""A file whose every function counts."""

RUNNER_FUNCTIONS: tuple[str, ...] = (
    "AsyncGPUModelRunnerOutput.__init__",
    "AsyncGPUModelRunnerOutput.get_output",
    "GPUModelRunner.__init__",
    "GPUModelRunner._allow_microbatching",
    "GPUModelRunner._attn_group_iterator",
    "GPUModelRunner._bookkeeping_sync",
    "GPUModelRunner._build_attention_metadata",
    "GPUModelRunner._build_attention_metadata._get_block_table",
    "GPUModelRunner._compute_prev_positions",
    "GPUModelRunner._determine_batch_execution_and_padding",
    "GPUModelRunner._determine_batch_execution_and_padding.dispatch_cudagraph",
    "GPUModelRunner._get_cumsum_and_arange",
    "GPUModelRunner._get_encoder_seq_lens",
    "GPUModelRunner._get_or_create_async_output_copy_stream",
    "GPUModelRunner._get_prompt_logprobs_dict",
    "GPUModelRunner._get_slot_mappings",
    "GPUModelRunner._get_slot_mappings._get_slot_mapping",
    "GPUModelRunner._init_model_kwargs",
    "GPUModelRunner._is_uniform_decode",
    "GPUModelRunner._make_buffer",
    "GPUModelRunner._may_reorder_batch",
    "GPUModelRunner._model_forward",
    "GPUModelRunner._on_request_state_removed",
    "GPUModelRunner._prepare_input_ids",
    "GPUModelRunner._prepare_inputs",
    "GPUModelRunner._prepare_padding_mask",
    "GPUModelRunner._preprocess",
    "GPUModelRunner._process_encoder_cache_scheduler_output",
    "GPUModelRunner._sample",
    "GPUModelRunner._update_states",
    "GPUModelRunner._update_states_after_model_execute",
    "GPUModelRunner.calculate_reorder_batch_threshold",
    "GPUModelRunner.eplb_step",
    "GPUModelRunner.execute_model",
    "GPUModelRunner.initialize_kv_cache",
    "GPUModelRunner.initialize_metadata_builders",
    "GPUModelRunner.may_add_encoder_only_layers_to_kv_cache_config",
    "GPUModelRunner.may_reinitialize_input_batch",
    "GPUModelRunner.maybe_add_kv_sharing_layers_to_kv_cache_groups",
    "GPUModelRunner.sample_tokens",
    "GPUModelRunner.synchronize_input_prep",
)
"""The functions of ``vllm/v1/worker/gpu_model_runner.py`` the V1 runner executes on a CPU (measured: a line
reached by ``fuzz --target vllm-engine --examples 40 --seed 0``; the rest need a GPU, a pooling or multimodal
model, or a feature the engine target does not configure)."""

MEASURED: dict[str, tuple[str, ...]] = {
    "vllm/v1/core/sched/scheduler.py": EVERY_FUNCTION,
    "vllm/v1/core/sched/async_scheduler.py": EVERY_FUNCTION,
    "vllm/v1/core/sched/utils.py": EVERY_FUNCTION,
    "vllm/v1/core/kv_cache_manager.py": EVERY_FUNCTION,
    "vllm/v1/core/kv_cache_coordinator.py": EVERY_FUNCTION,
    "vllm/v1/core/single_type_kv_cache_manager.py": EVERY_FUNCTION,
    "vllm/v1/core/block_pool.py": EVERY_FUNCTION,
    "vllm/v1/request.py": EVERY_FUNCTION,
    "vllm/v1/engine/core.py": ("EngineCore.",),
    "vllm/v1/worker/gpu_model_runner.py": RUNNER_FUNCTIONS,
    "vllm/v1/worker/gpu_input_batch.py": EVERY_FUNCTION,
    "vllm/v1/worker/gpu/async_utils.py": EVERY_FUNCTION,
    "vllm/v1/structured_output/__init__.py": EVERY_FUNCTION,
    "vllm/v1/spec_decode/utils.py": EVERY_FUNCTION,
    "vllm/distributed/kv_transfer/kv_connector/v1/base.py": EVERY_FUNCTION,
    "vllm/distributed/kv_transfer/kv_connector/v1/nixl/base_scheduler.py": EVERY_FUNCTION,
    "vllm/distributed/kv_transfer/kv_connector/v1/nixl/pull_scheduler.py": EVERY_FUNCTION,
}
"""The measured files, each with the qualified names (or, ending in ".", the class prefixes) that count."""

SCHEDULER_KV_FILES: tuple[str, ...] = tuple(f for f in MEASURED if f.startswith("vllm/v1/core/"))
"""The scheduler/KV files of issue 27's claim (docs/coverage.md's table)."""

WHY_UNREACHABLE: dict[tuple[str, str, str], str] = {arc: reason for _, arcs, reason in GROUPS for arc in arcs}
"""(file, function, "from->to") -> why no CPU run reaches the arc, with the exact error of the attempt
(``coverage_reasons_data.py``: the groups, their arcs and the attempts' outcomes)."""


@dataclass(frozen=True)
class Scenario:
    """A path through one function, counted per call: every arc of ``arcs`` ran in the same call."""

    name: str
    file: str
    function: str
    arcs: tuple[tuple[str, str], ...]  # (source of the from line, source of the to line), both stripped


_RUNNER = "vllm/v1/worker/gpu_model_runner.py"

COUNTED: tuple[Scenario, ...] = (
    Scenario("prepare_input_ids: single-slice fast path", _RUNNER, "GPUModelRunner._prepare_input_ids",
             (("if common_indices_match and max_flattened_index == (num_common_tokens - 1):",
               "self.input_ids.gpu[:num_common_tokens].copy_("),)),
    Scenario("prepare_input_ids: single-slice fast path after a refilled row's upload", _RUNNER,
             "GPUModelRunner._prepare_input_ids",
             (("if num_common_tokens < total_without_spec:",
               "self.input_ids.copy_to_gpu(total_num_scheduled_tokens)"),
              ("if common_indices_match and max_flattened_index == (num_common_tokens - 1):",
               "self.input_ids.gpu[:num_common_tokens].copy_("))),
    Scenario("update_states: an unscheduled request leaves the persistent batch", _RUNNER,
             "GPUModelRunner._update_states",
             (("for req_id in unscheduled_req_ids:", "self.input_batch.remove_request(req_id)"),)),
    Scenario("update_states: a resumed request gets its new block table", _RUNNER, "GPUModelRunner._update_states",
             (("if not resumed_from_preemption:", "assert req_index is None"),)),
    Scenario("update_states: a resumed request's output tokens recovered (async)", _RUNNER,
             "GPUModelRunner._update_states",
             (("if self.use_async_scheduling and num_output_tokens > 0:",
               "resumed_token_ids = req_data.all_token_ids[req_id]"),)),
    Scenario("update_states: a request out of the batch added again", _RUNNER, "GPUModelRunner._update_states",
             (("if req_index is None:", "if self.use_async_scheduling and num_output_tokens > 0:"),)),
)
"""The rare runner scenarios of issue 27, item 6, each reported with its measured count."""
