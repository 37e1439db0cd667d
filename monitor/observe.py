"""vLLM's side of every field the monitor compares (names as ``checker/window_fields.py``).

Reads a live ``Scheduler`` (vllm/v1/core/sched/scheduler.py): the ``Request``
counters (vllm/v1/request.py), the ``waiting`` / ``running`` queues, the block
pool's free queue (vllm/v1/core/block_pool.py, ``FreeKVCacheBlockQueue``) and
the ``SchedulerOutput`` payload (vllm/v1/core/sched/output.py).  Block ids are
the spec's: vLLM's minus its null block 0.  Request ids are the twin's indices
(``-1`` for a request the twin does not know).
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from asyncspec.checker.window_fields import NEW, RESUMED, RUNNING, PayloadEntry, as_json, spec_value
from asyncspec.spec import request as rq
from asyncspec.spec.request import STATUS_NAMES
from asyncspec.statemachine_tests.scheduler.vllm_observer import VLLM_STATUS

from asyncspec.monitor.twin import SpecTwin

COUNTERS = ("status", "num_output_tokens", "num_computed_tokens", "num_output_placeholders",
            "num_in_flight_tokens", "num_stale_output_tokens", "drop_stale_output", "is_prefill_chunk",
            "last_sched_seq")
"""The ``Request`` counters compared for each request a call touched (``spec/request.py``)."""

QUEUE_FIELDS = ("waiting", "running", "num_free_blocks", "sched_step_seq", "processed_step_seq")


def _blocks(groups: Any) -> tuple[int, ...]:
    return () if groups is None else tuple(int(b) - 1 for b in groups[0])


def engine_payload(so: Any, index_of: Mapping[str, int]) -> tuple[PayloadEntry, ...]:
    """A ``SchedulerOutput``'s payload as ``window_fields.spec_payload`` computes it."""
    out: list[PayloadEntry] = [
        (index_of.get(n.req_id, -1), NEW, int(n.num_computed_tokens), len(n.prompt_token_ids or ()),
         _blocks(n.block_ids))
        for n in so.scheduled_new_reqs
    ]
    cached = so.scheduled_cached_reqs
    for i, req_id in enumerate(cached.req_ids):
        kind = RESUMED if req_id in cached.resumed_req_ids else RUNNING
        out.append((index_of.get(req_id, -1), kind, int(cached.num_computed_tokens[i]),
                    len(cached.all_token_ids.get(req_id, ())), _blocks(cached.new_block_ids[i])))
    return tuple(sorted(out))


class EngineReader:
    """Reads one scheduler's values by field name."""

    def __init__(self, scheduler: Any, twin: SpecTwin) -> None:
        self.sched = scheduler
        self.twin = twin
        self.by_id: dict[str, Any] = {}  # vLLM Request per id the twin holds, kept after it finishes
        manager = scheduler.kv_cache_manager
        self._pool: Any = manager.block_pool
        self._blocks: Any = manager.coordinator.single_type_managers[0].req_to_blocks

    def value(self, name: str, payload: tuple[PayloadEntry, ...] = ()) -> Any:
        if name.startswith("r") and "." in name:
            head, attr = name.split(".", 1)
            return self._request_value(int(head[1:]), attr)
        index_of, sched = self.twin.index_of, self.sched
        if name == "waiting":
            return [index_of.get(r.request_id, -1) for r in sched.waiting]
        if name == "running":
            return [index_of.get(r.request_id, -1) for r in sched.running]
        if name == "num_free_blocks":
            return int(self._pool.get_num_free_blocks())
        if name == "free_blocks":
            return [b.block_id - 1 for b in self._pool.free_block_queue.get_all_free_blocks()]
        if name == "payload":
            return as_json(payload)
        return int(getattr(sched, name))

    def request(self, index: int) -> Any:
        """The vLLM ``Request`` of twin index ``index`` (None if unknown)."""
        ids = self.twin.ids
        return self.by_id.get(ids[index]) if 0 <= index < len(ids) else None

    def prune(self) -> None:
        """Forget the requests the twin has compacted away."""
        self.by_id = {rid: self.by_id[rid] for rid in self.twin.ids if rid in self.by_id}

    def _request_value(self, index: int, attr: str) -> Any:
        r = self.request(index)
        if r is None:
            return None
        if attr == "status":
            return VLLM_STATUS.get(r.status.name, r.status.name)
        if attr == "block_table":
            rid = r.request_id
            live = rid in self.sched.requests
            return [b.block_id - 1 for b in self._blocks.get(rid, ())] if live else []
        value = getattr(r, attr)
        return bool(value) if isinstance(value, bool) else int(value)

    def differences(self, queue_names: Iterable[str], indices: Iterable[int], full: bool,
                    spec_payload: tuple[PayloadEntry, ...] | None = None,
                    engine_payload_: tuple[PayloadEntry, ...] = ()) -> list[dict[str, Any]]:
        """``{"field", "spec", "engine"}`` for each field whose two values differ.

        Requests are compared as one tuple each (the fast path); a request that
        differs is expanded into its named fields.  A finished request is compared
        on its status and output count only; ``full`` adds block tables.
        """
        out = []
        s = self.twin.state
        for name in queue_names:
            spec, engine = spec_value(s, name), self.value(name)
            if spec != engine:
                out.append({"field": name, "spec": spec, "engine": engine})
        if spec_payload is not None and spec_payload != engine_payload_:
            out.append({"field": "payload", "spec": as_json(spec_payload), "engine": as_json(engine_payload_)})
        for index in sorted(set(indices)):
            if self._request_differs(index, full):
                for name in request_fields((index,), full):
                    spec, engine = spec_value(s, name), self.value(name)
                    if spec != engine and self._comparable(index, name):
                        out.append({"field": name, "spec": spec, "engine": engine})
        return out

    def _request_differs(self, index: int, full: bool) -> bool:
        s, r = self.twin.state, self.request(index)
        if r is None or not 0 <= index < len(s.counters):
            return True
        c = s.counters[index]
        status = VLLM_STATUS.get(r.status.name, r.status.name)
        if status != STATUS_NAMES[c.status] or r.num_output_tokens != c.num_output_tokens:
            return True
        if c.status > rq.PREEMPTED:  # finished: nothing else is compared
            return False
        if (r.num_computed_tokens, r.num_output_placeholders, r.num_in_flight_tokens, r.num_stale_output_tokens,
                bool(r.drop_stale_output), bool(r.is_prefill_chunk), r.last_sched_seq) != (
                c.num_computed_tokens, c.num_output_placeholders, c.num_in_flight_tokens,
                c.num_stale_output_tokens, bool(c.drop_stale_output), bool(c.is_prefill_chunk), c.last_sched_seq):
            return True
        return full and self._request_value(index, "block_table") != list(s.block_tables[index])

    def _comparable(self, index: int, name: str) -> bool:
        """A finished request is compared on its status and output count only."""
        c = self.twin.state.counters[index] if 0 <= index < len(self.twin.state.counters) else None
        return c is None or c.status <= rq.PREEMPTED or name.endswith((".status", ".num_output_tokens"))


def request_fields(indices: Iterable[int], full: bool) -> list[str]:
    """The per-request field names for ``indices`` (with block tables when ``full``)."""
    attrs = COUNTERS + (("block_table",) if full else ())
    return [f"r{i}.{a}" for i in sorted(set(indices)) for a in attrs]
