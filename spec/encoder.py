"""Encoder inputs (multimodal items) and the encoder cache manager of vLLM 0.33.0.

A request may carry images (``SpecConfig.images``: request, offset, length, item):
prompt positions ``[offset, offset + length)`` whose embeddings come from an
encoder, not from token ids.  ``item`` is the content's identity (vLLM's
``MultiModalFeatureSpec.identifier``, a hash): requests that share an item share
one encoder-cache entry.  The scheduler half (``vllm/v1/core/encoder_cache_manager.py``
``EncoderCacheManager``, ``Scheduler._try_schedule_encoder_inputs``):

* ``schedule()``: a request whose step range ``[C, C + n)`` overlaps an image
  either finds its item cached (``check_and_update_cache``: a reference, and a
  freeable entry is taken back) or allocates it (``can_allocate``, evicting the
  oldest *freeable* entries, whose items go to the worker in this step's
  ``free_encoder_mm_hashes``), within the cache size and the step's encoder
  compute budget; when neither works, ``n`` is cut to ``offset - C`` (to 0 once
  ``C >= offset``).  A waiting request whose KV allocation then fails gives its
  references back (``encoder_cache_manager.free``).
* ``update_from_output``: a processed request's image whose last position is
  below ``C - H`` is released (``_free_encoder_inputs``): only *freeable*, still
  cached until an allocation needs its room.  Preemption and finish release all
  of a request's images.

The worker half is ghost state: the items the worker holds (``worker_encoder``),
updated in step order (the step's frees first, then its encoder computations,
as ``GPUModelRunner._update_states`` then ``_execute_mm_encoder``), and
``encoder_miss``, set when a step reads an image position whose item the worker
does not hold (``_gather_mm_embeddings``' "Encoder cache miss").  Modelled
without prefix caching's cross-request hits on image blocks, speculative
decoding, KV connectors, sliding windows and streaming sessions, and with each
item at most once per request (``spec/config.py`` refuses the rest).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

from asyncspec.spec import events as ev
from asyncspec.spec.cites import models
from asyncspec.spec.config import SpecConfig
from asyncspec.spec.draft import Draft
from asyncspec.spec.state import EngineState, Step

ECM = "vllm.v1.core.encoder_cache_manager.EncoderCacheManager"
SCHED = "vllm.v1.core.sched.scheduler.Scheduler"


class Image(NamedTuple):
    """One encoder input of a request (``MultiModalFeatureSpec``: its ``PlaceholderRange`` and identifier)."""

    offset: int  # first prompt position it fills
    length: int  # positions (= embeddings: no is_embed mask) it fills
    item: int  # its content's identity (mm_hash); equal items share one cache entry


def images_of(cfg: SpecConfig, req: int) -> tuple[Image, ...]:
    """Request ``req``'s images by offset: ``input_id`` is the index in this tuple (``Request.mm_features``)."""
    return tuple(sorted(Image(o, n, item) for r, o, n, item in cfg.images if r == req))


def item_length(cfg: SpecConfig, item: int) -> int:
    """Embeddings of ``item`` (``EncoderCacheManager.num_embeds_by_hash``)."""
    return next(n for _, _, n, i in cfg.images if i == item)


def overlaps(image: Image, start: int, num_tokens: int) -> bool:
    """``get_mm_features_in_window``: the image meets the step range ``[start, start + num_tokens)``."""
    return image.offset < start + num_tokens and image.offset + image.length > start


@dataclass
class EncoderPass:
    """What one ``schedule()`` call keeps about encoder inputs (locals of ``Scheduler.schedule``)."""

    budget: int  # encoder_compute_budget left in this step (max_num_encoder_input_tokens)
    freed: list[int] = field(default_factory=list)  # EncoderCacheManager.freed: items evicted in this pass
    scheduled: dict[int, list[int]] = field(default_factory=dict)  # scheduled_encoder_inputs: req -> input ids


def new_pass(cfg: SpecConfig) -> EncoderPass | None:
    """The pass of a ``schedule()`` call; None without images (the code below never runs)."""
    return EncoderPass(cfg.encoder_compute_budget) if cfg.images else None


# ------------------------------------------------------------- the cache manager

def free_slots(cfg: SpecConfig, d: Draft) -> int:
    """``num_free_slots``: the cache size less every cached entry (freeable ones included)."""
    return cfg.encoder_cache_size - sum(item_length(cfg, i) for i in d.enc_entries)


