"""Coverage of the worker side of the ``vllm-engine`` target: what the model runner was made to do.

Counted from what the runner was sent (the payload) and what it fed (the
oracle model's record of each forward pass):

* ``resumed_with_history`` — a request back from preemption arrived with its
  whole token history (``CachedRequestData.all_token_ids``), which
  ``GPUModelRunner._update_states`` must restore;
* ``batch_reordered`` — a request sat at another row of the persistent batch
  than in the previous forward pass (condense, swap, re-add), so the async
  feed of last step's sampled token had to follow it
  (``_prepare_input_ids``' scatter path, not the single-slice fast path);
* ``fed_after_preemption`` — a request was fed again after a preemption;
* ``partial_prefill_discarded`` — a prefill chunk that does not end the prompt
  was run: the runner samples for it and must discard the sample;
* ``encoder_output_reused`` (images only) — a forward fed image embeddings that
  the encoder computed in an earlier step (``ENCODER_WORKER_COVERAGE``);
* ``encoder_payload_dropped`` (images on Model Runner V2 only) — a step's
  ``encoder_input_updates`` dropped an image's payload in MRV2's ``EncoderCache``
  (``MRV2_ENCODER_WORKER_COVERAGE``).
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from asyncspec.statemachine_tests.core.harness import Observation
from asyncspec.statemachine_tests.scheduler.payload import RESUMED
from asyncspec.statemachine_tests.scheduler.vllm_observer import req_index

WORKER_COVERAGE = ("resumed_with_history", "batch_reordered", "fed_after_preemption", "partial_prefill_discarded")
ENCODER_WORKER_COVERAGE = ("encoder_output_reused",)
"""With images (``oracle_encoder.py``): a forward fed an image's embeddings that the encoder computed in an
earlier step, kept in the runner's ``encoder_cache`` (a later chunk of the image, or another request's
hit on a shared item), until ``free_encoder_mm_hashes`` frees it."""

MRV2_ENCODER_WORKER_COVERAGE = ("encoder_payload_dropped",)
"""With images on MRV2: ``Scheduler._get_encoder_input_updates`` sent ``None`` for an image below the request's
confirmed progress (C less the larger of its placeholders and in-flight tokens), so MRV2 keeps no payload for it
and an image encoded again must have its payload sent again."""


class WorkerCoverage:
    """Adds the worker-side counts of one run to a coverage dict."""

    def __init__(self, coverage: dict[str, int]) -> None:
        self.coverage = coverage
        for key in WORKER_COVERAGE:
            coverage.setdefault(key, 0)
        self._rows: dict[int, int] = {}  # request -> row in the last forward pass
        self._preempted: set[int] = set()

    def _count(self, key: str, n: int = 1) -> None:
        if n:
            self.coverage[key] += n

    def note(self, observation: Observation) -> None:
        """Remember requests the engine preempted (any event)."""
        self._preempted.update(observation.preempted)

    def schedule(self, observation: Observation, fed: Sequence[Any] | None) -> None:
        """One ``schedule()`` and the forward pass the runner ran for it (if any)."""
        self._count("resumed_with_history",
                    sum(1 for entry in observation.payload if entry[1] == RESUMED and entry[3]))
        self._count("partial_prefill_discarded", sum(1 for _, _, position in observation.scheduled if not position))
        if fed is None:
            return
        rows = {req_index(f.req_id): i for i, f in enumerate(fed)}
        self._count("batch_reordered", int(any(self._rows.get(r, i) != i for r, i in rows.items())))
        self._count("fed_after_preemption", sum(1 for r in rows if r in self._preempted))
        self._rows = rows

    def encoder(self, forwards: Sequence[tuple[tuple[int, ...], tuple[int, ...]]]) -> None:
        """Per forward pass: (items the encoder computed, items whose embeddings were fed)."""
        self.coverage.setdefault(ENCODER_WORKER_COVERAGE[0], 0)
        self._count(ENCODER_WORKER_COVERAGE[0], sum(1 for encoded, read in forwards if set(read) - set(encoded)))

    def payload_drops(self, n: int) -> None:
        """Images whose payload a step's ``encoder_input_updates`` dropped (MRV2)."""
        self.coverage.setdefault(MRV2_ENCODER_WORKER_COVERAGE[0], 0)
        self._count(MRV2_ENCODER_WORKER_COVERAGE[0], n)
