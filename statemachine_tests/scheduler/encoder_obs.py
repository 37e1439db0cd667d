"""The encoder cache as a fuzz observation: what the ``vllm`` target reads and what the spec predicts.

``Observation.encoder`` holds, by name (``harness.Observation.flat`` shows each as
``encoder.NAME``):

* ``scheduled`` — the last ``schedule()``'s ``scheduled_encoder_inputs``: (request, input ids);
* ``freed`` — its ``free_encoder_mm_hashes``, as spec items, in vLLM's order;
* ``cached`` — ``EncoderCacheManager.cached``: (item, the requests referencing it) per entry;
* ``freeable`` — ``EncoderCacheManager.freeable``, oldest first;
* ``slots`` — (``num_free_slots``, ``num_freeable_slots``);
* ``updates`` — the last ``schedule()``'s ``encoder_input_updates`` (Model Runner V2 only:
  ``Scheduler._get_encoder_input_updates``): (request, ((input id, True: data sent / False: dropped), ...));
* ``held`` — ``Scheduler._pending_encoder_input_ids``: (request, the input ids whose data MRV2 holds).

The spec predicts the last two (``spec/encoder.payload_updates``) only where the images carry data
on MRV2 (the engine target's ``mrv2-encoder`` part, ``SpecTarget.encoder_payloads``); elsewhere
vLLM sends none and keeps none (the V1 runner, or features without data), and both sides are empty.

Both sides name items as the spec does (``encoder_model.item_id`` is vLLM's identifier).
"""
from __future__ import annotations

from typing import Any

from asyncspec.engine.vllm.encoder_model import item_of
from asyncspec.spec import encoder
from asyncspec.spec.config import SpecConfig
from asyncspec.spec.state import EngineState, Step

from asyncspec.statemachine_tests.scheduler.vllm_observer import req_index

EncoderObs = tuple[tuple[str, Any], ...]


Payloads = tuple[tuple[int, tuple[int, ...]], ...]  # held: (request, input ids)

ENCODER_INPUT_RESENT = "encoder_input_resent"
"""Coverage (the spec's side, MRV2 payloads): a ``schedule()`` sends an image's data again."""
ENCODER_INPUT_DROPPED = "encoder_input_dropped"
"""Coverage (the spec's side, MRV2 payloads): a ``schedule()`` drops an image's data at the worker."""


def _named(scheduled: Any, freed: Any, cached: Any, freeable: Any, slots: tuple[int, int],
           updates: encoder.PayloadUpdates, held: Payloads) -> EncoderObs:
    return (("scheduled", scheduled), ("freed", freed), ("cached", cached), ("freeable", freeable), ("slots", slots),
            ("updates", updates), ("held", held))


def vllm_view(sched: Any, last_output: Any) -> EncoderObs:
    """vLLM's encoder cache now; ``last_output``: the ``SchedulerOutput`` of this event's
    ``schedule()``, None for another event."""
    ecm = sched.encoder_cache_manager
    scheduled: tuple[tuple[int, tuple[int, ...]], ...] = ()
    freed: tuple[int, ...] = ()
    updates: encoder.PayloadUpdates = ()
    if last_output is not None:
        scheduled = tuple(sorted((req_index(r), tuple(ids)) for r, ids in last_output.scheduled_encoder_inputs.items()))
        freed = tuple(item_of(h) for h in last_output.free_encoder_mm_hashes)
        updates = tuple(sorted((req_index(r), tuple(sorted((int(i), data is not None) for i, data in u.items())))
                               for r, u in getattr(last_output, "encoder_input_updates", {}).items()))
    held = tuple(sorted((req_index(r), tuple(sorted(ids)))
                        for r, ids in getattr(sched, "_pending_encoder_input_ids", {}).items()))
    cached = tuple(sorted((item_of(h), tuple(sorted(req_index(r) for r in refs))) for h, refs in ecm.cached.items()))
    freeable = tuple(item_of(h) for h in ecm.freeable)
    return _named(scheduled, freed, cached, freeable, (int(ecm.num_free_slots), int(ecm.num_freeable_slots)),
                  updates, held)


def spec_view(cfg: SpecConfig, s: EngineState, step: Step | None, updates: encoder.PayloadUpdates = (),
              payloads: encoder.Payloads | None = None) -> EncoderObs:
    """What the spec's state ``s`` says of the same; ``step``: this event's new step, if a ``schedule()``;
    ``updates`` and ``payloads`` (held): MRV2's payloads as the harness follows them (``SpecTarget``), if modelled."""
    scheduled = step.encoder_inputs if step is not None else ()
    freed = step.freed_encoder if step is not None else ()
    cached = tuple(
        (item, tuple(r for r, ids in enumerate(s.enc_inputs)
                     if any(encoder.images_of(cfg, r)[i].item == item for i in ids)))
        for item in s.enc_entries)
    held, _ = encoder.cache_usage(cfg, s)
    free = cfg.encoder_cache_size - held
    freeable = free + sum(encoder.item_length(cfg, i) for i in s.enc_freeable)
    kept = tuple(sorted((r, tuple(sorted(ids))) for r, ids in (payloads or {}).items()))
    return _named(scheduled, freed, cached, s.enc_freeable, (free, freeable), updates, kept)