def freeable_slots(cfg: SpecConfig, d: Draft) -> int:
    """``num_freeable_slots``: free slots plus those of the freeable entries."""
    return free_slots(cfg, d) + sum(item_length(cfg, i) for i in d.enc_freeable)


def _referenced(cfg: SpecConfig, d: Draft, item: int) -> bool:
    """``cached[item]`` is non-empty: some request holds an input of ``item`` (``request_cached_ids``)."""
    return any(images_of(cfg, r)[i].item == item for r, ids in enumerate(d.enc_inputs) for i in ids)


def _hold(d: Draft, req: int, input_id: int) -> None:
    """``_add_cached_input_id``: ``req`` holds its input ``input_id``."""
    d.enc_inputs[req] = tuple(sorted({*d.enc_inputs[req], input_id}))


@models(f"{ECM}.check_and_update_cache")
def check_and_update_cache(cfg: SpecConfig, d: Draft, req: int, input_id: int) -> bool:
    """The item is cached: ``req`` references it, and a freeable entry stops being freeable."""
    item = images_of(cfg, req)[input_id].item
    if item not in d.enc_entries:
        return False
    if item in d.enc_freeable:
        d.enc_freeable.remove(item)
        d.emit(ev.ENCODER_CACHE_REVIVED)
    _hold(d, req, input_id)
    return True


@models(f"{ECM}.can_allocate")
def can_allocate(cfg: SpecConfig, d: Draft, p: EncoderPass, length: int, budget: int, planned: int) -> bool:
    """Room for ``length`` more embeddings (``planned`` already chosen for this request), evicting
    the oldest freeable entries if the free slots are short; within the compute ``budget``."""
    if length > budget:
        return False
    need = length + planned
    if need <= free_slots(cfg, d):
        return True
    if need > freeable_slots(cfg, d):
        return False
    while need > free_slots(cfg, d):
        item = d.enc_freeable.pop(0)
        d.enc_entries.remove(item)
        p.freed.append(item)
        d.emit(ev.ENCODER_CACHE_EVICTION)
    return True


@models(f"{ECM}.allocate", f"{SCHED}._allocate_encoder_inputs")
def allocate(cfg: SpecConfig, d: Draft, req: int, input_ids: list[int]) -> None:
    """The request's inputs to compute take their cache entries."""
    for input_id in input_ids:
        item = images_of(cfg, req)[input_id].item
        if item not in d.enc_entries:
            d.enc_entries = sorted({*d.enc_entries, item})
        _hold(d, req, input_id)


@models(f"{ECM}.free_encoder_input")
def free_encoder_input(cfg: SpecConfig, d: Draft, req: int, input_id: int) -> None:
    """``req`` lets go of its input; an entry no request references becomes freeable (kept cached)."""
    d.enc_inputs[req] = tuple(i for i in d.enc_inputs[req] if i != input_id)
    item = images_of(cfg, req)[input_id].item
    if item in d.enc_entries and item not in d.enc_freeable and not _referenced(cfg, d, item):
        d.enc_freeable.append(item)


@models(f"{ECM}.free")
def free_request(cfg: SpecConfig, d: Draft, req: int) -> None:
    """Preemption, finish, a failed admission: every input ``req`` holds, in input order."""
    if not cfg.images:
        return
    for input_id in d.enc_inputs[req]:
        free_encoder_input(cfg, d, req, input_id)


# ------------------------------------------------------------- the scheduler's side

@models(f"{SCHED}._try_schedule_encoder_inputs")
def try_schedule(cfg: SpecConfig, d: Draft, p: EncoderPass | None, req: int, num_computed: int,
                 num_new_tokens: int) -> tuple[int, list[int], int]:
    """The inputs ``req``'s step ``[num_computed, num_computed + num_new_tokens)`` must compute, and
    the tokens it may schedule: cut before the first image that is neither cached nor allocatable.
    Returns (tokens, input ids to compute, the budget left if the request is scheduled)."""
    if p is None or num_new_tokens == 0:
        return num_new_tokens, [], p.budget if p else 0
    budget, planned, to_compute = p.budget, 0, []
    for input_id, image in enumerate(images_of(cfg, req)):
        if not overlaps(image, num_computed, num_new_tokens):
            continue
        if check_and_update_cache(cfg, d, req, input_id):
            continue
        if not can_allocate(cfg, d, p, image.length, budget, planned):
            d.emit(ev.ENCODER_INPUT_BLOCKED)
            num_new_tokens = min(num_new_tokens, image.offset - num_computed) if num_computed < image.offset else 0
            break
        planned += image.length
        budget -= image.length
        to_compute.append(input_id)
    return num_new_tokens, to_compute, budget


