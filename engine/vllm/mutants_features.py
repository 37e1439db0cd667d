"""vLLM mutants of the features issue 28 models: one line of vLLM 0.33.0 each, after a bug or a
change in vLLM's public history of the feature; ``vllm_mutants.py`` appends them to the corpus.

Pauses (``EngineCore.pause_scheduler`` / ``Scheduler.set_pause_state``): killed by the ``pause``
part of the default mix (``statemachine_tests/scheduler/profiles.py``), whose workloads pause in
every mode with steps in flight, most with the toy KV connector; half its draws of two requests or
more take the held-send shape, where a keep pause meets a finished request whose KV send keeps the
engine stepping while another decodes (``workload_draw.held_send``: ``sched_paused_all_keeps_budget``'s
input).

The offloading connector (``OffloadingConnectorScheduler``, its store jobs' fences and the lookup
of a preempted request): killed by the ``offload`` part, whose workloads run vLLM's own
OffloadingConnector under KV pressure with aborts (``spec/offload.py``).  Encoder inputs: by
the ``encoder`` part (``ENCODER_MUTANTS``).  Mamba state groups: by the ``mamba`` part (``MAMBA_MUTANTS``).
Data parallelism's waves: by the vllm-engine ``dp`` part (``DP_MUTANTS``).
"""
from __future__ import annotations

from asyncspec.engine.vllm.mutant_type import VllmMutant

SCHED = "v1/core/sched/scheduler.py"

_KEEP_REF = "vllm#32351: [Feat][RL] Pause and Resume with keep requests for single engine"
_ENGINE_PAUSE_REF = "vllm#34125: [Core] Move pause and resume functions into engine"

PAUSE_MUTANTS: tuple[VllmMutant, ...] = (
    VllmMutant(
        "sched_paused_all_keeps_budget", SCHED, "Scheduler.schedule",
        f"{_KEEP_REF} (PAUSED_ALL: the step's token budget is 0)",
        "token_budget = 0", "pass",
        "a keep-mode pause leaves the token budget: running requests go on being scheduled"),
    VllmMutant(
        "sched_paused_new_admits_waiting", SCHED, "Scheduler.schedule",
        f"{_ENGINE_PAUSE_REF} (new requests stay frozen until resume)",
        "if not request_queue and self._pause_state == PauseState.UNPAUSED:",
        "if not request_queue:",
        "PAUSED_NEW admits waiting requests: adds made during the pause run before resume"),
    VllmMutant(
        "sched_paused_new_skips_kv_holding", SCHED, "Scheduler.schedule",
        "vllm#58041: [Core][KVConnector] Drain receives and preserve retained KV during keep pauses "
        "(KV loads go on across a pause; vLLM 0.31.0's waiting pass ran only while UNPAUSED, so "
        "PAUSED_NEW admitted no request whose async KV load was done)",
        "if not preempted_reqs and self._pause_state != PauseState.PAUSED_ALL:",
        "if not preempted_reqs and self._pause_state == PauseState.UNPAUSED:",
        "PAUSED_NEW skips the waiting pass: a request holding loaded KV blocks waits for resume"),
    VllmMutant(
        "sched_paused_new_counts_running_only", SCHED, "Scheduler.get_num_unfinished_requests",
        "vllm#51487: [Core] Report requests admitted while the scheduler is paused (the counting "
        "before: PAUSED_NEW returned len(self.running), blind to KV-holding requests)",
        "num_waiting = len(self.kv_holding_waiting)", "num_waiting = 0",
        "under PAUSED_NEW a KV-holding request is not counted: the engine idles with it unadmitted"),
)

CORE = "v1/engine/core.py"

