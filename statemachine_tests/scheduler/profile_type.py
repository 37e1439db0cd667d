"""The fuzz ``Profile``: the values each workload setting may take, and the coverage categories.

``Profile`` is what ``profiles.workloads`` draws a ``Workload`` from; its methods say which
coverage categories (the dicts below, over ``spec/events.py``) a campaign of it reports and can
reach.  The named profiles, the default mix and the strategy are in ``profiles.py``, which
re-exports everything here.
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any

from asyncspec.spec import events as ev

from asyncspec.statemachine_tests.core.harness import LoopMode, StaleMode
from asyncspec.statemachine_tests.scheduler import workload_draw

COVERAGE: dict[str, tuple[str, ...]] = ev.FUZZ_COVERAGE
"""The reported coverage categories and the spec events (``spec/events.py``) each counts."""
PREFIX_CACHE_HIT = "prefix_cache_hit"  # reported too when the profile turns prefix caching on
SPEC_DECODE_COVERAGE: dict[str, tuple[str, ...]] = {
    "spec_decode_rejection": (ev.SPEC_DECODE_REJECTION,),
    "spec_decode_all_accepted": (ev.SPEC_DECODE_ALL_ACCEPTED,),
}
"""Reported when the profile turns speculative decoding on."""
STRUCTURED_OUTPUT_COVERAGE: dict[str, tuple[str, ...]] = {
    "structured_output_deferral": (ev.STRUCTURED_OUTPUT_DEFERRAL,),
}
"""Reported when the profile gives requests a grammar."""
HYBRID_COVERAGE: dict[str, tuple[str, ...]] = {
    "sliding_window_free": (ev.SLIDING_WINDOW_FREE,),
}
"""Reported when the profile draws a sliding-window KV cache group (hybrid)."""
POLICY_COVERAGE: dict[str, tuple[str, ...]] = {
    "priority_preemption": (ev.PRIORITY_PREEMPTION,),
    "preempted_scheduled_undone": (ev.PREEMPTED_SCHEDULED_UNDONE,),
}
"""Reported when the profile draws the priority policy."""
LONG_PROMPT_COVERAGE: dict[str, tuple[str, ...]] = {
    "long_prefill_capped": (ev.LONG_PREFILL_CAPPED,),
    "model_len_capped": (ev.MODEL_LEN_CAPPED,),
}
"""Reported when the profile draws long_prefill_token_threshold and max_model_len caps."""
CONNECTOR_COVERAGE: dict[str, tuple[str, ...]] = {
    "kv_async_load": (ev.KV_ASYNC_LOAD,),
    "kv_load_failed": (ev.KV_LOAD_FAILED,),
    "kv_send_delayed_free": (ev.KV_SEND_DELAYED_FREE,),
    "kv_abort_during_load": (ev.KV_ABORT_DURING_LOAD,),
}
"""Reported when the profile draws a KV connector."""
OFFLOAD_COVERAGE = ev.OFFLOAD_COVERAGE  # reported when the profile draws vLLM's OffloadingConnector
KV_RECOVERY_COVERAGE = ev.KV_RECOVERY_COVERAGE  # reported when the profile draws invalid-block reports of KV loads
PAUSE_COVERAGE: dict[str, tuple[str, ...]] = {
    "pause_in_flight": (ev.PAUSE_IN_FLIGHT,),
    "paused_output": (ev.PAUSED_OUTPUT,),
    "pause_held_waiting": (ev.PAUSE_HELD_WAITING,),
    "resumed_held": (ev.RESUMED_HELD,),
}
"""Reported when the profile draws ``pause_scheduler`` calls."""


@dataclass(frozen=True)
class Profile:
    """What the fuzzer may draw: every mode a category of coverage needs."""

    depths: tuple[int, ...] = (2, 1)
    sync_scheduler: bool = False  # depth 2 draws the plain Scheduler (pipeline parallelism 2, no async scheduling)
    block_sizes: tuple[int, ...] = (4, 16)
    num_blocks: tuple[int, ...] = (4, 6, 8, 12, 32)
    token_budgets: tuple[int, ...] = (16, 8, 32, 64)
    max_num_seqs: tuple[int, ...] = (4, 2)
    max_requests: int = 6
    min_requests: int = 1  # fewest requests drawn (see DEPTH3_PROFILE)
    max_output: int = 10
    chunked_prefill: tuple[bool, ...] = (True, False)
    prefix_caching: tuple[bool, ...] = (False,)
    defer_block_free: tuple[bool, ...] = (False, True)
    stale_modes: tuple[StaleMode, ...] = ("deliver", "drop")
    loops: tuple[LoopMode, ...] = ("exact", "free")
    aborts: tuple[bool, ...] = (True, False)
    resets: tuple[int, ...] = (0, 1, 2)
    reset_with_deferral: bool = False  # see docs/findings_vllm.md, finding 1
    priority_undo_keeps_hash: bool = False  # finding V4: priority draws prefix caching as well
    spec_tokens: tuple[int, ...] = (0,)  # k: draft positions per decode step
    structured_output: tuple[bool, ...] = (False,)  # True: some requests get a grammar
    min_prompt: int = 1  # shortest prompt drawn (see SPEC_DECODE_PROFILE)
    sliding_windows: tuple[int, ...] = (0,)  # W > 0: a sliding-window group beside the full one
    kv_connectors: tuple[str, ...] = ("",)  # "toy" / "nixl": a KV connector, loads (and toy sends) per request;
    # "offloading": vLLM's OffloadingConnector (kv_both), alone in a profile
    offload_prompt_only: tuple[bool, ...] = (True,)  # offloading: offload_prompt_only (False: decode blocks too)
    kv_failure_policies: tuple[str, ...] = ("recompute", "fail")
    kv_invalid_blocks: tuple[bool, ...] = (False,)  # True: the worker may report a load's blocks invalid
    policies: tuple[str, ...] = ("fcfs",)  # "priority": priorities 0..2 drawn per request
    long_prefill_thresholds: tuple[int, ...] = (0,)  # long_prefill_token_threshold
    long_prefill_adaptive: tuple[bool, ...] = (False,)
    model_len_caps: bool = False  # draw a max_model_len some requests' P + M exceed
    pauses: tuple[int, ...] = (0,)  # pause_scheduler calls allowed per example (any mode, each resumed)
    mix: tuple[Profile, ...] = ()  # a campaign over these profiles: each example draws one, then its workload
    streaming: bool = False  # some requests are streaming-input sessions with later inputs (spec/streaming.py)
    reset_with_session: bool = False  # docs/findings_vllm.md, V8: a reset while a session holds blocks raises
    images: bool = False  # requests carry images: encoder inputs and the encoder cache (spec/encoder.py)
    mamba_modes: tuple[str, ...] = ("",)  # "none" / "align": a Mamba state group beside attention (spec/mamba.py)
    stops: bool = False  # stop tokens, min_tokens, repetition detection (spec/stop.py; workload_draw.stops)

    def part(self, index: int) -> Profile:
        """The profile batch (shard) ``index`` of a campaign draws from: a mix's part
        ``index mod len(mix)``, with the campaign's known-bug switches; else this profile."""
        if not self.mix:
            return self
        return with_switches(self.mix[index % len(self.mix)], self)

    def prefix_options(self) -> tuple[bool, ...]:
        """Prefix caching as drawn: the priority-undo-keeps-hash switch adds it to a priority
        profile, half the time (docs/findings_vllm.md, V4); else ``prefix_caching``."""
        if self.priority_undo_keeps_hash and "priority" in self.policies and True not in self.prefix_caching:
            return (False, True)
        return self.prefix_caching

    def enabled_categories(self) -> list[str]:
        """The coverage categories this profile can reach (so a zero there is vacuous)."""
        if self.mix:
            union = {c for part in self.mix for c in part.enabled_categories()}
            return [c for c in self.reported_categories() if c in union]
        cats = ["chunked_prefill"] if True in self.chunked_prefill else []
        if self.max_depth() >= 2 and not self.sync_scheduler:  # placeholders: AsyncScheduler's
            cats += ["wasted_step", "max_tokens_guard"]
        if True in self.aborts:
            cats.append("abort_in_flight")
        if True in self.defer_block_free:
            cats.append("deferred_free")
        stale_possible = False in self.defer_block_free or any(self.resets)
        if stale_possible and self.max_depth() >= 2:
            cats.append("preemption_with_output_in_flight")
            if "deliver" in self.stale_modes:
                cats.append("stale_delivery")
            if "drop" in self.stale_modes or any(self.resets):
                cats.append("stale_drop")
        if True in self.prefix_options():
            cats.append(PREFIX_CACHE_HIT)
        if any(self.spec_tokens):
            cats += list(SPEC_DECODE_COVERAGE)
        if True in self.structured_output and 2 in self.depths and not self.sync_scheduler:
            cats += list(STRUCTURED_OUTPUT_COVERAGE)
        if any(self.sliding_windows):
            cats += list(HYBRID_COVERAGE)
        if self.offloads():
            cats += list(OFFLOAD_COVERAGE)
        elif any(self.kv_connectors):
            cats += [c for c in CONNECTOR_COVERAGE if c != "kv_abort_during_load" or True in self.aborts]
            cats += list(KV_RECOVERY_COVERAGE) if True in self.kv_invalid_blocks else []
        if "priority" in self.policies:
            cats += list(POLICY_COVERAGE)
        if any(self.long_prefill_thresholds):
            cats.append("long_prefill_capped")
        if self.model_len_caps:
            cats.append("model_len_capped")
        if any(self.pauses):
            cats += list(PAUSE_COVERAGE)
        cats += workload_draw.streaming_categories(self.streaming, self.max_depth())
        cats += workload_draw.encoder_categories(self.images, self.max_depth())
        cats += workload_draw.mamba_categories(self.mamba_modes, self.max_depth())
        return [c for c in self.reported_categories() if c in cats]

    def offloads(self) -> bool:
        """Whether this profile's connector is vLLM's OffloadingConnector (its own categories)."""
        return "offloading" in self.kv_connectors

    def max_depth(self) -> int:
        """The deepest batch queue drawn (a step in flight behind the scheduled one needs 2 or more)."""
        return max(self.depths)

    def reported_categories(self) -> list[str]:
        """Every category a summary of this profile lists."""
        if self.mix:
            return list(dict.fromkeys(c for part in self.mix for c in part.reported_categories()))
        cats = list(COVERAGE)
        if True in self.prefix_options():
            cats.append(PREFIX_CACHE_HIT)
        if any(self.spec_tokens):
            cats += list(SPEC_DECODE_COVERAGE)
        if True in self.structured_output:
            cats += list(STRUCTURED_OUTPUT_COVERAGE)
        if any(self.sliding_windows):
            cats += list(HYBRID_COVERAGE)
        if self.offloads():
            cats += list(OFFLOAD_COVERAGE)
        elif any(self.kv_connectors):
            cats += list(CONNECTOR_COVERAGE) + (list(KV_RECOVERY_COVERAGE) if True in self.kv_invalid_blocks else [])
        if "priority" in self.policies:
            cats += list(POLICY_COVERAGE)
        if any(self.long_prefill_thresholds) or self.model_len_caps:
            cats += list(LONG_PROMPT_COVERAGE)
        if any(self.pauses):
            cats += list(PAUSE_COVERAGE)
        cats += workload_draw.streaming_categories(self.streaming)
        cats += workload_draw.encoder_categories(self.images)
        cats += workload_draw.mamba_categories(self.mamba_modes)
        return cats


