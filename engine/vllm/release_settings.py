"""Release settings: where a supported vLLM release legitimately behaves otherwise than 0.33.0.

The spec models 0.33.0.  An older release that made a different design choice
(not a bug: a documented behaviour that a later release changed on purpose) would
diverge from it on every campaign and hide the divergences that matter.  Each such
difference is one named setting here, chosen from the probed capabilities
(``surfaces.py``), never by version number and never silently: the JSON's
``"vllm"`` object lists the settings in force (``vllm_report``), ``asyncspec
drift`` names the functions each one cites on both sides, and
``statemachine_tests/scheduler/vllm_observer.py`` applies them where the
difference is only in what is observable.

``ASYNCSPEC_RELEASE_SETTINGS=none`` turns every setting off (the raw comparison:
an older release then diverges where the setting covered it); a comma-separated
list of names keeps only those.  ``tests/engine/test_release_settings.py`` holds
each setting to a release with the other behaviour.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

from asyncspec.engine.vllm import surfaces

_SCHED = "vllm.v1.core.sched.scheduler.Scheduler"
_ASYNC = "vllm.v1.core.sched.async_scheduler.AsyncScheduler"
ENV = "ASYNCSPEC_RELEASE_SETTINGS"


@dataclass(frozen=True)
class ReleaseSetting:
    """One legitimate behaviour of older releases, and how the comparison takes it."""

    name: str
    capability: str
    """The probed capability whose absence turns it on (``surfaces.py``): 0.33.0's behaviour."""
    older: str
    """What the older release does, and why the comparison may take it."""
    reference_side: tuple[str, ...]
    """The 0.33.0 functions with the behaviour the spec models."""
    older_side: tuple[str, ...]
    """The older release's functions with the other behaviour."""
    releases: str
    """The supported releases that have the older behaviour."""

    def applies(self, present: bool) -> bool:
        """Whether the setting is on for a vLLM where ``capability`` is ``present``."""
        return not present


STOP_TRIM_KEEPS_COUNTERS = ReleaseSetting(
    name="stop-trim-keeps-counters",
    capability=surfaces.STOP_TRIM_ROLLBACK,
    older=("at a stop inside a step's accepted tokens, the tokens after the stop are trimmed but stay "
           "counted in num_computed_tokens (and, under async scheduling, in num_output_placeholders); "
           "the request has finished, so nothing reads them again (0.33.0 takes them back so that a "
           "resumable request resumes from the right place); the comparison subtracts the trimmed "
           "tokens from the finished request's two counters"),
    reference_side=(f"{_SCHED}._update_request_with_output",),
    older_side=(f"{_SCHED}._update_request_with_output", f"{_ASYNC}._update_request_with_output"),
    releases="0.30.0, 0.31.0, 0.32.0",
)

NULL_HEAD_IN_DEFERRED_FREES = ReleaseSetting(
    name="null-head-in-deferred-frees",
    capability=surfaces.TRIM_NULL_HEAD,
    older=("a sliding-window request's blocks (SingleTypeKVCacheManager.pop_blocks_for_free) start with the null "
           "blocks of its skipped prefix, so a deferred free lists them; BlockPool.free_blocks skips "
           "null blocks, so no block changes hands (0.33.0 trims them: kv_cache_utils.trim_null_head); "
           "the comparison drops the null block from vLLM's deferred frees"),
    reference_side=("vllm.v1.core.single_type_kv_cache_manager.SingleTypeKVCacheManager.pop_blocks_for_free",
                    "vllm.v1.core.kv_cache_utils.trim_null_head"),
    older_side=("vllm.v1.core.single_type_kv_cache_manager.SingleTypeKVCacheManager.pop_blocks_for_free",
                "vllm.v1.core.block_pool.BlockPool.free_blocks"),
    releases="0.30.0, 0.31.0, 0.32.0",
)

BLOCKED_IN_SKIPPED_WAITING = ReleaseSetting(
    name="blocked-in-skipped-waiting",
    capability=surfaces.ONE_WAITING_QUEUE,
    older=("a request that cannot be scheduled yet (a grammar still compiling, remote KV loading) waits "
           "in a queue of its own, Scheduler.skipped_waiting, which FCFS scheduling reads before "
           "waiting (0.31.0 keeps such requests in waiting and moved the requests holding KV to "
           "kv_holding_waiting); the comparison reads vLLM's waiting requests as skipped_waiting "
           "followed by waiting, the order its schedule() takes them in, so that what differs is the "
           "order itself (finding V6), not the queue's name"),
    reference_side=(f"{_SCHED}._enqueue_waiting_request", f"{_SCHED}.schedule"),
    older_side=(f"{_SCHED}._enqueue_waiting_request", f"{_SCHED}._select_waiting_queue_for_scheduling"),
    releases="0.30.0",
)

SYNC_DRAFTS_CACHE_AT_SCHEDULE = ReleaseSetting(
    name="sync-drafts-cache-at-schedule",
    capability=surfaces.SYNC_DRAFTS_CACHE_AT_DELIVERY,
    older=("with drafts under the synchronous scheduler, the full blocks a step's tokens complete get "
           "their prefix-cache hashes at the next schedule() (KVCacheManager.allocate_slots), not when "
           "the step's output is processed; the next schedule() runs the running requests before any "
           "admission looks the cache up, so no lookup sees the difference, only the observation "
           "between the two calls and the free queue's order if the request ends at that delivery; the "
           "spec takes it as a knob (Knobs.spec_decode_caches_at_delivery, off), as the vllm targets' "
           "oracle only"),
    reference_side=(f"{_SCHED}.update_from_output",),
    older_side=(f"{_SCHED}.update_from_output", "vllm.v1.core.kv_cache_manager.KVCacheManager.allocate_slots"),
    releases="0.30.0, 0.31.0, 0.32.0",
)

SETTINGS: tuple[ReleaseSetting, ...] = (
    STOP_TRIM_KEEPS_COUNTERS, NULL_HEAD_IN_DEFERRED_FREES, BLOCKED_IN_SKIPPED_WAITING,
    SYNC_DRAFTS_CACHE_AT_SCHEDULE)
"""Every release setting, in the order the JSON lists them."""


def _allowed() -> set[str] | None:
    """The names ``ASYNCSPEC_RELEASE_SETTINGS`` keeps (None: all)."""
    raw = os.environ.get(ENV)
    if raw is None:
        return None
    return {n.strip() for n in raw.split(",") if n.strip() and n.strip() != "none"}


def active() -> tuple[ReleaseSetting, ...]:
    """The settings in force for the vLLM this process imports (probes it once)."""
    allowed = _allowed()
    return tuple(s for s in SETTINGS
                 if (allowed is None or s.name in allowed) and s.applies(surfaces.has(s.capability)))


def active_names() -> list[str]:
    """``active()``'s names, for the JSON."""
    return [s.name for s in active()]


def is_on(setting: ReleaseSetting) -> bool:
    """Whether ``setting`` is in force here."""
    return setting in active()


def spec_extra(target: str) -> dict[str, object]:
    """What the spec oracle of ``target`` takes from the settings in force (``SpecConfig.extra``):
    only the vLLM targets consult the probe, so no other target imports vLLM."""
    if target not in ("vllm", "vllm-engine"):
        return {}
    return {"spec_decode_caches_at_delivery": False} if is_on(SYNC_DRAFTS_CACHE_AT_SCHEDULE) else {}


def unknown_names() -> list[str]:
    """Names in ``ASYNCSPEC_RELEASE_SETTINGS`` that no setting has (a typo to report)."""
    allowed = _allowed() or set()
    return sorted(allowed - {s.name for s in SETTINGS})