ENGINE_PAUSE_MUTANTS: tuple[VllmMutant, ...] = (
    VllmMutant(
        "engine_pause_keep_pauses_new_only", CORE, "EngineCore.pause_scheduler",
        f"{_KEEP_REF} (before it, every pause was PAUSED_NEW: running requests went on)",
        "pause_state = PauseState.PAUSED_ALL if mode == \"keep\" else PauseState.PAUSED_NEW",
        "pause_state = PauseState.PAUSED_NEW",
        "a keep-mode pause freezes only new requests: the running ones keep being scheduled"),
    VllmMutant(
        "engine_pause_clear_cache_keeps_running", CORE, "EngineCore._reset_caches",
        "vllm#34382: [BUG] Reset running requests when clearing cache for pause/resume (in-progress "
        "requests blocked clearing the prefix cache in keep mode)",
        "reset_running_requests: bool = True,", "reset_running_requests: bool = False,",
        "pause_scheduler(clear_cache=True) resets the prefix cache without preempting the running "
        "requests: it fails while they hold blocks, and the pause raises"),
    VllmMutant(
        "engine_pause_abort_keeps_requests", CORE, "EngineCore.pause_scheduler",
        f"{_ENGINE_PAUSE_REF} (the in-process engine's abort mode finishes every request)",
        "self.scheduler.finish_requests(None, RequestStatus.FINISHED_ABORTED)", "pass",
        "an abort-mode pause aborts nothing: the running requests finish their steps under PAUSED_NEW"),
)
"""``EngineCore``'s in-process pause: killed by the ``vllm-engine`` target's ``pause`` part
(``statemachine_tests/vllm_engine/engine_parts.py``)."""

RUNNER = "v1/worker/gpu_model_runner.py"
_STREAM_ROW_REF = ("vllm#42490: [Bug]: Async double streaming_update with shared-prefix reuse can leave invalid "
                   "-1 token ids in the worker input row")

RUNNER_STREAMING_MUTANTS: tuple[VllmMutant, ...] = (
    VllmMutant(
        "runner_stream_keeps_outputs", RUNNER, "GPUModelRunner._update_streaming_request",
        f"{_STREAM_ROW_REF} (a session's earlier outputs are prompt now: the runner clears its output list)",
        "req_state.output_token_ids.clear()", "pass",
        "a session's next turn keeps the last turn's outputs in the runner's history behind its new prompt"),
    VllmMutant(
        "runner_stream_keeps_computed", RUNNER, "GPUModelRunner._update_streaming_request",
        f"{_STREAM_ROW_REF} (the turn resumes from the scheduler's frontier, C - H)",
        "req_state.num_computed_tokens = new_req_data.num_computed_tokens", "pass",
        "a session's next turn keeps the runner's count of computed tokens from the last turn"),
    VllmMutant(
        "runner_stream_row_not_removed", RUNNER, "GPUModelRunner._update_streaming_request",
        "vllm#37028: [Model Runner V2] Support Streaming Inputs (an update for an existing request must "
        "free its old slot before it is added again; the V1 runner removes it from the InputBatch)",
        "self.input_batch.remove_request(req_id)", "pass",
        "a session's update is added to the persistent batch while its old row stays"),
)
"""The V1 runner's session update path (``_update_streaming_request``): killed by the ``vllm-engine``
target's ``streaming`` part."""

OFFLOAD = "distributed/kv_transfer/kv_connector/v1/offloading/scheduler.py"
_OFFLOAD_SCHED = "OffloadingConnectorScheduler"

