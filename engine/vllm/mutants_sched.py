"""The scheduler-side vLLM mutants: the scheduler's queues and
preemption, the async scheduler's placeholders, the request, the stop check, the KV cache
manager and coordinator, the single-type manager, the block pool and the scheduler's
connector handling.

Each is one line of vLLM 0.33.0 replaced, after a bug (or a reviewed near-miss) in vLLM's
public history; ``mutants.py`` appends them to the corpus.  Mutants that need prefix
caching are reached because the ``--target vllm`` self-test draws from the
``prefix-caching`` fuzz profile (``statemachine_tests/mutation/mutant_worker.py``).
"""
from __future__ import annotations

from asyncspec.engine.vllm.mutant_type import VllmMutant

SCHED = "v1/core/sched/scheduler.py"
ASYNC = "v1/core/sched/async_scheduler.py"
UTILS = "v1/core/sched/utils.py"
REQUEST = "v1/request.py"
MANAGER = "v1/core/kv_cache_manager.py"
COORD = "v1/core/kv_cache_coordinator.py"
SINGLE = "v1/core/single_type_kv_cache_manager.py"
POOL = "v1/core/block_pool.py"

_DEFER_REF = ("vllm#45357: [Bugfix] Defer block freeing until in-flight steps finish under async "
              "scheduling + PD KV consumer")

