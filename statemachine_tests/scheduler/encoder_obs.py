"""The encoder cache as a fuzz observation: what the ``vllm`` target reads and what the spec predicts.

``Observation.encoder`` holds, by name (``harness.Observation.flat`` shows each as
``encoder.NAME``):

* ``scheduled`` — the last ``schedule()``'s ``scheduled_encoder_inputs``: (request, input ids);
* ``freed`` — its ``free_encoder_mm_hashes``, as spec items, in vLLM's order;
* ``cached`` — ``EncoderCacheManager.cached``: (item, the requests referencing it) per entry;
* ``freeable`` — ``EncoderCacheManager.freeable``, oldest first;
* ``slots`` — (``num_free_slots``, ``num_freeable_slots``).

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


def _named(scheduled: Any, freed: Any, cached: Any, freeable: Any, slots: tuple[int, int]) -> EncoderObs:
    return (("scheduled", scheduled), ("freed", freed), ("cached", cached), ("freeable", freeable), ("slots", slots))


def vllm_view(sched: Any, last_output: Any) -> EncoderObs:
    """vLLM's encoder cache now; ``last_output``: the ``SchedulerOutput`` of this event's
    ``schedule()``, None for another event."""
    ecm = sched.encoder_cache_manager
    scheduled: tuple[tuple[int, tuple[int, ...]], ...] = ()
    freed: tuple[int, ...] = ()
    if last_output is not None:
        scheduled = tuple(sorted((req_index(r), tuple(ids)) for r, ids in last_output.scheduled_encoder_inputs.items()))
        freed = tuple(item_of(h) for h in last_output.free_encoder_mm_hashes)
    cached = tuple(sorted((item_of(h), tuple(sorted(req_index(r) for r in refs))) for h, refs in ecm.cached.items()))
    freeable = tuple(item_of(h) for h in ecm.freeable)
    return _named(scheduled, freed, cached, freeable, (int(ecm.num_free_slots), int(ecm.num_freeable_slots)))


def spec_view(cfg: SpecConfig, s: EngineState, step: Step | None) -> EncoderObs:
    """What the spec's state ``s`` says of the same; ``step``: this event's new step, if a ``schedule()``."""
    scheduled = step.encoder_inputs if step is not None else ()
    freed = step.freed_encoder if step is not None else ()
    cached = tuple(
        (item, tuple(r for r, ids in enumerate(s.enc_inputs)
                     if any(encoder.images_of(cfg, r)[i].item == item for i in ids)))
        for item in s.enc_entries)
    held, _ = encoder.cache_usage(cfg, s)
    free = cfg.encoder_cache_size - held
    freeable = free + sum(encoder.item_length(cfg, i) for i in s.enc_freeable)
    return _named(scheduled, freed, cached, s.enc_freeable, (free, freeable))