OFFLOAD_MUTANTS: tuple[VllmMutant, ...] = (
    VllmMutant(
        "offload_finished_store_reuse_unflushed", OFFLOAD, f"{_OFFLOAD_SCHED}._build_store_jobs",
        "vllm#48596: [Bugfix][KV Offloading] Offload last block at request finish and prevent reuse race "
        "(a finished request's store, issued by the next schedule(), is flushed when that step reallocates "
        "its blocks)",
        "self._current_batch_jobs_to_flush.add(job_id)", "pass",
        "a finished request's store job is not flushed when its step reallocates the blocks it reads"),
    VllmMutant(
        "offload_finished_jobs_unwatched", OFFLOAD, f"{_OFFLOAD_SCHED}.request_finished",
        "vllm#48596: [Bugfix][KV Offloading] Offload last block at request finish and prevent reuse race "
        "(request_finished registers the deferred fences of the jobs already issued, so a reuse of their "
        "blocks after the free flushes them)",
        "self._block_id_to_pending_jobs.setdefault(bid, set()).add(job_id)", "pass",
        "a finished request's pending store jobs are not watched: reallocating their blocks flushes nothing"),
    VllmMutant(
        "offload_preempted_jobs_unflushed", OFFLOAD, f"{_OFFLOAD_SCHED}._build_connector_meta",
        "vllm#39186: [KV Offload] Per-job store completion for CPU offloading connector (the store jobs of "
        "a preempted request go into jobs_to_flush)",
        "self._current_batch_jobs_to_flush.update(jobs_to_flush)", "pass",
        "a preempted request's store jobs are not flushed: its freed blocks are rewritten before they are read"),
    VllmMutant(
        "offload_reload_with_stores_in_flight", OFFLOAD, f"{_OFFLOAD_SCHED}.get_num_new_matched_tokens",
        "vllm#46014: [Bug]: OffloadingConnector crashes with `assert not req_status.transfer_jobs` when a "
        "preempted request is re-admitted (the lookup waits for the request's in-flight stores)",
        "if req_status.transfer_jobs:", "if False:",
        "a preempted request is looked up while its stores are in flight: a load is issued beside them",
        equivalent=("with vLLM's own CPU tier the lookup defers anyway: a key whose store job has not "
                    "completed is HIT_PENDING (CPUOffloadingManager.lookup), and one pending key makes "
                    "_maximal_prefix_lookup return None; store jobs cover a prefix of the request's keys, "
                    "so a request with a store in flight always has a pending key in the range looked up "
                    "(#46014's crash needs a backend that answers HIT before the store completes)")),
    VllmMutant(
        "offload_finished_stores_last_sample", OFFLOAD, f"{_OFFLOAD_SCHED}._build_store_jobs",
        "vllm#54288: [Bugfix][KV Offload] Stop offloading the final sampled token's KV slot (a finished "
        "request stores up to max(P, num_tokens - 1))",
        "num_tokens_after_batch = max(req.num_prompt_tokens, req.num_tokens - 1)",
        "num_tokens_after_batch = req.num_tokens",
        "a finished request stores the block ending at its last sampled token, whose KV was never computed"),
)

ECM = "v1/core/encoder_cache_manager.py"

ENCODER_MUTANTS: tuple[VllmMutant, ...] = (
    VllmMutant(
        "ecm_freed_unfiltered", ECM, "EncoderCacheManager.get_freed_mm_hashes",
        "vllm#52482: [Bugfix][V1][Multimodal] Ignore stale same-step encoder cache evictions (before it, an "
        "entry evicted and allocated again in one scheduling pass was still sent as freed)",
        "freed = [mm_hash for mm_hash in self.freed if mm_hash not in self.cached]", "freed = list(self.freed)",
        "an entry evicted then allocated again in the same pass is sent to the worker as freed"),
    VllmMutant(
        "sched_waiting_keeps_encoder_refs", SCHED, "Scheduler.schedule",
        "vllm#31857: [Bugfix] fix encoder cache leak of waiting requests in scheduler (a waiting request "
        "whose KV allocation fails kept the encoder-cache references its encoder inputs took)",
        "self.encoder_cache_manager.free(request)", "pass",
        "a failed admission keeps its encoder-cache references: its shared entry is never freeable"),
    VllmMutant(
        "sched_finish_keeps_encoder_refs", SCHED, "Scheduler._free_request",
        "vllm#12545: [V1][BugFix] Free encoder cache for aborted requests",
        "self.encoder_cache_manager.free(request)", "pass",
        "a finished or aborted request keeps its encoder-cache references: its entries are never freeable"),
    VllmMutant(
        "sched_encoder_free_ignores_placeholders", SCHED, "Scheduler._free_encoder_inputs",
        "vllm#45347: [BugFix] Avoid prematurely freeing cached mm encoder outputs (the release test "
        "before it read num_computed_tokens alone)",
        "<= request.num_computed_tokens - request.num_output_placeholders", "<= request.num_computed_tokens",
        "an image is released while its request's sampled positions are still in flight"),
    VllmMutant(
        "ecm_hit_stays_freeable", ECM, "EncoderCacheManager.check_and_update_cache",
        "vllm#22711: [Core][Multimodal] Track encode cache entries by mm_hash and enable embedding sharing "
        "between requests (a hit on an unreferenced entry takes it out of freeable)",
        "num_encoder_embeds = self.freeable.pop(mm_hash)", "num_encoder_embeds = self.freeable[mm_hash]",
        "a cache hit on a freeable entry leaves it freeable: another request's allocation may evict it"),
)
"""Encoder inputs (``EncoderCacheManager``, ``Scheduler._try_schedule_encoder_inputs`` and
``_free_encoder_inputs``): killed by the ``encoder`` part of the default mix, whose requests carry
images sharing a small encoder cache (``engine/vllm/encoder_model.py``)."""