SCHEDULER_MUTANTS: tuple[VllmMutant, ...] = (
    # ---------------------------------------------------------------- scheduler: preemption and queues
    VllmMutant(
        "sched_preempt_keeps_computed", SCHED, "Scheduler._preempt_request",
        "vllm#5349: [Bugfix][Core] fix broken state for recompute (a request preempted by "
        "recompute must restart from zero computed tokens)",
        "request.num_computed_tokens = 0", "pass",
        "a preempted request keeps its computed-token count although its KV blocks are freed"),
    VllmMutant(
        "sched_preempt_uncounted", SCHED, "Scheduler._preempt_request",
        "vllm#25780: [Bug]: vLLM counts re-computation tokens as prefix match (a resumed "
        "request must be told apart by num_preemptions)",
        "request.num_preemptions += 1", "pass",
        "a preemption is not counted: the request looks never preempted"),
    VllmMutant(
        "sched_preempt_oldest", SCHED, "Scheduler.schedule",
        "vllm#38080: [Core] Preempt requests with fewer num_computed_tokens (victim choice; "
        "FCFS preempts the last-admitted running request)",
        "preempted_req = self.running.pop()", "preempted_req = self.running.pop(0)",
        "under KV pressure the oldest running request is preempted instead of the newest"),
    VllmMutant(
        "sched_admit_after_preemption", SCHED, "Scheduler.schedule",
        "vllm#26765: [Bugfix][Core] When preemption occurs, the requests in the running set are "
        "not fully scheduled (what a step that preempted may still schedule)",
        "if not preempted_reqs and self._pause_state != PauseState.PAUSED_ALL:",
        "if self._pause_state != PauseState.PAUSED_ALL:",
        "waiting requests are admitted in the same step that preempted a running one"),
    VllmMutant(
        "sched_admit_past_max_seqs", SCHED, "Scheduler.schedule",
        "vllm#1034: Fix get_max_num_running_seqs for waiting seq groups (more requests "
        "scheduled than max_num_seqs)",
        "if num_running >= self.max_num_active_reqs:", "if num_running > self.max_num_active_reqs:",
        "one request more than max_num_seqs is admitted (vLLM's own assertion then fires)", raises=True),
    VllmMutant(
        "sched_skipped_to_back", SCHED, "Scheduler.schedule",
        "vllm#33522: [Core][Scheduler] Fix FCFS queue ordering for skipped waiting requests",
        "self.waiting.prepend_requests(step_skipped_waiting)",
        "self.waiting.extend(step_skipped_waiting)",
        "waiting requests skipped this step go to the back of the queue instead of the front"),
    VllmMutant(
        "sched_no_stale_resume_skip", SCHED, "Scheduler.schedule",
        "vllm#48245: [BugFix] Fix `num_output_placeholders` preemption underflow (a preempted "
        "request must not resume while deliverable stale output is in flight)",
        "if request.num_stale_output_tokens and not request.drop_stale_output:", "if False:",
        "a preempted request resumes while its deliverable stale output is still in flight"),
    VllmMutant(
        "sched_running_ignores_placeholders", SCHED, "Scheduler.schedule",
        "vllm#19970: Implement Async Scheduling (output placeholders count as tokens to compute "
        "past)",
        "+ request.num_output_placeholders", "+ 0",
        "a running request's in-flight placeholders are left out of its new-token count, so "
        "async scheduling never schedules a decode with a step in flight"),
    VllmMutant(
        "sched_unchunked_prefill_split", SCHED, "Scheduler.schedule",
        "vllm#33109: [DOC]: Add warning about max_num_batched_tokens and max_model_len when "
        "chunked prefill is disabled (a prompt is never split without chunked prefill)",
        "not self.scheduler_config.enable_chunked_prefill", "False",
        "with chunked prefill off a waiting prompt larger than the budget left is split anyway"),
    # ---------------------------------------------------------------- scheduler: output, abort, reset
    VllmMutant(
        "sched_stale_drop_delivered", SCHED, "Scheduler.update_from_output",
        "vllm#49860: [Bugfix][AsyncScheduler] Reset num_output_placeholders after discarding stale "
        "async frames (drop-mode stale frames must be discarded)",
        "if output_is_stale and request.drop_stale_output:", "if False:",
        "drop-mode stale output (same-step resume) is delivered instead of discarded"),
    VllmMutant(
        "sched_abort_stays_running", SCHED, "Scheduler.finish_requests",
        "vllm#26400: requests aborted during a forward pass not handled as aborts (fixed by "
        "vllm#29987): an aborted running request must leave the running queue",
        "self.running = remove_all(self.running, running_requests_to_remove)", "pass",
        "an aborted running request stays in the running queue"),
    VllmMutant(
        "sched_reset_keeps_stale_output", SCHED, "Scheduler.reset_prefix_cache",
        "vllm#38624: fix(scheduler): discard async tokens on all V1 preemption paths (the "
        "reset_prefix_cache path drops in-flight output)",
        "self._preempt_request(request, timestamp, drop_stale_output=True)",
        "self._preempt_request(request, timestamp, drop_stale_output=False)",
        "a reset_prefix_cache preemption delivers the in-flight output instead of dropping it"),
    VllmMutant(
        "sched_reset_preempts_oldest_first", SCHED, "Scheduler.reset_prefix_cache",
        "vllm#28827: [Core] Support resetting all running requests' KV while calling "
        "`reset_prefix_cache` (preempt in reverse so they resume in FIFO order)",
        "request = self.running.pop()", "request = self.running.pop(0)",
        "reset_prefix_cache preempts oldest first, so the running requests return in reverse order"),
    # ---------------------------------------------------------------- scheduler: deferred frees, connector
    VllmMutant(
        "sched_free_fence_strict", SCHED, "Scheduler._request_blocks_can_be_freed",
        _DEFER_REF,
        "request.last_sched_seq <= self.processed_step_seq",
        "request.last_sched_seq < self.processed_step_seq",
        "a request whose last step has been processed still has its blocks parked"),
    VllmMutant(
        "sched_no_fence_stamp", SCHED, "Scheduler._update_after_schedule", _DEFER_REF,
        "request.last_sched_seq = self.sched_step_seq", "pass",
        "a scheduled step is not recorded as the request's fence, so its blocks are freed while "
        "the step is in flight"),
    VllmMutant(
        "sched_processed_seq_stuck", SCHED, "Scheduler.update_from_output", _DEFER_REF,
        "self.processed_step_seq += 1", "pass",
        "processed steps are not counted: parked blocks never return to the pool"),
    VllmMutant(
        "sched_kv_pressure_preempt_delivers", SCHED, "Scheduler.schedule",
        "vllm#47900: [Bugfix][Core] Discard in-flight async output frames on preemption (a "
        "KV-producer connector's pending hand-off: requires_kv_delivery)",
        "drop_stale_output=self.requires_kv_delivery,", "drop_stale_output=False,",
        "a KV-pressure preemption ignores the connector's requires_kv_delivery and keeps the "
        "in-flight output deliverable"),
    VllmMutant(
        "conn_abort_frees_loading_blocks", SCHED, "Scheduler.finish_requests",
        "vllm#32255: [BugFix] scheduler: Delay freeing blocks of aborted async loads",
        "self.deferred_loads.pop(request.request_id, None) is None", "False",
        "a request aborted during an asynchronous KV load frees its blocks while the load may "
        "still write them"),
    VllmMutant(
        "conn_failed_load_blocks_leak", SCHED, "Scheduler._update_waiting_for_remote_kv",
        "vllm#19330: [V1] [P/D] Add Support for KV Load Failure Recovery (a load that failed "
        "before any token returns its blocks)",
        "self.kv_cache_manager.free(request)", "pass",
        "a request whose KV load failed with nothing loaded keeps its blocks"),
    VllmMutant(
        "conn_full_load_not_recomputed", SCHED, "Scheduler._update_waiting_for_remote_kv",
        "vllm#17999: [v1][KVCacheManager] Avoid full cache hit by controlling max_length (the "
        "same rule for a prompt loaded whole by a KV connector)",
        "request.num_computed_tokens = request.num_tokens - 1", "pass",
        "a prompt loaded whole leaves no token to compute, so nothing samples its first output",
        raises=True),
    VllmMutant(
        "conn_invalid_keeps_first_block", SCHED, "Scheduler._update_requests_with_invalid_blocks",
        "vllm#19330: [V1] [P/D] Add Support for KV Load Failure Recovery (truncate the computed "
        "tokens at the first failed block)",
        "request.num_computed_tokens = idx * self.block_size",
        "request.num_computed_tokens = (idx + 1) * self.block_size",
        "invalid-block recovery truncates after the first invalid block: its positions count as computed"),
    VllmMutant(
        "conn_invalid_async_not_scanned", SCHED, "Scheduler._handle_invalid_blocks",
        "vllm#35781: [Perf] Optimize scheduler overhead for PD disaggregation (blocked async loads "
        "left the waiting queue; the invalid-block scan must follow them to kv_holding_waiting)",
        "for req in self.kv_holding_waiting", "for req in self.waiting",
        "invalid blocks of an asynchronous load are never seen: the partly failed load is promoted as loaded"),
    VllmMutant(
        "conn_invalid_prefix_freed", SCHED, "Scheduler._update_waiting_for_remote_kv",
        "vllm#40976: [V1] [P/D] Remove per block error handling (closed: a failed load's blocks "
        "freed whatever its valid prefix)",
        "if request.num_computed_tokens:", "if False:",
        "a load with invalid blocks frees every block at promotion, though its valid prefix counts as computed"),
    VllmMutant(
        "conn_invalid_fail_recovers", SCHED, "Scheduler._handle_invalid_blocks",
        "vllm#26813: [P/D] KV Load Failure Recovery/Abort Configuration (kv_load_failure_policy "
        "fail ends the requests whose blocks are invalid)",
        "should_fail = not self.recompute_kv_load_failures", "should_fail = False",
        "under kv_load_failure_policy fail, invalid blocks are recomputed instead of failing the request"),
    # ---------------------------------------------------------------- async scheduler, request, stop check
    VllmMutant(
        "async_placeholders_for_chunks", ASYNC, "AsyncScheduler._update_after_schedule",
        "vllm#50692: [Bugfix][AsyncScheduler] Reserve placeholders for the final prefill chunk of "
        "a streaming update (placeholders only for steps that sample; vllm#57562)",
        "continue", "pass",
        "a partial prefill chunk also gets an output placeholder, though it samples nothing"),
    VllmMutant(
        "request_preempted_is_finished", REQUEST, "RequestStatus.is_finished",
        "vllm#16832: [Bug]: PreemptionMode.RECOMPUTE is incorrect (the preempted request's output "
        "is incomplete)",
        "return status > RequestStatus.PREEMPTED", "return status >= RequestStatus.PREEMPTED",
        "a preempted request counts as finished: its stale output and aborts are ignored"),
    VllmMutant(
        "request_output_not_hashed", REQUEST, "Request.append_output_token_ids",
        "vllm#9972: [V1] Prefix caching (take 2) (output tokens must be hashed to cover "
        "re-computation after preemption)",
        "self.update_block_hashes()", "pass",
        "blocks filled by output tokens get no hash, so they are never cached"),
    VllmMutant(
        "stop_max_tokens_one_late", UTILS, "check_stop",
        "vllm#28172: [Bug]: Sampling with max_tokens returns result sometimes off by 1 token",
        "or request.num_output_tokens >= request.max_tokens",
        "or request.num_output_tokens > request.max_tokens",
        "a request stops one token after max_tokens"),
    VllmMutant(
        "stop_min_tokens_holds_eos", UTILS, "check_stop",
        "vllm#47489: the order of check_stop's tests against min_tokens (one of the PRs check_stop's own "
        "comment names: EOS, stop tokens and the length cap come before min_tokens)",
        "if last_token_id == sampling_params.eos_token_id:",
        "if last_token_id == sampling_params.eos_token_id and request.num_output_tokens >= sampling_params.min_tokens:",
        "min_tokens tested before EOS: an EOS sampled below min_tokens no longer stops the request"),
    VllmMutant(
        "stop_token_no_reason", UTILS, "check_stop",
        "vllm#51299: named by check_stop's comment on the order of its tests; a near-miss in the stop "
        "token's branch it orders (the stop token is what the client is told stopped the request)",
        "request.stop_reason = last_token_id", "pass",
        "a request stopped by one of its stop_token_ids reports no stop_reason"),
    VllmMutant(
        "stop_repetition_ignores_min_tokens", UTILS, "check_stop",
        "vllm#49521: min_tokens before repetition detection (one of the PRs check_stop's own comment names)",
        "if request.num_output_tokens < sampling_params.min_tokens:",
        "if request.num_output_tokens < 0:",
        "repetition detection fires below min_tokens"),
    VllmMutant(
        "stop_repetition_as_stopped", UTILS, "check_stop",
        "vllm#49521: named by check_stop's comment on the order of its tests; a near-miss in the "
        "repetition branch it orders (FINISHED_REPETITION, finish reason 'repetition', not a stop)",
        "request.status = RequestStatus.FINISHED_REPETITION",
        "request.status = RequestStatus.FINISHED_STOPPED",
        "a detected repetition is reported as an ordinary stop"),
    VllmMutant(
        "stop_repetition_one_period_early", UTILS, "_has_repeating_pattern",
        "vllm#49521: named by check_stop's comment on the order of its tests; a near-miss in "
        "check_sequence_repetition's count of repeats (min_count periods, the last one included)",
        "for m in range(1, repetition_min_count):",
        "for m in range(1, repetition_min_count - 1):",
        "a pattern is detected one period before it has repeated min_count times"),
    # ---------------------------------------------------------------- KV cache events (block pool)
    VllmMutant(
        "pool_reset_no_clear_event", POOL, "BlockPool.reset_prefix_cache",
        "vllm#16750: KV cache events (AllBlocksCleared on a prefix-cache reset; named its origin in vllm#57296)",
        "self.kv_event_queue.append(AllBlocksCleared())", "pass",
        "a successful reset_prefix_cache publishes no AllBlocksCleared"),
    VllmMutant(
        "pool_evict_no_removed_event", POOL, "BlockPool._maybe_evict_cached_block",
        "vllm#55092: [Bugfix][KV Cache] Emit BlockRemoved only after the last physical copy is evicted "
        "(when an eviction reports BlockRemoved)",
        "self._emit_block_removed_events(evicted_hashes)", "pass",
        "a cached block taken back for a new allocation publishes no BlockRemoved"),
    VllmMutant(
        "pool_stored_event_no_hashes", POOL, "BlockPool.cache_full_blocks",
        "vllm#45261: [Core][KV events] Report prefix-cache-reused blocks in full report mode (which "
        "blocks a BlockStored reports)",
        "new_hashes.append(maybe_convert_block_hash(block_hash))", "pass",
        "a BlockStored event lists none of the blocks it caches"),
    # ---------------------------------------------------------------- KV cache manager, coordinator, single-type
    VllmMutant(
        "kv_full_prefix_hit", MANAGER, "KVCacheManager.get_computed_blocks",
        "vllm#17999: [v1][KVCacheManager] Avoid full cache hit by controlling max_length (after "
        "vllm#11186)",
        "max_cache_hit_length = request.num_tokens - 1", "max_cache_hit_length = request.num_tokens",
        "a prompt fully in the prefix cache is a full hit, leaving no token to compute", raises=True),
    VllmMutant(
        "kv_alloc_needs_spare_block", MANAGER, "KVCacheManager.allocate_slots",
        "vllm#11565: [Bugfix] Move the _touch(computed_blocks) call in allocate_slots after the "
        "check for allocating new blocks (the free-block check's edge; vllm#11562)",
        "if required_blocks > available_blocks:", "if required_blocks >= available_blocks:",
        "an allocation that would use the last free block fails (preempting one block early)"),
    VllmMutant(
        "coord_free_skipped", COORD, "KVCacheCoordinator.free",
        "vllm#27073: [Bug]: GPU KV cache usage stays near 100% after requests end (blocks not "
        "released)",
        "manager.free(request_id)", "pass",
        "a freed request's blocks never return to the pool"),
    VllmMutant(
        "coord_deferred_blocks_dropped", COORD, "KVCacheCoordinator.pop_blocks_for_free",
        _DEFER_REF,
        "blocks.extend(manager.pop_blocks_for_free(request_id))", "pass",
        "a deferred free parks no blocks: the request's blocks leak"),
    VllmMutant(
        "kv_hit_blocks_not_counted", SINGLE, "SingleTypeKVCacheManager.get_num_blocks_to_allocate",
        "vllm#11565: [Bugfix] Move the _touch(computed_blocks) call (free cached blocks a hit "
        "touches must count against the free pool)",
        "return num_new_blocks + num_evictable_blocks", "return num_new_blocks",
        "prefix-cache hits on free blocks are not counted, so allocation over-commits the pool", raises=True),
    VllmMutant(
        "kv_cache_uncomputed_blocks", SINGLE, "SingleTypeKVCacheManager.cache_blocks",
        "LMCache/LMCache#1898: [Feat] Support vLLM async-scheduling (scheduled tokens treated as "
        "computed, incomplete KV cached; vllm#27644)",
        "num_full_blocks = min(num_tokens, num_hashed_tokens) // self.block_size",
        "num_full_blocks = num_hashed_tokens // self.block_size",
        "blocks of a chunked prefill are cached before their KV is computed"),
    # ---------------------------------------------------------------- block pool
    VllmMutant(
        "pool_touch_keeps_free", POOL, "BlockPool.touch",
        "vllm#11565: [Bugfix] Move the _touch(computed_blocks) call (a touched free block leaves "
        "the free queue)",
        "self.free_block_queue.remove(block)", "pass",
        "a cached free block hit by a new request stays in the free queue"),
    VllmMutant(
        "pool_reuse_keeps_hash", POOL, "BlockPool.get_new_blocks",
        "vllm#4761: [Core][Bugfix]: fix prefix caching for blockv2 (a reused block was not "
        "dropped from the cache tracking)",
        "self._maybe_evict_cached_block(block)", "pass",
        "a cached block handed out for new tokens keeps its hash in the prefix cache"),
    VllmMutant(
        "pool_reset_keeps_hashes", POOL, "BlockPool.reset_prefix_cache",
        "vllm#49125: [Bug]: Stale partial prefix-cache hash resurrected into the cache",
        "block.reset_hash()", "pass",
        "reset_prefix_cache clears the hash map but leaves each block's hash"),
    VllmMutant(
        "pool_cached_freed_to_front", POOL, "BlockPool.free_blocks",
        "vllm#51348: [Core] cached blocks that never hit should be evicted first (eviction "
        "order of freed cached blocks; vllm#48017)",
        "if block.block_hash is None or not self.enable_caching:", "if True:",
        "freed cached blocks go to the front of the free queue, evicted before uncached ones"),
    # ---------------------------------------------------------------- streaming-input (resumable) sessions
    VllmMutant(
        "stream_stop_keeps_optimistic", SCHED, "Scheduler._handle_stopped_request",
        "vllm-project/vllm-omni#5183: [Bugfix][Core] Fix async streaming segment-stop accounting "
        "(placeholders cleared without rolling num_computed_tokens back)",
        "safe_frontier = request.num_computed_tokens - request.num_output_placeholders",
        "safe_frontier = request.num_computed_tokens",
        "a session stopped with steps in flight keeps their optimistic computed tokens"),
    VllmMutant(
        "stream_late_token_delivered", SCHED, "Scheduler._handle_stopped_request",
        "vllm-project/vllm-omni#3532: [bugfix] streaming input adapt async scheduling (a late async "
        "token of the previous segment reaches the next one)",
        "request.drop_stale_output = True", "pass",
        "a stopped turn's in-flight output is delivered (deliver mode) into the session's next turn"),
    VllmMutant(
        "stream_paused_slot_free", SCHED, "Scheduler.schedule",
        "vllm#53130: [Bug]: Scheduler permanently stops admitting requests once running + deferred "
        "reaches max_num_seqs (paused sessions' model-runner slots; vllm#52693)",
        "num_running = len(self.running) + self.num_waiting_for_streaming_input",
        "num_running = len(self.running)",
        "the waiting pass admits past max_num_seqs while paused sessions hold model-runner slots"),
    VllmMutant(
        "stream_abort_paused_uncounted", SCHED, "Scheduler.finish_requests",
        "vllm#53321: [Bugfix][Core] Time out requests stuck in WAITING_FOR_STREAMING_REQ (a paused "
        "session's num_waiting_for_streaming_input slot must be released when it ends)",
        "self.num_waiting_for_streaming_input -= 1", "pass",
        "aborting a paused session keeps its num_waiting_for_streaming_input count"),
)
