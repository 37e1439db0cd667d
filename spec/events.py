"""Names of the behaviours an action can exercise.

Actions record these in their transition; the checker turns them into the
*sometimes* witnesses (a config where one never happens is vacuous for the
properties that need it) and the fuzzers into coverage counts.
"""
from __future__ import annotations

MAX_TOKENS_GUARD = "max_tokens_guard"  # pass 1 skipped a request sure to hit max_tokens
WASTED_STEP = "wasted_step"  # a step's output arrived for a request the engine had finished
PREEMPT_IN_FLIGHT_DELIVER = "preemption_in_flight_deliver"  # victim had output in flight (deliver)
PREEMPT_IN_FLIGHT_DROP = "preemption_in_flight_drop"  # victim had output in flight (drop)
STALE_DELIVERY = "stale_delivery"  # stale output appended without touching C or H
STALE_DROP = "stale_drop"  # stale output thrown away (drop mode)
STALE_RESUME_SKIP = "stale_resume_skip"  # pass 2 skipped a request whose stale output is in flight
DEFERRED_FREE = "deferred_free"  # a free was parked behind a step fence
DEFERRED_FREE_DRAINED = "deferred_free_drained"  # a parked free returned to the pool
CHUNKED_PREFILL = "chunked_prefill"  # a step scheduled a prefill chunk that does not sample
EMPTY_STEP = "empty_step"  # schedule() produced a step with no tokens (still queued)
PREEMPTION = "preemption"  # any preemption
ABORT_IN_FLIGHT = "abort_in_flight"  # a request was aborted with output in flight
PREFIX_CACHE_HIT = "prefix_cache_hit"  # an admission reused the request's own cached blocks
SPEC_DECODE_REJECTION = "spec_decode_rejection"  # some drafts were rejected and rolled back
SPEC_DECODE_ALL_ACCEPTED = "spec_decode_all_accepted"  # every scheduled draft was accepted
STRUCTURED_OUTPUT_DEFERRAL = "structured_output_deferral"  # forward ran, sampling waits for the grammar
RESET_PREFIX_CACHE_FAILED = "reset_prefix_cache_failed"  # blocks still in use: hashes kept, error raised
SLIDING_WINDOW_FREE = "sliding_window_free"  # a sliding-window group freed blocks behind its window
KV_ASYNC_LOAD = "kv_async_load"  # a KV connector started an asynchronous load (WAITING_FOR_REMOTE_KVS)
KV_LOAD_FAILED = "kv_load_failed"  # the worker reported a failed load (either failure policy)
KV_SEND_DELAYED_FREE = "kv_send_delayed_free"  # a finished request's blocks wait for its send
KV_ABORT_DURING_LOAD = "kv_abort_during_load"  # aborted while its load is pending: blocks wait for it
PRIORITY_PREEMPTION = "priority_preemption"  # priority policy: the victim was not the last running request
PREEMPTED_SCHEDULED_UNDONE = "preempted_scheduled_undone"  # the victim was already scheduled this step
LONG_PREFILL_CAPPED = "long_prefill_capped"  # long_prefill_token_threshold cut a request's tokens
MODEL_LEN_CAPPED = "model_len_capped"  # max_model_len cut a running request's tokens (or ended it)
ABORT_DEFERRED = "abort_deferred"  # SGLang: a running request's abort set Req.to_finish instead of ending it
DEFERRED_ABORT_DELIVERY = "deferred_abort_delivery"  # a deferred abort ended its request after appending the row's token
DEFERRED_ABORT_WASTED_STEP = "deferred_abort_wasted_step"  # a row of a request its deferred abort had ended: computed for nothing
PAUSE_IN_FLIGHT = "pause_in_flight"  # pause_scheduler was called with steps in flight
PAUSED_OUTPUT = "paused_output"  # update_from_output processed a step while the scheduler was paused
PAUSE_HELD_WAITING = "pause_held_waiting"  # a schedule() under PAUSED_NEW left a waiting request unadmitted
RESUMED_HELD = "resumed_held"  # resume_scheduler let requests the pause had held go on
KV_INVALID_BLOCKS = "kv_invalid_blocks"  # the worker reported a loading request's blocks from block j on invalid
KV_PARTIAL_RECOMPUTE = "kv_partial_recompute"  # promoted after invalid blocks: the valid prefix kept, the rest recomputed
STREAM_STOP_IN_FLIGHT = "stream_stop_in_flight"  # a streaming session's turn stopped with its steps in flight (dropped)
STREAM_PAUSE = "stream_pause"  # a stopped session had no input queued: WAITING_FOR_STREAMING_REQ
STREAM_CONTINUE = "stream_continue"  # a stopped session took its queued update at once
STREAM_QUEUED = "stream_queued"  # an input reached a session that was not paused: streaming_queue
STREAM_RESUME = "stream_resume"  # an update reached a paused session: WAITING again
STREAM_END = "stream_end"  # a session's input stream ended (finished at its stop, or aborted while paused)
STREAM_PAUSED_SKIP = "stream_paused_skip"  # the waiting pass skipped a paused session
OFFLOAD_STORE = "offload_store"  # the offloading connector issued a store job for a scheduled request
OFFLOAD_STORE_FINISHED = "offload_store_finished"  # ... for a request finished since the last schedule()
OFFLOAD_FLUSH = "offload_flush"  # a step flushed a watched store job whose block it allocated again
OFFLOAD_FLUSH_PREEMPTED = "offload_flush_preempted"  # a step flushed the store jobs of a request it preempted
OFFLOAD_STORE_DONE = "offload_store_done"  # the worker reported store jobs complete (completed_jobs)
OFFLOAD_LOOKUP_DELAYED = "offload_lookup_delayed"  # a waiting request with stores in flight was not looked up
OFFLOAD_LOAD = "offload_load"  # a request came back with a CPU hit: an asynchronous load of what it stored
ENCODER_INPUT_SCHEDULED = "encoder_input_scheduled"  # a step computes an image (its cache entry allocated)
ENCODER_CACHE_REVIVED = "encoder_cache_revived"  # a request found its image cached but freeable, and took it back
ENCODER_CACHE_EVICTION = "encoder_cache_eviction"  # an allocation evicted a freeable entry (freed to the worker)
ENCODER_INPUT_BLOCKED = "encoder_input_blocked"  # cache or compute budget full: the step stops before an image
ENCODER_INPUT_RELEASED = "encoder_input_released"  # an output released an image wholly below C - H (freeable)
ENCODER_RELEASED_IN_FLIGHT = "encoder_released_in_flight"  # released while a step reading it is still in flight
ENCODER_EVICTED_REALLOCATED = "encoder_evicted_reallocated"  # one pass evicted an entry, then allocated it again
ENCODER_MISS = "encoder_miss"  # a step read an image position whose item the worker did not hold
MAMBA_ALIGNED_SPLIT = "mamba_aligned_split"  # "align": the split cut a prefill chunk back to a Mamba block boundary
MAMBA_SUB_BLOCK_CHUNK = "mamba_sub_block_chunk"  # a block wider than the prefill cap: a chunk stopped inside it
MAMBA_SPLIT_STOPS_PASS = "mamba_split_stops_pass"  # the split left an admission no token: the waiting pass stopped
MAMBA_STATE_FREED = "mamba_state_freed"  # remove_skipped_blocks freed a state block behind C - F
MAMBA_STATE_FREED_IN_FLIGHT = "mamba_state_freed_in_flight"  # ... while a step of its request was in flight
MAMBA_HIT_CUT = "mamba_hit_cut"  # a prefix hit cut back to the last cached state (a shared-prefix junction set)