@models(f"{SCHED}.schedule", f"{SCHED}._allocate_encoder_inputs")
def commit(cfg: SpecConfig, d: Draft, p: EncoderPass | None, req: int, to_compute: list[int], budget: int) -> None:
    """The request is scheduled: its inputs to compute are allocated and the budget is spent."""
    if p is None or not to_compute:
        return
    p.scheduled[req] = to_compute
    p.budget = budget
    if any(images_of(cfg, req)[i].item in p.freed for i in to_compute):  # get_freed_mm_hashes leaves it out
        d.emit(ev.ENCODER_EVICTED_REALLOCATED)
    allocate(cfg, d, req, to_compute)
    d.emit(ev.ENCODER_INPUT_SCHEDULED)


@models(f"{SCHED}.schedule")
def undo(cfg: SpecConfig, p: EncoderPass | None, req: int) -> None:
    """A request preempted after it was scheduled in this step (priority policy): its encoder
    inputs leave ``scheduled_encoder_inputs`` and their budget comes back; their cache entries
    stay allocated (vLLM 0.33.0 gives them back only through ``_preempt_request``'s free)."""
    if p is None or req not in p.scheduled:
        return
    p.budget += sum(images_of(cfg, req)[i].length for i in p.scheduled.pop(req))


@models(f"{SCHED}._free_encoder_inputs", f"{SCHED}.update_from_output", pr=45347)
def free_processed(cfg: SpecConfig, d: Draft, req: int) -> None:
    """After a step's output: each image ``req`` holds that lies wholly below ``C - H``."""
    if not cfg.images:
        return
    c = d.counters[req]
    done = c.num_computed_tokens - c.num_output_placeholders
    images = images_of(cfg, req)
    for input_id in d.enc_inputs[req]:
        if images[input_id].offset + images[input_id].length <= done:
            free_encoder_input(cfg, d, req, input_id)
            d.emit(ev.ENCODER_INPUT_RELEASED)
            if any(e.req == req and overlaps(images[input_id], e.start_position, e.num_tokens)
                   for step in d.batch_queue for e in step.entries):
                d.emit(ev.ENCODER_RELEASED_IN_FLIGHT)


@models(f"{ECM}.get_freed_mm_hashes", pr=52482)
def freed_hashes(d: Draft, p: EncoderPass) -> tuple[int, ...]:
    """``free_encoder_mm_hashes`` of the step: the pass's evictions not allocated again in it."""
    return tuple(i for i in p.freed if i not in d.enc_entries)


@models("vllm.v1.worker.gpu_model_runner.GPUModelRunner._update_states",
        "vllm.v1.worker.gpu_model_runner.GPUModelRunner._execute_mm_encoder",
        "vllm.v1.worker.gpu_model_runner.GPUModelRunner._gather_mm_embeddings")
def finish_step(cfg: SpecConfig, d: Draft, p: EncoderPass | None, step: Step) -> Step:
    """The step as the worker runs it, in order: it drops the freed items, computes the scheduled
    ones, then reads every image position it covers (ghost ``encoder_miss`` if one is not held)."""
    if p is None:
        return step
    freed = freed_hashes(d, p)
    inputs = tuple(sorted((r, tuple(ids)) for r, ids in p.scheduled.items()))
    computed = {images_of(cfg, r)[i].item for r, ids in inputs for i in ids}
    d.worker_encoder = sorted((set(d.worker_encoder) - set(freed)) | computed)
    for e in step.entries:
        if any(overlaps(im, e.start_position, e.num_tokens) and im.item not in d.worker_encoder
               for im in images_of(cfg, e.req)):
            d.encoder_miss = True
            d.emit(ev.ENCODER_MISS)
    return step._replace(encoder_inputs=inputs, freed_encoder=freed)


def cache_usage(cfg: SpecConfig, s: EngineState) -> tuple[int, int]:
    """(embeddings the scheduler's cache holds, embeddings the worker holds)."""
    return (sum(item_length(cfg, i) for i in s.enc_entries), sum(item_length(cfg, i) for i in s.worker_encoder))