KNOWN_BUG_SWITCHES = {
    "reset-with-deferral": "reset_with_deferral",
    "priority-undo-keeps-hash": "priority_undo_keeps_hash",
    "reset-with-session": "reset_with_session",
}
"""``--known-bug`` name -> the ``Profile`` field it turns on (docs/findings_vllm.md, V1 and V4; how a
divergence is recognised as one: ``known_bugs.classify``)."""


def switches_on(profile: Profile) -> tuple[str, ...]:
    """The ``--known-bug`` switches ``profile`` has on, in ``KNOWN_BUG_SWITCHES`` order."""
    return tuple(name for name, attr in KNOWN_BUG_SWITCHES.items() if getattr(profile, attr))


def with_known_bugs(profile: Profile, names: Iterable[str]) -> Profile:
    """``profile`` with exactly the ``--known-bug`` switches ``names`` on (``KNOWN_BUG_SWITCHES``)."""
    chosen = set(names)
    switches: dict[str, Any] = {attr: name in chosen for name, attr in KNOWN_BUG_SWITCHES.items()}
    return replace(profile, **switches)


def with_switches(part: Profile, campaign: Profile) -> Profile:
    """A mix's ``part`` with the campaign's known-bug switches (they apply to every part)."""
    return with_known_bugs(part, switches_on(campaign))


