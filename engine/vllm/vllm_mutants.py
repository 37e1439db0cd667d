"""The vLLM mutant corpus: one-line changes to vLLM 0.33.0, each after a bug in vLLM's history.

A mutant is data: the file (relative to the ``vllm`` package), the function
(``Class.method``) whose one line it changes, the public issue or PR it is
derived from, the exact original line (stripped of indentation) and its
replacement, and what the change does.  ``overlay.py`` applies one mutant to a
private import of the installed vLLM; ``asyncspec mutate-vllm`` runs a fixed
campaign of a fuzz target per mutant and prints which ones it kills.

Three groups: the engine core loop (``vllm/v1/engine/core.py``), the V1 GPU
model runner's async token feedback and request state
(``vllm/v1/worker/gpu_model_runner.py``, ``gpu_input_batch.py``), what the
scheduler sends to the worker (``vllm/v1/core/sched/scheduler.py``); the
scheduler's own state, the KV cache manager and the block pool
(``single_type_kv_cache_manager.py``, ``block_pool.py``); and, appended from
``mutants_sched.py``, the scheduler-side mutants (preemption, queues,
aborts, resets, deferred frees, connector handling, the async scheduler, the
request, ``check_stop``, the KV cache manager and coordinator, the block pool).

``equivalent`` holds the argument when a mutant is argued equivalent (behaves
like vLLM on every run the targets can make); such a survivor does not fail
the self-test.  One is: ``sched_stale_output_consumes_placeholders``.
"""
from __future__ import annotations

from asyncspec.engine.vllm.mutant_type import VllmMutant as VllmMutant
from asyncspec.engine.vllm.mutants_features import FEATURE_MUTANTS
from asyncspec.engine.vllm.mutants_mrv2 import MRV2_ENCODER_MUTANTS
from asyncspec.engine.vllm.mutants_sched import SCHEDULER_MUTANTS

CORE = "v1/engine/core.py"
RUNNER = "v1/worker/gpu_model_runner.py"
BATCH = "v1/worker/gpu_input_batch.py"
SCHED = "v1/core/sched/scheduler.py"

_ABORT_REF = ("vllm#29906: [Bugfix] Free requests to avoid a KV Cache exhaustion during "
              "VLLM_NIXL_ABORT_REQUEST_TIMEOUT (aborts arriving during a forward pass handled only "
              "after its output: vllm#26400, fixed by vllm#29987)")

