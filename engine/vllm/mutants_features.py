"""vLLM mutants of the features issue 28 models: one line of vLLM 0.33.0 each, after a bug or a
change in vLLM's public history of the feature; ``vllm_mutants.py`` appends them to the corpus.

Pauses (``EngineCore.pause_scheduler`` / ``Scheduler.set_pause_state``): killed by the ``pause``
part of the default mix (``statemachine_tests/scheduler/profiles.py``), whose workloads pause in
every mode with steps in flight, a third of them with the toy KV connector.

The offloading connector (``OffloadingConnectorScheduler``, its store jobs' fences and the lookup
of a preempted request): killed by the ``offload`` part, whose workloads run vLLM's own
OffloadingConnector under KV pressure with aborts (``spec/offload.py``).
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

FEATURE_MUTANTS: tuple[VllmMutant, ...] = PAUSE_MUTANTS + OFFLOAD_MUTANTS
"""Every mutant of this module, in corpus order."""
