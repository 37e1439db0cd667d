"""vLLM mutants of the features issue 28 models: one line of vLLM 0.33.0 each, after a bug or a
change in vLLM's public history of the feature; ``vllm_mutants.py`` appends them to the corpus.

Pauses (``EngineCore.pause_scheduler`` / ``Scheduler.set_pause_state``): killed by the ``pause``
part of the default mix (``statemachine_tests/scheduler/profiles.py``), whose workloads pause in
every mode with steps in flight, a third of them with the toy KV connector.
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

FEATURE_MUTANTS: tuple[VllmMutant, ...] = PAUSE_MUTANTS + ENGINE_PAUSE_MUTANTS + RUNNER_STREAMING_MUTANTS
"""Every mutant of this module, in corpus order."""