RUNNER_ENCODER_MUTANTS: tuple[VllmMutant, ...] = (
    VllmMutant(
        "runner_mm_chunk_from_image_start", RUNNER, "GPUModelRunner._gather_mm_embeddings",
        "vllm#8346: [Core][VLM] Add precise multi-modal placeholder tracking (a chunk that starts inside an "
        "image takes the embeddings from its offset into the image on; mlx-vlm#1872 fixed the same slip, "
        "later prefill chunks reusing the image's first embeddings)",
        "mm_embeds_item = encoder_output[start_idx:end_idx]",
        "mm_embeds_item = encoder_output[: end_idx - start_idx]",
        "a prefill chunk that starts inside an image is fed the image's first embeddings again"),
    VllmMutant(
        "runner_mm_placeholder_off_by_one", RUNNER, "GPUModelRunner._gather_mm_embeddings",
        "vllm#8346: [Core][VLM] Add precise multi-modal placeholder tracking (an image's placeholder "
        "positions in the step's flattened batch: the request's first row plus its offset less C)",
        "req_start_pos = req_start_idx + start_pos - num_computed_tokens",
        "req_start_pos = req_start_idx + start_pos - num_computed_tokens + 1",
        "an image's embeddings are merged one position after its placeholders"),
)
"""The V1 runner's encoder path (``_gather_mm_embeddings``): no scheduler target runs it; killed by the
``vllm-engine`` target's ``encoder`` part, whose stand-in encoder's embeddings name their item and index
(``engine/vllm/oracle_encoder.py``)."""

KV_MANAGER = "v1/core/kv_cache_manager.py"
BLOCK_TABLE = "v1/worker/block_table.py"

RUNNER_MAMBA_MUTANTS: tuple[VllmMutant, ...] = (
    VllmMutant(
        "runner_swap_row_first_group_only", BLOCK_TABLE, "MultiGroupBlockTable.swap_row",
        "vllm#33937: [Bugfix] Fix mamba cache mode null-block padding (a Mamba kernel read a state index "
        "that was not its request's: cross-request state corruption; here the index moves with the wrong "
        "row instead, when the batch puts its decodes first, reorder_batch_to_split_decodes_and_prefills)",
        "for block_table in self.block_tables:", "for block_table in self.block_tables[:1]:",
        "a batch reorder swaps only the attention group's rows: a request reads another's Mamba state"),
)
"""The V1 runner's per-group block tables where a Mamba group's state indices live: no scheduler target
runs them, and with attention alone every group is swapped; killed by the ``vllm-engine`` target's
``mamba`` part, whose oracle model carries each request's state through its state block (``fake_model.py``).
No one-line fix of vLLM's history is specific to mode ``none`` (``MAMBA_MUTANTS`` are ``align``'s:
docs/fuzzing.md, "Mamba state groups")."""

