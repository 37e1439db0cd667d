"""The arcs of ``coverage_reasons.WHY_UNREACHABLE``, by group, with the outcome of the attempt behind each group.

Each outcome is that of the real attempt which shows a CPU in one process cannot run
the group's arcs (issue 27, item 1).

Data only.  The arc lists were taken from an engine-target coverage report
(``fuzz --target vllm-engine --examples 100 --seed 0 --vllm-coverage``) as literal
(file, function, "from->to") triples, line numbers of the installed vLLM 0.33.0;
the outcomes are what ``engine/vllm/cpu_limit_attempts.py`` (and, for
``DPEngineCoreProc``, ``feature_attempts_dp.py``) return on this CPU host, and
``tests/engine/test_cpu_limit_attempts.py`` re-runs each attempt against them.
"""
from __future__ import annotations

Arc = tuple[str, str, str]  # (vLLM file, qualified function, "from->to")

_RUNNER = "vllm/v1/worker/gpu_model_runner.py"
_CORE = "vllm/v1/engine/core.py"

# ---- the outcomes of the attempts ------------------------------------------------------

DP_ENGINE_CORE_BLOCKED_IN = ["__init__", "__init__", "init_distributed_environment"]
"""``cpu_limit_attempts.attempt_dp_engine_core``, rank 0 or 1 of two: the innermost vLLM frames
(``EngineCore.__init__`` -> the executor's worker -> ``init_distributed_environment``)."""
DP_ENGINE_CORE_INNERMOST = "_create_c10d_store"
"""... and the innermost frame: torch's store, waiting for the other rank."""
DP_ENGINE_CORE_PROC_DENSE = "AssertionError: DPEngineCoreProc should only be used for MoE models"
"""``feature_attempts_dp.attempt_dp_engine_core_proc(moe=False)``."""
DP_ENGINE_CORE_PROC_MOE_BLOCKED_IN = ["_perform_handshakes", "_perform_handshake", "startup_handshake"]
"""``feature_attempts_dp.attempt_dp_engine_core_proc(moe=True)``: blocked, in these vLLM frames."""
DP_RANK_LOCAL_ALONE = 0
"""``cpu_limit_attempts.attempt_dp_rank_local_alone``: ``data_parallel_rank_local=1`` with one DP rank
reads 0 after ``VllmConfig``."""
DBO_OUTCOME = "built: enable_dbo=False use_ubatching=False"
"""``cpu_limit_attempts.attempt_dbo``: ``CpuPlatform.check_and_update_config`` turns DBO off."""
EPLB_ERROR = ("ValidationError: ParallelConfig: Value error, Expert parallelism load balancing is only "
              "supported on CUDA devices or ROCm devices or XPU devices now.")
"""``cpu_limit_attempts.attempt_eplb``."""
FULL_CUDAGRAPHS_OUTCOME = "built: cudagraph_capture_sizes=[] cudagraph_mode=NONE"
"""``cpu_limit_attempts.attempt_full_cudagraphs``: FULL, sizes [1, 2, 4], not eager."""

# ---- the reasons ---------------------------------------------------------------------------

DP_REASON = (
    "data parallelism needs a second DP rank, another process: EngineCore over the engine target's executor "
    f"as rank 0 or 1 of data_parallel_size=2 blocks in {' > '.join(DP_ENGINE_CORE_BLOCKED_IN)} "
    f"({DP_ENGINE_CORE_INNERMOST}, waiting for the other rank); DPEngineCoreProc: '{DP_ENGINE_CORE_PROC_DENSE}' "
    f"(a dense model), blocked in {' > '.join(DP_ENGINE_CORE_PROC_MOE_BLOCKED_IN)} (a MoE); with one rank "
    f"data_parallel_rank_local=1 reads {DP_RANK_LOCAL_ALONE} (cpu_limit_attempts.attempt_dp_engine_core, "
    "feature_attempts_dp.attempt_dp_engine_core_proc)")
EP_FAULT_REASON = "check_ep_fault needs data_parallel_size > 1 and a MoE model; " + DP_REASON
UBATCH_REASON = (
    "ubatch_slices need should_ubatch, set only by coordinate_batch_across_dp under data_parallel_size > 1 ("
    + DP_REASON + f"); ParallelConfig(enable_dbo=True) on the CPU: '{DBO_OUTCOME}' (cpu_limit_attempts.attempt_dbo)")
EPLB_REASON = (f"ParallelConfig(enable_eplb=True, enable_expert_parallel=True) on the CPU: '{EPLB_ERROR}' "
               "(cpu_limit_attempts.attempt_eplb)")
CUDAGRAPH_REASON = (
    "CUDA graphs: CompilationConfig(cudagraph_mode=FULL, cudagraph_capture_sizes=[1, 2, 4]) without enforce_eager "
    f"on the CPU: '{FULL_CUDAGRAPHS_OUTCOME}' (CpuPlatform.check_and_update_config; no capture, no FULL replay; "
    "cpu_limit_attempts.attempt_full_cudagraphs)")

# ---- the arcs -------------------------------------------------------------------------------