def step_encoder_embeds(cfg: SpecConfig, step: Step) -> int:
    """Embeddings a step computes (what the compute budget bounds)."""
    return sum(images_of(cfg, r)[i].length for r, ids in step.encoder_inputs for i in ids)


# ------------------------------------------------------------- properties (spec/properties.py lists them)

@models(f"{SCHED}._try_schedule_encoder_inputs", f"{ECM}.get_freed_mm_hashes",
        "vllm.v1.worker.gpu_model_runner.GPUModelRunner._gather_mm_embeddings")
def encoder_output_available(cfg: SpecConfig, s: EngineState) -> str | None:
    """Every step reads only image positions whose encoder output the worker holds when the step
    runs: computed by it or an earlier step, and not freed since (the ghost ``encoder_miss``)."""
    return "a step read an image whose encoder output the worker did not hold" if s.encoder_miss else None


@models(f"{ECM}.can_allocate", f"{ECM}.allocate", f"{SCHED}._try_schedule_encoder_inputs")
def encoder_cache_bounded(cfg: SpecConfig, s: EngineState) -> str | None:
    """The scheduler's cache and the worker's hold at most ``encoder_cache_size`` embeddings, and
    no in-flight step computes more than ``encoder_compute_budget``."""
    held, worker = cache_usage(cfg, s)
    if max(held, worker) > cfg.encoder_cache_size:
        return f"encoder cache holds {held} (worker {worker}) embeddings > encoder_cache_size {cfg.encoder_cache_size}"
    for step in s.batch_queue + ((s.deferred_step,) if s.deferred_step is not None else ()):
        if step_encoder_embeds(cfg, step) > cfg.encoder_compute_budget:
            return (f"a step computes {step_encoder_embeds(cfg, step)} embeddings > encoder_compute_budget "
                    f"{cfg.encoder_compute_budget}")
    return None


def images_only(cfg: SpecConfig) -> bool:
    """The encoder properties apply to configs with images."""
    return bool(cfg.images)


# ------------------------------------------------- Model Runner V2's payloads (derived, no state)

Payloads = dict[int, frozenset[int]]
"""Per request installed on Model Runner V2 with images: the input ids whose data the worker still holds."""
PayloadUpdates = tuple[tuple[int, tuple[tuple[int, bool], ...]], ...]
"""A step's ``encoder_input_updates``: (request, ((input id, True: data sent again / False: dropped), ...))."""


@models(f"{SCHED}._get_encoder_input_updates")
def payload_updates(cfg: SpecConfig, before: EngineState, step: Step, installed: frozenset[int],
                    held: Payloads) -> tuple[Payloads, PayloadUpdates]:
    """What a ``schedule()`` from ``before`` tells Model Runner V2 about image data (every image carries
    data, none a shared-memory address): a request ``installed`` by the step (new or back from
    preemption: ``NewRequestData`` under MRV2) holds all its images again; then, for each request of
    the step still holding some, an image the step encodes that it no longer holds is sent again, and
    an image it holds, not encoded in the step, that ends at or below the confirmed progress
    ``start - max(H, in-flight tokens)`` (progress before this step, less what is still in flight)
    is dropped.  A pure function of the spec's state, its step and ``held`` (the harness keeps it per
    case): the checker's state does not carry it."""
    out = {r: ids for r, ids in held.items() if r not in installed}
    out.update({r: frozenset(range(len(images_of(cfg, r)))) for r in installed if images_of(cfg, r)})
    encoded = dict(step.encoder_inputs)
    updates: list[tuple[int, tuple[tuple[int, bool], ...]]] = []
    for e in step.entries:
        if e.req not in out:
            continue
        c, images = before.counters[e.req], images_of(cfg, e.req)
        encoding = set(encoded.get(e.req, ()))
        sent = encoding - out[e.req]
        confirmed = e.start_position - max(c.num_output_placeholders, c.num_in_flight_tokens)
        dropped = {i for i in out[e.req] - encoding if images[i].offset + images[i].length <= confirmed}
        out[e.req] = (out[e.req] | sent) - dropped
        if sent or dropped:
            updates.append((e.req, tuple(sorted([(i, True) for i in sent] + [(i, False) for i in dropped]))))
    return out, tuple(sorted(updates))