MAMBA_MUTANTS: tuple[VllmMutant, ...] = (
    VllmMutant(
        "sched_mamba_split_prompt_only", SCHED, "Scheduler._mamba_block_aligned_split",
        "vllm#33706: [Hybrid] Fix and optimize block-aligned splitting in mamba cache align mode (before it, "
        "only a new request's prefill was split: a resumed request replayed its outputs unaligned)",
        "prefill_end = max(request.num_prompt_tokens, request.num_tokens - 1)",
        "prefill_end = request.num_prompt_tokens",
        "a resumed request's replay of its output tokens is not cut to block multiples"),
    VllmMutant(
        "sched_mamba_split_sub_block", SCHED, "Scheduler._mamba_block_aligned_split",
        "vllm#40757: [Core] Prevent zero-collapse deadlock in _mamba_block_aligned_split (open: keep a "
        "sub-block chunk when aligning would cut it to 0; vllm#34445 made the budget hold a whole block instead)",
        "if aligned_end > start or block_size <= max_prefill_tokens:",
        "if aligned_end > start:",
        "a chunk shorter than a block is scheduled unaligned although a whole block fits the budget"),
    VllmMutant(
        "sched_mamba_no_junction_stop", SCHED, "Scheduler._mamba_block_aligned_split",
        "vllm#47782: Mamba shared-prefix handling (the split stops at Request.shared_prefix_boundary, where "
        "attention's hit outran the cached states)",
        "junction_stop if start < junction < end else 0,", "0,",
        "a prefill chunk runs past the shared-prefix junction: the state there is never cached"),
    VllmMutant(
        "kv_skipped_on_computed_basis", KV_MANAGER, "KVCacheManager.allocate_slots",
        "vllm#47728: [Bugfix][V1] Free out-of-window blocks on the processed-token basis under async "
        "scheduling (before it, remove_skipped_blocks read num_computed_tokens, in-flight tokens included)",
        "max(0, total_computed_tokens - request.num_in_flight_tokens),", "total_computed_tokens,",
        "a Mamba state (or a window block) an in-flight step still reads is freed on the computed-token basis"),
)
"""Mamba state groups beside attention (``Scheduler._mamba_block_aligned_split``, ``MambaManager`` through
``allocate_slots``): killed by the ``mamba`` part of the default mix, whose scheduler has a ``MambaSpec``
group after the attention group (``spec/mamba.py``)."""

COORD = "v1/core/kv_cache_coordinator.py"
SINGLE_TYPE = "v1/core/single_type_kv_cache_manager.py"

SWA_HIT_MUTANTS: tuple[VllmMutant, ...] = (
    VllmMutant(
        "coord_hybrid_hit_not_truncated", COORD, "HybridKVCacheCoordinator.find_longest_cache_hit",
        "vllm-ascend#14810: [BugFix][Platform] Truncate every full-attn group to hit_length (the hybrid "
        "coordinator kept a full-attention group's longer hit after the groups agreed on a shorter one; "
        "vllm#40868's review flagged the same untrimmed list upstream)",
        "del blks[num_blocks:]", "pass",
        "full attention keeps its longer hit when the sliding-window group's is shorter: the request "
        "holds cached blocks past its computed tokens and recomputes into them"),
    VllmMutant(
        "swa_hit_run_counts_own_token", SINGLE_TYPE, "SlidingWindowManager._contiguous_blocks_for_hit",
        "vllm#14097: [V1] Implement sliding window attention in kv_cache_manager (its review settled the run a "
        "hit needs at cdiv(W - 1, B): the token being computed is itself one of the W)",
        "blocks = cdiv(window_size - 1, block_size)", "blocks = cdiv(window_size, block_size)",
        "a hit needs one cached block too many where B divides W - 1 (a window of 1 caches every block)"),
)
"""Prefix caching with a sliding-window group (``HybridKVCacheCoordinator``, ``SlidingWindowManager``): killed
by the ``hybrid`` part of the default mix, which draws prefix caching half the time (``spec/swa.py``)."""

CORE = "v1/engine/core.py"
_WAVES_REF = "vllm#16277: [V1][DP] More robust DP/EP dummy request coordination (request waves with sequence numbers)"