MUTANTS: tuple[VllmMutant, ...] = (
    # ---------------------------------------------------------------- engine core
    VllmMutant(
        "core_bq_aborts_late", CORE, "EngineCore.step_with_batch_queue", _ABORT_REF,
        "self._process_aborts_queue()", "pass",
        "batch-queue loop: aborts that arrived during a step are not applied before its output"),
    VllmMutant(
        "core_step_aborts_late", CORE, "EngineCore.step", _ABORT_REF,
        "self._process_aborts_queue()", "pass",
        "synchronous loop: aborts that arrived during a step are not applied before its output"),
    VllmMutant(
        "core_bq_newest_first", CORE, "EngineCore.step_with_batch_queue",
        "vllm#23770: [BugFix] Async scheduling and PP compatibility with DP (batch-queue rewrite)",
        "future, scheduler_output, exec_model_fut = batch_queue.pop()",
        "future, scheduler_output, exec_model_fut = batch_queue.popleft()",
        "the batch queue hands back the newest in-flight step instead of the oldest"),
    VllmMutant(
        "core_so_sample_early", CORE, "EngineCore.step_with_batch_queue",
        "vllm#26866: [Core] Async scheduling + structured outputs compatibility",
        "if not scheduler_output.pending_structured_output_tokens:", "if True:",
        "a structured-output step samples at once, with a bitmask built before the previous "
        "step's tokens reached the grammar"),
    VllmMutant(
        "core_post_step_async_drafts", CORE, "EngineCore.post_step",
        "vllm#24799: [Core] Async Scheduling X Spec Decoding Compatibility",
        "if self.check_for_draft_tokens and not self.async_scheduling and model_executed:",
        "if self.check_for_draft_tokens and model_executed:",
        "under async scheduling the worker's drafts are also pushed to the scheduler, over its "
        "placeholders"),
    # ---------------------------------------------------------------- V1 model runner
    VllmMutant(
        "runner_resume_no_history", RUNNER, "GPUModelRunner._update_states",
        "vllm#26385: [BugFix] Fix async scheduling + request preemption",
        "if self.use_async_scheduling and num_output_tokens > 0:", "if False:",
        "a request re-added to the batch keeps the runner's stale output tokens instead of the "
        "history the scheduler sent"),
    VllmMutant(
        "runner_resume_short_history", RUNNER, "GPUModelRunner._update_states",
        "vllm#34029: [Perf] Optimize async scheduling redundant copy, 0.9% E2E throughput "
        "improvement (review caught a mis-sliced resumed history)",
        "req_state.output_token_ids = resumed_token_ids[-num_output_tokens:]",
        "req_state.output_token_ids = resumed_token_ids[-num_output_tokens:-1]",
        "a re-added request's restored output history is one token short"),
    VllmMutant(
        "runner_feed_current_row", RUNNER, "GPUModelRunner._compute_prev_positions",
        "vllm-project/vllm-gaudi#642: Resolve issue with async scheduling when decode and "
        "prompt tokens are mixed",
        "prev_positions[i] = prev_req_id_to_index.get(req_id, -1)",
        "prev_positions[i] = i if req_id in prev_req_id_to_index else -1",
        "last step's sampled token is fed from the request's current row, not its row in the "
        "previous batch"),
    VllmMutant(
        "runner_fast_path_after_reorder", RUNNER, "GPUModelRunner._prepare_input_ids",
        "vllm#23569: [Perf][V1] Fully overlap model execution (single-slice copy only when "
        "the rows did not move)",
        "if common_indices_match and max_flattened_index == (num_common_tokens - 1):",
        "if max_flattened_index == (num_common_tokens - 1):",
        "the single-slice copy of last step's tokens is taken even when the batch was reordered "
        "or condensed"),
    VllmMutant(
        "runner_prev_row_of_discarded", RUNNER, "GPUModelRunner._bookkeeping_sync",
        "vllm-project/vllm-gaudi#360: Fix issue with async_scheduling when dealing with "
        "chunked input",
        "if i not in invalid_req_indices_set", "if True",
        "a partial prefill's discarded sample is recorded as last step's token, so the next "
        "chunk's last prompt token is overwritten with it"),
    VllmMutant(
        "runner_partial_prefill_kept", RUNNER, "GPUModelRunner._prepare_inputs",
        "vllm#15307: [V1] Refactor num_computed_tokens logic (the partial-prefill sample "
        "must be discarded)",
        "self.optimistic_seq_lens_cpu[:num_reqs].numpy() < num_tokens_np",
        "self.optimistic_seq_lens_cpu[:num_reqs].numpy() < 0",
        "no row is marked as a partial prefill: their samples are kept and fed back"),
    VllmMutant(
        "runner_async_output_keeps_discarded", RUNNER, "AsyncGPUModelRunnerOutput.get_output",
        "tenstorrent/tt-xla#5830: [vLLM] Idle rows get a spurious token 0 ('!') appended "
        "during chunked prefill",
        "valid_sampled_token_ids[i].clear()", "pass",
        "the async output copy returns the discarded samples of partial prefills as tokens"),
    VllmMutant(
        "runner_resumed_blocks_appended", RUNNER, "GPUModelRunner._update_states",
        "vllm#46595: [Bugfix][MooncakeStore] track resumed requests via scheduler's "
        "resumed_req_ids (append vs replace of a resumed request's blocks)",
        "if not resumed_from_preemption:", "if True:",
        "a resumed request's new block ids are appended to its freed ones instead of "
        "replacing them"),
    VllmMutant(
        "runner_condense_keeps_block_row", BATCH, "InputBatch.condense",
        "vllm#43894: [Bug] V1 InputBatch condense can leak stale allowed_token_ids mask to "
        "recycled row",
        "self.block_table.move_row(last_req_index, empty_index)", "pass",
        "condense moves a request to a lower row but leaves its block table row behind"),
    VllmMutant(
        "runner_swap_token_rows", BATCH, "InputBatch.swap_states",
        "vllm#48419: [Bugfix] V1: fix allowed_token_ids_mask aliasing in "
        "InputBatch.swap_states",
        "self.token_ids_cpu[i2, :max_active_token_count] = tmp_token_ids", "pass",
        "a batch reorder swaps two requests but leaves both with the same token row"),
    # ---------------------------------------------------------------- scheduler -> worker
    VllmMutant(
        "sched_preempt_keeps_placeholders", SCHED, "Scheduler._preempt_request",
        "vllm#47900: [Bugfix][Core] Discard in-flight async output frames on preemption to fix "
        "num_output_placeholders underflow",
        "request.num_output_placeholders = 0", "pass",
        "a preempted request keeps its output placeholders"),
    VllmMutant(
        "sched_history_only_resumed", SCHED, "Scheduler._make_cached_request_data",
        "vllm#27756: [BugFix] Handle unscheduled requests properly when async scheduling",
        "if req_id not in self.prev_step_scheduled_req_ids:", "if idx >= num_running_reqs:",
        "the token history is sent only for preempted requests, not for running ones that "
        "sat out a step"),
    VllmMutant(
        "sched_history_cut_at_chunk", SCHED, "Scheduler._make_cached_request_data",
        "vllm#28787: [BugFix] Fix async scheduling + chunked prefill + preemption",
        "all_token_ids[req_id] = req.all_token_ids.copy()",
        "all_token_ids[req_id] = req.all_token_ids[: req.num_computed_tokens + "
        "num_scheduled_tokens[req_id]]",
        "the history sent for a re-added request is cut at the end of this step's chunk"),
    VllmMutant(
        "sched_output_count_no_placeholders", SCHED, "Scheduler._make_cached_request_data",
        "vllm#19330: [V1] [P/D] Add Support for KV Load Failure Recovery (its output-token trim, "
        "reported cutting one token too many in ModelEngine-Group/unified-cache-management#283)",
        "req.num_output_tokens + req.num_output_placeholders", "req.num_output_tokens",
        "the output count sent to the worker leaves out in-flight tokens, so the runner trims "
        "its history"),
    # ---------------------------------------------------------------- scheduler state, KV cache, block pool
    VllmMutant(
        "sched_guard_one_step_late", SCHED, "Scheduler.schedule",
        "vllm#27922: [AsyncScheduling] Don't schedule past request max_tokens",
        "and request.num_computed_tokens + 2 - request.num_output_placeholders",
        "and request.num_computed_tokens + 1 - request.num_output_placeholders",
        "the async max_tokens guard fires one step late: a step past max_tokens is scheduled "
        "and wasted"),
    VllmMutant(
        "sched_preempt_to_tail", SCHED, "Scheduler._preempt_request",
        "vllm#33522: [Core][Scheduler] Fix FCFS queue ordering for skipped waiting requests "
        "(proposed tail placement; FCFS puts them back at the head)",
        "self.waiting.prepend_request(request)", "self.waiting.add_request(request)",
        "a preempted request goes to the back of the waiting queue instead of the front"),
    VllmMutant(
        "sched_preempt_stale_accumulates", SCHED, "Scheduler._preempt_request",
        "vllm#48245: [BugFix] Fix `num_output_placeholders` preemption underflow (stale "
        "in-flight output after KV-pressure preemption)",
        "request.num_stale_output_tokens = request.num_in_flight_tokens",
        "request.num_stale_output_tokens += request.num_in_flight_tokens",
        "a re-preempted request counts its undrained stale output twice"),
    VllmMutant(
        "sched_stale_output_consumes_placeholders", SCHED, "Scheduler._update_request_with_output",
        "vllm#48245: [BugFix] Fix `num_output_placeholders` preemption underflow (stale output "
        "drained against the reset counters)",
        "if not is_stale and request.num_output_placeholders > 0:",
        "if request.num_output_placeholders > 0:",
        "a stale step's tokens also resolve the placeholders of the resumed request's new steps",
        equivalent=("drop-mode stale output never reaches this line (update_from_output skips it), and "
                    "deliver-mode stale output arrives with no placeholders: a request only gets "
                    "placeholders when scheduled, and pass 2 of Scheduler.schedule skips a preempted "
                    "request while it has deliverable stale output in flight (the stale-resume skip), "
                    "so the mutated condition is always false when is_stale is true (measured: 12 of 12 "
                    "stale deliveries in 1,000 vllm examples had none; docs/fuzzing.md)")),
    VllmMutant(
        "sched_in_flight_never_drains", SCHED, "Scheduler.update_from_output",
        "vllm#47728: [Bugfix][V1] Free out-of-window blocks on the processed-token basis under "
        "async scheduling (num_in_flight_tokens: scheduled minus processed)",
        "request.num_in_flight_tokens -= num_tokens_scheduled", "pass",
        "processed tokens are never subtracted from the in-flight count, so a later preemption "
        "marks settled output as stale"),
    VllmMutant(
        "sched_deferred_free_one_step_early", SCHED, "Scheduler._drain_deferred_frees",
        "vllm#45357: [Bugfix] Defer block freeing until in-flight steps finish under async "
        "scheduling + PD KV consumer",
        "if fence > self.processed_step_seq:", "if fence > self.processed_step_seq + 1:",
        "parked blocks return to the pool while the step that fenced them is still in flight"),
    VllmMutant(
        "sched_deferred_drain_head_first", SCHED, "Scheduler._drain_deferred_frees",
        "vllm#48489: [Bug]: Deferred block-free path loses per-group eviction ordering "
        "(fixed by vllm#48532)",
        "self.kv_cache_manager.block_pool.free_blocks(reversed(blocks))",
        "self.kv_cache_manager.block_pool.free_blocks(blocks)",
        "parked blocks return to the pool head-first instead of tail-first"),
    VllmMutant(
        "kv_free_head_first", "v1/core/single_type_kv_cache_manager.py", "SingleTypeKVCacheManager.free",
        "vllm#48489: [Bug]: Deferred block-free path loses per-group eviction ordering (the "
        "immediate path's tail-first free)",
        "self.block_pool.free_blocks(reversed(self.pop_blocks_for_free(request_id)))",
        "self.block_pool.free_blocks(self.pop_blocks_for_free(request_id))",
        "a freed request's blocks enter the free queue head-first instead of tail-first"),
    VllmMutant(
        "block_pool_fifo_reuse", "v1/core/block_pool.py", "BlockPool.free_blocks",
        "vllm#51482: [BugFix][Core] free_blocks: restore prepend (LIFO) reuse order when prefix "
        "caching is off (flipped to FIFO by vllm#48017)",
        "self.free_block_queue.prepend_n(blocks_to_evict_first)",
        "self.free_block_queue.append_n(blocks_to_evict_first)",
        "freed uncached blocks go to the back of the free queue (FIFO reuse) instead of the front"),
) + SCHEDULER_MUTANTS + FEATURE_MUTANTS + MRV2_ENCODER_MUTANTS

MUTANTS_BY_ID: dict[str, VllmMutant] = {m.id: m for m in MUTANTS}
