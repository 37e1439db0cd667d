"""Documented vLLM bugs (docs/findings_vllm.md) a campaign reaches only behind a named switch
(``--known-bug``), and how a divergence is recognised as one of them.

``reset-with-deferral`` (finding V1) shows as vLLM raising (``run.known_bug``), and so does
``reset-with-session`` (finding V8: the blocks a streaming-input session holds between turns);
``priority-undo-keeps-hash`` (finding V4) as extra prefix-cache hashes in vLLM, owned by a
request whose scheduling in the same ``schedule()`` was taken back.
"""
from __future__ import annotations

from asyncspec.spec import events as ev

from asyncspec.statemachine_tests.core.harness import RunResult
from asyncspec.statemachine_tests.scheduler.profiles import Profile, switches_on
from asyncspec.statemachine_tests.scheduler.fuzz_example import known_bug

UNDO_FIELDS = frozenset({"cached_blocks", "free_blocks", "kv_events"})
"""What a kept hash may change at the undoing ``schedule()``: the hashes, where the freed block went
in the free queue (a hashed block goes to the back, an unhashed one to the front), and the KV cache
events, which report the victims' kept hashes (stored, and evicted again by the same pass)."""


def priority_undo_keeps_hash(result: RunResult) -> bool:
    """Finding V4: the first difference is vLLM holding hashes the spec does not, all of them
    owned by requests preempted at that ``schedule()``, which took back a victim's scheduling
    (``preempted_scheduled_undone``); nothing else differs but the free queue's order and the KV cache
    events of the victims' blocks."""
    row = result.rows[-1]
    fields = {d.field for d in row.differences}
    if ev.PREEMPTED_SCHEDULED_UNDONE not in row.spec_events or "cached_blocks" not in fields:
        return False
    if not fields <= UNDO_FIELDS:
        return False
    spec = set(row.expected.cached_blocks)
    vllm = set(row.actual.cached_blocks)
    extra = vllm - spec
    victims = set(row.actual.preempted)
    if not (spec <= vllm and bool(extra) and all(owner in victims for _, owner, _ in extra)):
        return False
    changed = set(row.expected.kv_events) ^ set(row.actual.kv_events)  # the KV cache events of those hashes
    return all(owner in victims for _, owner, _ in changed)


def classify(result: RunResult, profile: Profile) -> str | None:
    """The documented vLLM bug ``result``'s divergence is, if ``profile``'s switch for it is on."""
    on = switches_on(profile)
    if "reset-with-session" in on and known_bug(result) == "reset-with-deferral" and result.workload.resumable:
        return "reset-with-session"  # finding V8: the same RuntimeError, blocks held by a streaming session
    if "reset-with-deferral" in on and known_bug(result) == "reset-with-deferral":
        return "reset-with-deferral"
    if "priority-undo-keeps-hash" in on and priority_undo_keeps_hash(result):
        return "priority-undo-keeps-hash"
    return None
