"""vLLM mutants of the features issue 28 models: one line of vLLM 0.33.0 each, after a bug or a
change in vLLM's public history of the feature; ``vllm_mutants.py`` appends them to the corpus.

Pauses (``EngineCore.pause_scheduler`` / ``Scheduler.set_pause_state``): killed by the ``pause``
part of the default mix (``statemachine_tests/scheduler/profiles.py``), whose workloads pause in
every mode with steps in flight, a third of them with the toy KV connector.  Encoder inputs: by
the ``encoder`` part (``ENCODER_MUTANTS``).
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

FEATURE_MUTANTS: tuple[VllmMutant, ...] = PAUSE_MUTANTS + ENCODER_MUTANTS
"""Every mutant of this module, in corpus order."""
