"""vLLM mutants of Model Runner V2's encoder-input path: one line of vLLM 0.33.0 each.

MRV2 (``vllm/v1/worker/gpu/``) keeps each request's multimodal features in its
own ``EncoderCache`` (``vllm/v1/worker/gpu/mm/encoder_cache.py``): installed by
``add_request``, their payloads replaced by the scheduler's
``encoder_input_updates`` (``Scheduler._get_encoder_input_updates``: a payload
dropped once its image lies below the confirmed progress, sent again when a
running request must encode it again), and read by ``EncoderRunner``
(``prepare_mm_inputs`` encodes what was scheduled and has a payload,
``gather_mm_embeddings`` slices each image's rows for the step's window).  The
V1 runner runs none of it, and the scheduler sends the updates to MRV2 only
(``use_v2_model_runner``), so only a part on MRV2 can kill these: the engine
target's ``mrv2-encoder`` part (``engine_campaign.run_mrv2_for_mutants``).  The last two change the
scheduler's drop rule itself; the spec's ``encoder.payload_updates`` (compared as ``encoder.updates`` and
``encoder.held``, ``scheduler/encoder_obs.py``) sees them, the tokens do not (a payload dropped early is
sent again when the image is encoded again).
"""
from __future__ import annotations

from asyncspec.engine.vllm.mutant_type import VllmMutant

SCHED = "v1/core/sched/scheduler.py"
MRV2_ENCODER_CACHE = "v1/worker/gpu/mm/encoder_cache.py"
MRV2_ENCODER_RUNNER = "v1/worker/gpu/mm/encoder_runner.py"

MRV2_ENCODER_MUTANTS: tuple[VllmMutant, ...] = (
    VllmMutant(
        "mrv2_encoder_cache_shares_features", MRV2_ENCODER_CACHE, "EncoderCache.add_request",
        "vllm#50871: fix: release committed encoder data for resumable sessions (open: it drops the "
        "scheduler-side mm_feature.data, and its review checks preemption and rescheduling; vLLM 0.33.0's "
        "note in add_request: the uniprocess executor can share this list with EngineCore, so the runner copies it)",
        "self.mm_features[req_id] = list(mm_features)", "self.mm_features[req_id] = mm_features",
        "the runner's feature list is the scheduler's Request.mm_features: a dropped payload is dropped there "
        "too, so a preempted request comes back without its image data and cannot encode it again"),
    VllmMutant(
        "mrv2_mm_chunk_from_image_start", MRV2_ENCODER_RUNNER, "EncoderRunner.gather_mm_embeddings",
        "vllm#8346: [Core][VLM] Add precise multi-modal placeholder tracking (the V1 runner's "
        "runner_mm_chunk_from_image_start in MRV2's gather: a chunk that starts inside an image takes its "
        "rows from its offset into the image on)",
        "mm_embeds_item = encoder_output[start_idx:end_idx]",
        "mm_embeds_item = encoder_output[: end_idx - start_idx]",
        "a prefill chunk that starts inside an image is fed the image's first embeddings again (MRV2)"),
    VllmMutant(
        "sched_payload_drop_ignores_in_flight", SCHED, "Scheduler._get_encoder_input_updates",
        "vllm#45347: [BugFix] Avoid prematurely freeing cached mm encoder outputs (the placeholders-only test of "
        "_free_encoder_inputs); no upstream fix of this rule: a variant of it, the payload drop reading the "
        "placeholders alone, not the larger of them and the in-flight tokens",
        "request.num_output_placeholders, request.num_in_flight_tokens",
        "request.num_output_placeholders, 0",
        "an image's payload is dropped while a prefill chunk that covers it is still in flight: MRV2 is told "
        "to forget data it may be asked to encode again (sent again then, so only the updates show it)"),
    VllmMutant(
        "sched_payload_drop_at_image_start", SCHED, "Scheduler._get_encoder_input_updates",
        "vllm#50871: fix: release committed encoder data for resumable sessions (open: drops an image's data once "
        "it is processed); no upstream fix of this rule: a variant of it, the drop test on the image's first "
        "position, not its end",
        "if position.offset + position.length <= computed or (",
        "if position.offset <= computed or (",
        "an image's payload is dropped once the confirmed progress reaches the image, before its last "
        "positions are computed (sent again when the image is encoded again, so only the updates show it)"),
)
"""Model Runner V2's encoder-input path: killed by the ``mrv2-encoder`` part only."""