DP_ARCS: tuple[Arc, ...] = (
    (_RUNNER, "GPUModelRunner.__init__", "504->505"),
    (_RUNNER, "GPUModelRunner.__init__", "505->507"),
    (_RUNNER, "GPUModelRunner._determine_batch_execution_and_padding", "3746->3747"),
    (_RUNNER, "GPUModelRunner._determine_batch_execution_and_padding", "3747->3759"),
    (_RUNNER, "GPUModelRunner._determine_batch_execution_and_padding", "3759->3760"),
    (_RUNNER, "GPUModelRunner._determine_batch_execution_and_padding", "3759->3771"),
    (_RUNNER, "GPUModelRunner._determine_batch_execution_and_padding", "3760->3761"),
    (_RUNNER, "GPUModelRunner._determine_batch_execution_and_padding", "3761->3763"),
    (_RUNNER, "GPUModelRunner._determine_batch_execution_and_padding", "3763->3769"),
    (_RUNNER, "GPUModelRunner._determine_batch_execution_and_padding", "3769->3771"),
    (_CORE, "EngineCore.__init__", "138->145"),
)
"""``data_parallel_size > 1`` in the runner and ``EngineCore.__init__`` (a DP rank other than 0)."""

EP_FAULT_ARCS: tuple[Arc, ...] = (
    (_RUNNER, "AsyncGPUModelRunnerOutput.__init__", "313->314"),
    (_RUNNER, "AsyncGPUModelRunnerOutput.__init__", "314->315"),
    (_RUNNER, "AsyncGPUModelRunnerOutput.__init__", "315->316"),
    (_RUNNER, "AsyncGPUModelRunnerOutput.get_output", "356->357"),
    (_RUNNER, "AsyncGPUModelRunnerOutput.get_output", "357->358"),
    (_RUNNER, "AsyncGPUModelRunnerOutput.get_output", "358->-318"),
)
"""``check_ep_fault``: set by ``GPUModelRunner.__init__`` only under DP > 1 with a MoE model."""

UBATCH_ARCS: tuple[Arc, ...] = (
    (_RUNNER, "GPUModelRunner._build_attention_metadata", "2281->2282"),
    (_RUNNER, "GPUModelRunner._build_attention_metadata", "2282->2284"),
    (_RUNNER, "GPUModelRunner._build_attention_metadata", "2523->2524"),
    (_RUNNER, "GPUModelRunner._build_attention_metadata", "2524->2522"),
    (_RUNNER, "GPUModelRunner._build_attention_metadata", "2524->2525"),
    (_RUNNER, "GPUModelRunner._build_attention_metadata", "2525->2524"),
    (_RUNNER, "GPUModelRunner._get_slot_mappings", "3885->3886"),
    (_RUNNER, "GPUModelRunner._get_slot_mappings", "3886->3887"),
    (_RUNNER, "GPUModelRunner._get_slot_mappings", "3887->3888"),
    (_RUNNER, "GPUModelRunner._get_slot_mappings", "3887->3892"),
    (_RUNNER, "GPUModelRunner._get_slot_mappings", "3888->3889"),
    (_RUNNER, "GPUModelRunner._get_slot_mappings", "3889->3890"),
    (_RUNNER, "GPUModelRunner._get_slot_mappings", "3889->3891"),
    (_RUNNER, "GPUModelRunner._get_slot_mappings", "3890->3889"),
    (_RUNNER, "GPUModelRunner._get_slot_mappings", "3891->3887"),
)
"""``ubatch_slices``: only ``coordinate_batch_across_dp`` (DP > 1) sets ``should_ubatch``."""

EPLB_ARCS: tuple[Arc, ...] = (
    (_RUNNER, "GPUModelRunner.eplb_step", "3155->3158"),
    (_RUNNER, "GPUModelRunner.eplb_step", "3158->3159"),
    (_RUNNER, "GPUModelRunner.eplb_step", "3159->3160"),
    (_RUNNER, "GPUModelRunner.eplb_step", "3160->-3153"),
    (_RUNNER, "GPUModelRunner.execute_model", "4147->4148"),
    (_RUNNER, "GPUModelRunner.execute_model", "4148->4153"),
)
"""``enable_eplb``: ``eplb_step`` past its early return, ``execute_model``'s ``eplb_state``."""

CUDAGRAPH_ARCS: tuple[Arc, ...] = (
    (_RUNNER, "GPUModelRunner.__init__", "759->763"),
    (_RUNNER, "GPUModelRunner.__init__", "763->770"),
    (_RUNNER, "GPUModelRunner._build_attention_metadata", "2284->2288"),
    (_RUNNER, "GPUModelRunner._build_attention_metadata", "2288->2292"),
    (_RUNNER, "GPUModelRunner._get_encoder_seq_lens", "1908->1911"),
    (_RUNNER, "GPUModelRunner._get_encoder_seq_lens", "1911->1916"),
    (_RUNNER, "GPUModelRunner._get_encoder_seq_lens", "1916->1918"),
)
"""``cudagraph_batch_sizes`` and ``for_cudagraph_capture`` (a capture or a FULL replay)."""

GROUPS: tuple[tuple[str, tuple[Arc, ...], str], ...] = (
    ("data parallelism > 1", DP_ARCS, DP_REASON),
    ("expert-parallel fault checks", EP_FAULT_ARCS, EP_FAULT_REASON),
    ("micro-batching (ubatch slices)", UBATCH_ARCS, UBATCH_REASON),
    ("expert-parallel load balancing", EPLB_ARCS, EPLB_REASON),
    ("CUDA graphs", CUDAGRAPH_ARCS, CUDAGRAPH_REASON),
)
"""(name, arcs, reason) of each group, in the order docs/coverage.md lists them."""
