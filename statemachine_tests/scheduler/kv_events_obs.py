"""KV cache events as a fuzz observation: what the ``vllm`` target records and what the spec implies.

With ``KVEventsConfig.enable_kv_cache_events`` vLLM's ``BlockPool`` queues a ``BlockStored`` when
``cache_full_blocks`` gives full blocks their hashes, a ``BlockRemoved`` per hash when
``_maybe_evict_cached_block`` takes a cached block back for a new allocation, and an
``AllBlocksCleared`` when ``reset_prefix_cache`` succeeds (vllm/v1/core/block_pool.py, vLLM 0.33.0);
``Scheduler.update_from_output`` drains the queue through ``KVCacheManager.take_events`` into its
publisher.  The ``vllm`` target swaps that publisher for a recorder, and each event's view is
what was published since the event began plus what is still queued, one entry per block hash:
``("stored" | "removed", request, block index)``, ``("cleared", -1, -1)``, sorted.

The spec has no event queue; what it has is each block's hash (``EngineState.block_hashes``:
the request and block index whose tokens it holds).  The expected events are derived from it:
a block that gains a hash is stored, one that loses it (or holds another) was removed, and a
``reset_prefix_cache`` that succeeds (no ``reset_prefix_cache_failed``) is one clear and nothing
else.  Both sides are compared as the net change per hash within one event (``net``): a hash
evicted and stored again by the same ``schedule()`` (a preempted request re-admitted onto a block
its own cached hash was evicted from, a reset storm recomputing a prompt) shows in vLLM's queue as
a removal and a store, where the spec's hashes show no change; what the comparison still sees is a
hash whose presence changed without its event, an event for a hash that did not change, or a
store counted twice.  So a store or eviction vLLM does not report, or reports for another block,
diverges; a removal and a store of the same hash in one event are not told apart from neither.
"""
from __future__ import annotations

from typing import Any

from asyncspec.spec import events as ev
from asyncspec.spec.state import EngineState

KvEvent = tuple[str, int, int]
CLEARED: KvEvent = ("cleared", -1, -1)


def net(events: list[KvEvent]) -> tuple[KvEvent, ...]:
    """``events`` as the net change per hash, sorted: a hash stored n times more than removed
    shows as n stores, one removed more often as that many removals; other entries stay."""
    balance: dict[tuple[int, int], int] = {}
    out: list[KvEvent] = []
    for kind, req, index in events:
        if kind in ("stored", "removed"):
            balance[(req, index)] = balance.get((req, index), 0) + (1 if kind == "stored" else -1)
        else:
            out.append((kind, req, index))
    for (req, index), n in balance.items():
        out += [("stored" if n > 0 else "removed", req, index)] * abs(n)
    return tuple(sorted(out))


class EventRecorder:
    """Stands in for the scheduler's ``EventPublisher`` (vllm/distributed/kv_events.py): keeps every batch."""

    def __init__(self) -> None:
        self.events: list[Any] = []

    def publish(self, events: Any) -> None:
        self.events.extend(events.events)

    def shutdown(self) -> None:
        pass


class VllmKvEvents:
    """The ``vllm`` target's side: the recorder installed on ``scheduler`` and the events of one event."""

    def __init__(self, scheduler: Any, requests: dict[int, Any]) -> None:
        self.sched = scheduler
        self.requests = requests  # every arrived Request, by index (the observer's)
        self.recorder = EventRecorder()
        scheduler.kv_event_publisher = self.recorder
        self._mark = 0

    def _all(self) -> list[Any]:
        return self.recorder.events + list(self.sched.kv_cache_manager.block_pool.kv_event_queue)

    def begin_event(self) -> None:
        self._mark = len(self._all())

    def view(self) -> tuple[KvEvent, ...]:
        """The events since ``begin_event``, normalized (a hash no request has shows as request -1) and netted."""
        from vllm.distributed.kv_events import AllBlocksCleared, BlockRemoved, BlockStored
        from vllm.v1.core.kv_cache_utils import maybe_convert_block_hash

        owner = {maybe_convert_block_hash(h): (i, k) for i, r in self.requests.items()
                 for k, h in enumerate(r.block_hashes)}
        out: list[KvEvent] = []
        for event in self._all()[self._mark:]:
            if isinstance(event, AllBlocksCleared):
                out.append(CLEARED)
            elif isinstance(event, (BlockStored, BlockRemoved)):
                kind = "stored" if isinstance(event, BlockStored) else "removed"
                out += [(kind, *owner.get(h, (-1, -1))) for h in event.block_hashes]
            else:
                out.append((type(event).__name__, -1, -1))
        return net(out)


def spec_view(before: EngineState, after: EngineState, events: frozenset[str], reset: bool) -> tuple[KvEvent, ...]:
    """The events the spec's transition ``before`` -> ``after`` implies (``reset``: it was a
    ``reset_prefix_cache``; ``events``: the spec events it exercised)."""
    if reset and ev.RESET_PREFIX_CACHE_FAILED not in events:
        return (CLEARED,)
    out: list[KvEvent] = []
    for old, new in zip(before.block_hashes, after.block_hashes):
        if old == new:
            continue
        if old is not None:
            out.append(("removed", old.req, old.block_index))
        if new is not None:
            out.append(("stored", new.req, new.block_index))
    return net(out)
