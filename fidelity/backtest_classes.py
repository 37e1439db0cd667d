"""The hand-kept classification of the divergence buckets older vLLM releases show (``asyncspec backtest``).

Whether a bucket is a bug of that release, fixed later, or behaviour the
release legitimately had is a person's judgement, made from the shrunk trace
and the two releases' source.  Each entry names the bucket by its exact
signature (``statemachine_tests/core/buckets.py``) and the releases it was
judged on; ``backtest`` reads this table and calls a bucket it does not list
``unclassified``.

* ``bug-fixed-later``: the spec is right, the release is wrong; ``fixed_in``
  is the first release without it, ``functions`` the vLLM functions whose
  change removed it (``drift`` between the two releases lists them), and
  ``finding`` its write-up in ``docs/findings_vllm.md``;
* ``older-behaviour``: a documented behaviour a later release changed on
  purpose; ``release_setting`` names the setting that covers it
  (``engine/vllm/release_settings.py``), so it shows only with
  ``ASYNCSPEC_RELEASE_SETTINGS=none`` (``backtest --raw``).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Kind = Literal["bug-fixed-later", "older-behaviour"]
KINDS: tuple[str, ...] = ("bug-fixed-later", "older-behaviour", "unclassified")

_SCHED = "vllm.v1.core.sched.scheduler.Scheduler"


@dataclass(frozen=True)
class Classification:
    """One judged bucket."""

    signatures: tuple[str, ...]
    releases: tuple[str, ...]
    classification: Kind
    why: str
    fixed_in: str
    """The first release with 0.33.0's behaviour."""
    upstream_change: str
    """The vLLM change, in a line."""
    functions: tuple[str, ...]
    release_setting: str = ""
    finding: str = ""


OLDER = ("0.30.0", "0.31.0", "0.32.0")