ALL_EVENTS: tuple[str, ...] = (
    MAX_TOKENS_GUARD,
    WASTED_STEP,
    PREEMPT_IN_FLIGHT_DELIVER,
    PREEMPT_IN_FLIGHT_DROP,
    STALE_DELIVERY,
    STALE_DROP,
    STALE_RESUME_SKIP,
    DEFERRED_FREE,
    DEFERRED_FREE_DRAINED,
    CHUNKED_PREFILL,
    EMPTY_STEP,
    PREEMPTION,
    ABORT_IN_FLIGHT,
    PREFIX_CACHE_HIT,
    SPEC_DECODE_REJECTION,
    SPEC_DECODE_ALL_ACCEPTED,
    STRUCTURED_OUTPUT_DEFERRAL,
    RESET_PREFIX_CACHE_FAILED,
    SLIDING_WINDOW_FREE,
    KV_ASYNC_LOAD,
    KV_LOAD_FAILED,
    KV_SEND_DELAYED_FREE,
    KV_ABORT_DURING_LOAD,
    PRIORITY_PREEMPTION,
    PREEMPTED_SCHEDULED_UNDONE,
    LONG_PREFILL_CAPPED,
    MODEL_LEN_CAPPED,
    ABORT_DEFERRED,
    DEFERRED_ABORT_DELIVERY,
    DEFERRED_ABORT_WASTED_STEP,
    PAUSE_IN_FLIGHT,
    PAUSED_OUTPUT,
    PAUSE_HELD_WAITING,
    RESUMED_HELD,
    KV_INVALID_BLOCKS,
    KV_PARTIAL_RECOMPUTE,
    STREAM_STOP_IN_FLIGHT,
    STREAM_PAUSE,
    STREAM_CONTINUE,
    STREAM_QUEUED,
    STREAM_RESUME,
    STREAM_END,
    STREAM_PAUSED_SKIP,
    OFFLOAD_STORE,
    OFFLOAD_STORE_FINISHED,
    OFFLOAD_FLUSH,
    OFFLOAD_FLUSH_PREEMPTED,
    OFFLOAD_STORE_DONE,
    OFFLOAD_LOOKUP_DELAYED,
    OFFLOAD_LOAD,
    ENCODER_INPUT_SCHEDULED,
    ENCODER_CACHE_REVIVED,
    ENCODER_CACHE_EVICTION,
    ENCODER_INPUT_BLOCKED,
    ENCODER_INPUT_RELEASED,
    ENCODER_RELEASED_IN_FLIGHT,
    ENCODER_EVICTED_REALLOCATED,
    ENCODER_MISS,
    MAMBA_ALIGNED_SPLIT,
    MAMBA_SUB_BLOCK_CHUNK,
    MAMBA_SPLIT_STOPS_PASS,
    MAMBA_STATE_FREED,
    MAMBA_STATE_FREED_IN_FLIGHT,
    MAMBA_HIT_CUT,
)