DP_MUTANTS: tuple[VllmMutant, ...] = (
    VllmMutant(
        "core_dp_no_first_step_sync", CORE, "DPEngineCoreProc._has_global_unfinished_reqs",
        "vllm#52957: [Core] Sync DP state on the first step of a wave (before it, the first sync came "
        "dp_sync_interval steps into a wave)",
        "if self.step_counter != 1 and self.step_counter % self.dp_sync_interval != 0:",
        "if self.step_counter % self.dp_sync_interval != 0:",
        "no sync at step 1: a wave whose work ends at once runs dummy batches to the interval"),
    VllmMutant(
        "core_dp_request_does_not_wake", CORE, "DPEngineCoreProc.add_request",
        "vllm#39366: [BUG] Two phase pause to prevent deadlock (its review: dropping the local wake-up in "
        "add_request hangs the DP all-reduce, the sender being excluded from its own START_DP_WAVE)",
        "self.engines_running = True", "pass",
        "a request to an idle engine sends start_wave but does not wake the engine: the others wait for it"),
    VllmMutant(
        "core_dp_stale_start_wave_taken", CORE, "DPEngineCoreProc._handle_client_request",
        f"{_WAVES_REF}: a START_DP_WAVE of an ended wave must not wake an engine",
        "new_wave >= self.current_wave", "True",
        "START_DP_WAVE of an older wave is taken: the engine goes back to it and wakes alone"),
    VllmMutant(
        "core_dp_wave_end_keeps_counter", CORE, "DPEngineCoreProc.run_busy_loop",
        f"{_WAVES_REF} (the wave's end resets step_counter, so the next wave syncs at its step 1)",
        "self.step_counter = 0", "pass",
        "step_counter is not reset at a wave's end: the next wave's syncs come off its step 1"),
    VllmMutant(
        "core_dp_idle_rank_skips_dummy", CORE, "DPEngineCoreProc.run_busy_loop",
        "vllm#28224: [Bug]: DP with non-MoE models hangs (a rank out of requests, dummy batches and its peers "
        "out of step in the all-reduce)",
        "if not local_unfinished_reqs and not self.engines_running:", "if not local_unfinished_reqs:",
        "a running rank without requests skips its dummy batch and the all-reduce: the ranks leave lockstep"),
    VllmMutant(
        "parallel_dp_sync_and", "config/parallel.py", "ParallelConfig.sync_dp_state",
        "vllm#13923: [V1] AsyncLLM data parallel (the ranks' unfinished flags all-reduced as an OR: MAX, later "
        "SUM > 0)",
        "has_unfinished_global = tensor[0].item() > 0 or pause_count % dp_size != 0",
        "has_unfinished_global = tensor[0].item() == dp_size or pause_count % dp_size != 0",
        "the unfinished flags read as an AND: a wave ends while one rank still has requests"),
)
"""Data parallelism's waves (``DPEngineCoreProc``'s busy loop, ``sync_dp_state``): killed by the ``dp`` part
of the vllm-engine default campaign (``statemachine_tests/vllm_engine/dp_part.py``, ``spec/dp.py``)."""

_PROMPT_LOGPROBS_REF = ("vllm#9880: [V1] Prompt logprobs + APC compatibility; prompt logprobs with chunked prefill "
                        "(the runner fills one tensor per request, chunk by chunk, and returns it with the last)")
RUNNER_LOGPROBS_MUTANTS: tuple[VllmMutant, ...] = (
    VllmMutant(
        "runner_prompt_logprobs_chunk_at_zero", RUNNER, "GPUModelRunner._get_prompt_logprobs_dict",
        f"{_PROMPT_LOGPROBS_REF} (each chunk's rows go to its own positions, from num_computed_tokens)",
        "chunk_slice = slice(start_idx, start_idx + num_logits)", "chunk_slice = slice(0, num_logits)",
        "every chunk's prompt logprobs are written from row 0: a prompt computed in chunks gets wrong rows"),
    VllmMutant(
        "runner_prompt_logprobs_returned_a_step_early", RUNNER, "GPUModelRunner._get_prompt_logprobs_dict",
        f"{_PROMPT_LOGPROBS_REF} (a chunk ending one token before the prompt's end defers the return to the "
        "step that samples)",
        "if num_tokens <= num_remaining_tokens:", "if num_tokens < num_remaining_tokens:",
        "a chunk that leaves only the prompt's last token returns the prompt logprobs with a step that samples "
        "nothing"),
)
"""The V1 runner's prompt logprobs: killed by the ``vllm-engine`` target's ``logprobs`` part, which holds every
row to the oracle model (``statemachine_tests/vllm_engine/logprobs_check.py``); no scheduler target runs them."""

FEATURE_MUTANTS: tuple[VllmMutant, ...] = (PAUSE_MUTANTS + ENGINE_PAUSE_MUTANTS + RUNNER_STREAMING_MUTANTS
                                           + ENCODER_MUTANTS + RUNNER_ENCODER_MUTANTS + OFFLOAD_MUTANTS + MAMBA_MUTANTS + RUNNER_MAMBA_MUTANTS
                                           + SWA_HIT_MUTANTS
                                           + DP_MUTANTS + RUNNER_LOGPROBS_MUTANTS)
"""Every mutant of this module, in corpus order."""