TABLE: tuple[Classification, ...] = (
    Classification(
        signatures=("priority | schedule | scheduled [depth=2, policy=priority]",),
        releases=OLDER,
        classification="bug-fixed-later",
        why=("under priority scheduling, a running request that preempts itself (the lowest priority, "
             "short of blocks) ends the running loop: the higher-priority requests behind it, which "
             "its freed blocks would fit, wait a step"),
        fixed_in="0.33.0",
        upstream_change=("Scheduler.schedule: a priority request that preempted itself moves on to the "
                         "next running request instead of ending the loop"),
        functions=(f"{_SCHED}.schedule",),
        finding="V5",
    ),
    Classification(
        signatures=("spec-decode | deliver | r*.num_computed_tokens [depth=1, spec-decode]",
                    "structured-output | deliver | r*.num_computed_tokens [depth=1, spec-decode]",
                    "structured-output | deliver | r*.num_computed_tokens [depth=2, spec-decode]",
                    "spec-decode | deliver | r*.num_computed_tokens [depth=2, spec-decode]",
                    *(f"v1+spec-decode | deliver | r*.num_computed_tokens [depth={d}, prefix-caching, "
                      "reset-prefix-cache, spec-decode]" for d in (1, 2))),
        releases=OLDER,
        classification="older-behaviour",
        why=("a stop inside a step's accepted drafts trims the tokens after it; the finished request "
             "keeps them in num_computed_tokens (and num_output_placeholders)"),
        fixed_in="0.33.0",
        upstream_change=("Scheduler._update_request_with_output takes the trimmed tokens back (for "
                         "resumable requests); AsyncScheduler's override folded into it"),
        functions=(f"{_SCHED}._update_request_with_output",),
        release_setting="stop-trim-keeps-counters",
    ),
    Classification(
        signatures=tuple(f"v1+spec-decode | deliver | {field} [depth=1, prefix-caching, reset-prefix-cache, "
                         "spec-decode]" for field in ("cached_blocks", "free_blocks")),
        releases=OLDER,
        classification="older-behaviour",
        why=("with drafts under the synchronous scheduler, a step's newly full blocks get their prefix-cache "
             "hashes at the next schedule(), not at delivery (and a request that ends at that delivery "
             "frees them unhashed, to the front of the free queue)"),
        fixed_in="0.33.0",
        upstream_change="Scheduler.update_from_output caches the blocks of a running request's fresh output "
                        "when drafts are on (cache_blocks at delivery)",
        functions=(f"{_SCHED}.update_from_output",),
        release_setting="sync-drafts-cache-at-schedule",
    ),
    Classification(
        signatures=("hybrid | deliver | deferred_frees [depth=2, defer-block-free, sliding-window]",),
        releases=OLDER,
        classification="older-behaviour",
        why=("a sliding-window request's deferred free lists the null blocks of its skipped prefix, "
             "which BlockPool.free_blocks passes over"),
        fixed_in="0.33.0",
        upstream_change="kv_cache_utils.trim_null_head: a request's blocks are freed without the null head",
        functions=("vllm.v1.core.single_type_kv_cache_manager.SingleTypeKVCacheManager.pop_blocks_for_free",
                   "vllm.v1.core.block_pool.BlockPool.free_blocks"),
        release_setting="null-head-in-deferred-frees",
    ),
    Classification(
        signatures=("structured-output | add_request | waiting [depth=2, structured-output]",
                    "structured-output | schedule | waiting [depth=2, structured-output]",
                    "structured-output | add_request | waiting [depth=1, structured-output]",
                    "structured-output | schedule | scheduled [depth=2, structured-output]",
                    *(f"v1 | add_request | waiting [depth={d}, prefix-caching, reset-prefix-cache, structured-output]"
                      for d in (1, 2, 3)),
                    *(f"v1+spec-decode | add_request | waiting [depth={d}, prefix-caching, reset-prefix-cache, "
                      "spec-decode, structured-output]" for d in (1, 2)),
                    *(f"v1 | {action} | waiting [depth={d}, prefix-caching, reset-prefix-cache]"
                      for action in ("reset_prefix_cache", "schedule") for d in (2, 3))),
        releases=("0.30.0",),
        classification="bug-fixed-later",
        why=("a request that arrives waiting for its grammar, or that schedule() skips (stale output in "
             "flight), is queued in Scheduler.skipped_waiting, which FCFS scheduling reads before waiting: "
             "it goes ahead of every request that arrived, or was preempted back, before it"),
        fixed_in="0.31.0",
        upstream_change=("Scheduler._enqueue_waiting_request keeps blocked requests in waiting, in arrival "
                         "order (requests holding KV go to kv_holding_waiting); skipped_waiting is gone"),
        functions=(f"{_SCHED}._enqueue_waiting_request", f"{_SCHED}.schedule"),
        finding="V6",
    ),
    Classification(
        signatures=("pause | pause_wait | has_requests [depth=2, remote-loads, connector=toy]",),
        releases=("0.31.0",),
        classification="bug-fixed-later",
        why=("under PAUSED_NEW a request holding KV blocks (its asynchronous load started) is not "
             "counted by get_num_unfinished_requests and not admitted by schedule(): a wait-mode "
             "pause completes with the load pending and the engine stops stepping"),
        fixed_in="0.32.0",
        upstream_change=("Scheduler.get_num_unfinished_requests counts kv_holding_waiting under PAUSED_NEW; "
                         "schedule() runs the waiting pass unless PAUSED_ALL, admitting KV-holding requests"),
        functions=(f"{_SCHED}.get_num_unfinished_requests", f"{_SCHED}.schedule"),
        finding="V9",
    ),
)
"""Every judged bucket."""


def classify(signature: str, version: str) -> Classification | None:
    """The judgement of ``signature`` on ``version``, if the table has one."""
    for entry in TABLE:
        if signature in entry.signatures and version in entry.releases:
            return entry
    return None