FUZZ_COVERAGE: dict[str, tuple[str, ...]] = {
    "preemption_with_output_in_flight": (PREEMPT_IN_FLIGHT_DELIVER, PREEMPT_IN_FLIGHT_DROP),
    "stale_delivery": (STALE_DELIVERY,),
    "stale_drop": (STALE_DROP,),
    "deferred_free": (DEFERRED_FREE,),
    "wasted_step": (WASTED_STEP,),
    "max_tokens_guard": (MAX_TOKENS_GUARD,),
    "chunked_prefill": (CHUNKED_PREFILL,),
    "abort_in_flight": (ABORT_IN_FLIGHT,),
}
"""The coverage categories every fuzz target reports (``asyncspec fuzz --json``), and
the events each counts.  A run with a zero in a category its workload enables says so."""

KV_RECOVERY_COVERAGE: dict[str, tuple[str, ...]] = {
    "kv_invalid_blocks": (KV_INVALID_BLOCKS,),
    "kv_partial_recompute": (KV_PARTIAL_RECOMPUTE,),
}
"""The coverage categories of KV-load failure recovery (invalid-block reports), and their events."""

OFFLOAD_COVERAGE: dict[str, tuple[str, ...]] = {
    "offload_store": (OFFLOAD_STORE,),
    "offload_store_finished": (OFFLOAD_STORE_FINISHED,),
    "offload_flush": (OFFLOAD_FLUSH, OFFLOAD_FLUSH_PREEMPTED),
    "offload_load": (OFFLOAD_LOAD,),
}
"""The coverage categories of the offloading connector (``kv_offloading``), and their events (its deferred
frees count under ``deferred_free``)."""
