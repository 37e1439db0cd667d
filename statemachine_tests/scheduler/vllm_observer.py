"""One normalized view of a real vLLM scheduler, shared by the ``vllm`` and ``vllm-engine`` targets.

Block ids are normalized to the spec's: vLLM's pool has the null block 0 in
front, so vLLM block ``b`` is spec block ``b - 1`` (both free queues start in
id order and return freed blocks with the same front/back rule, so the orders
can be compared exactly).  Requests are named ``r0``, ``r1``, ...

On an older release the view applies the release settings in force
(``engine/vllm/release_settings.py``): each covers a difference that is only in
what is observable, and each is named in the JSON's ``"vllm"`` object.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from asyncspec.engine.vllm import release_settings
from asyncspec.statemachine_tests.core.harness import Observation, RequestObs

VLLM_STATUS = {
    "WAITING": "WAITING",
    # a grammar request waits in this status until the next schedule() promotes it
    # (its RecordingGrammar is ready at once; the spec does not model compilation)
    "WAITING_FOR_STRUCTURED_OUTPUT_GRAMMAR": "WAITING",
    "RUNNING": "RUNNING",
    "PREEMPTED": "PREEMPTED",
    "FINISHED_STOPPED": "STOPPED",
    "FINISHED_LENGTH_CAPPED": "LENGTH",
    "FINISHED_ABORTED": "ABORTED",
    "FINISHED_REPETITION": "REPETITION",  # repetition detection (check_stop)
    "WAITING_FOR_REMOTE_KVS": "WAITING_FOR_REMOTE_KVS",  # a KV connector's load is pending
    "FINISHED_ERROR": "ERROR",
    "WAITING_FOR_STREAMING_REQ": "WAITING_FOR_STREAMING_REQ",  # a paused streaming-input session
}

GrammarGap = Callable[[int, Any], bool]


def req_index(req_id: str) -> int:
    """``"r7"`` -> 7; the engine target's ``"r7.12"`` (request 7 of case 12) -> 7."""
    return int(req_id[1:].split(".", 1)[0])


class SchedulerObserver:
    """Reads a vLLM ``Scheduler``'s counters, queues and block pool as an ``Observation``."""

    def __init__(self, scheduler: Any, prefix_caching: bool, grammar_gap: GrammarGap | None = None) -> None:
        self.sched = scheduler
        self.prefix_caching = prefix_caching
        self.grammar_gap = grammar_gap
        self._pool: Any = scheduler.kv_cache_manager.block_pool
        managers = scheduler.kv_cache_manager.coordinator.single_type_managers
        self._manager: Any = managers[0]
        self._swa_manager: Any = managers[1] if len(managers) > 1 else None  # hybrid: the sliding-window or Mamba group
        self.requests: dict[int, Any] = {}  # every arrived Request object, kept after it finishes
        self._gone: dict[int, RequestObs] = {}  # requests vLLM has freed: their observation is final
        self._preemptions: dict[int, int] = {}
        on = release_settings.active()
        self._skipped_waiting = release_settings.BLOCKED_IN_SKIPPED_WAITING in on
        self._null_head = release_settings.NULL_HEAD_IN_DEFERRED_FREES in on
        self._stop_trim = release_settings.STOP_TRIM_KEEPS_COUNTERS in on
        self._trimmed: dict[int, tuple[int, int]] = {}  # request -> tokens trimmed at its stop: (C, H) kept
        self._before: dict[int, tuple[int, int, bool]] = {}  # request -> (returned, output tokens, fresh+H>0)

    def track(self, req: int, req_id: str | None = None) -> None:
        """Start observing request ``req`` (just added to the scheduler as ``req_id``)."""
        self.requests[req] = self.sched.requests[req_id if req_id is not None else f"r{req}"]

    def begin_event(self) -> None:
        """Mark the start of an event: ``preempted`` counts preemptions since here."""
        self._preemptions = {i: int(r.num_preemptions) for i, r in self.requests.items()}

    def before_delivery(self, returned: Mapping[int, int]) -> None:
        """The tokens the worker returns to each request in this ``update_from_output`` (for
        ``stop-trim-keeps-counters``: how many a stop trims is what did not become output)."""
        if not self._stop_trim:
            return
        self._before = {}
        for i, count in returned.items():
            r = self.requests.get(i)
            if r is None or r.is_finished() or int(r.num_stale_output_tokens) > 0:
                continue  # stale output never took C or H back, on any release
            self._before[i] = (count, int(r.num_output_tokens), int(r.num_output_placeholders) > 0)

    def after_delivery(self) -> None:
        """Record, per request that stopped in this delivery, the tokens its stop trimmed."""
        for i, (count, outputs, had_placeholders) in self._before.items():
            r = self.requests[i]
            trimmed = count - (int(r.num_output_tokens) - outputs)
            if r.is_finished() and trimmed > 0:
                self._trimmed[i] = (trimmed, trimmed if had_placeholders else 0)
        self._before = {}

    def _waiting(self) -> tuple[int, ...]:
        """The waiting requests in the order ``schedule()`` takes them (``blocked-in-skipped-waiting``)."""
        sched = self.sched
        queues = (sched.skipped_waiting, sched.waiting) if self._skipped_waiting else (sched.waiting,)
        return tuple(req_index(r.request_id) for q in queues for r in q)

    def _deferred_frees(self) -> tuple[tuple[int, tuple[int, ...]], ...]:
        """Each fence and the spec ids of the blocks freed at it (``null-head-in-deferred-frees``:
        without the null block, which ``BlockPool.free_blocks`` never pools)."""
        return tuple(
            (int(fence), tuple(sorted(b.block_id - 1 for b in blocks if not (self._null_head and b.is_null))))
            for fence, blocks in self.sched.deferred_frees
        )

    def observe(self, scheduled: tuple[Any, ...], delivered: tuple[Any, ...], finished: tuple[Any, ...],
                num_in_flight_steps: int, sampling_deferred: bool = False,
                payload: tuple[Any, ...] = ()) -> Observation:
        sched = self.sched
        preempted = tuple(i for i, r in sorted(self.requests.items())
                          if int(r.num_preemptions) > self._preemptions.get(i, 0))
        return Observation(
            requests=tuple((i, self.request_obs(i, r)) for i, r in sorted(self.requests.items())),
            waiting=self._waiting(),
            kv_holding=tuple(req_index(r.request_id) for r in sched.kv_holding_waiting),
            running=tuple(req_index(r.request_id) for r in sched.running),
            scheduled=scheduled,
            delivered=delivered,
            finished=finished,
            preempted=preempted,
            num_in_flight_steps=num_in_flight_steps,
            has_requests=bool(sched.has_requests()),
            free_blocks=tuple(b.block_id - 1 for b in self._pool.free_block_queue.get_all_free_blocks()),
            sched_step_seq=int(sched.sched_step_seq),
            processed_step_seq=int(sched.processed_step_seq),
            deferred_frees=self._deferred_frees(),
            cached_blocks=self._cached_blocks(),
            sampling_deferred=sampling_deferred,
            payload=payload,
            num_waiting_for_streaming_input=int(getattr(sched, "num_waiting_for_streaming_input", 0)),
        )

    def _cached_blocks(self) -> tuple[tuple[int, int, int], ...]:
        """(spec block id, request, block index) of every block holding a hash.

        A hash no arrived request has (never expected) shows as request -1.
        """
        if not self.prefix_caching:
            return ()
        from vllm.v1.core.kv_cache_utils import make_block_hash_with_group_id

        owner = {  # group 1: a Mamba group's cached states (spec/mamba.py), keyed like attention's blocks
            make_block_hash_with_group_id(h, group): (i, k)
            for i, r in self.requests.items()
            for k, h in enumerate(r.block_hashes)
            for group in (0, 1)
        }
        return tuple(
            (b.block_id - 1, *owner.get(b.block_hash, (-1, -1)))
            for b in self._pool.blocks
            if not b.is_null and b.block_hash is not None
        )

    def request_obs(self, i: int, r: Any) -> RequestObs:
        """The counters of ``r``; once vLLM has freed it nothing changes them again."""
        if i in self._gone:
            return self._gone[i]
        rid = r.request_id
        live = rid in self.sched.requests
        blocks = self._manager.req_to_blocks.get(rid, ()) if live else ()
        swa = self._swa_manager.req_to_blocks.get(rid, ()) if live and self._swa_manager is not None else ()
        kept_computed, kept_placeholders = self._trimmed.get(i, (0, 0))
        obs = RequestObs(
            status=VLLM_STATUS.get(r.status.name, r.status.name),
            num_tokens=int(r.num_tokens),
            num_output_tokens=int(r.num_output_tokens),
            num_computed_tokens=int(r.num_computed_tokens) - kept_computed,
            num_output_placeholders=int(r.num_output_placeholders) - kept_placeholders,
            num_in_flight_tokens=int(r.num_in_flight_tokens),
            num_stale_output_tokens=int(r.num_stale_output_tokens),
            drop_stale_output=bool(r.drop_stale_output),
            is_prefill_chunk=bool(r.is_prefill_chunk),
            last_sched_seq=int(r.last_sched_seq),
            block_table=tuple(b.block_id - 1 for b in blocks),
            output_tokens=tuple(int(t) for t in r.output_token_ids),
            num_spec_token_ids=len(r.spec_token_ids),
            grammar_gap=self.grammar_gap(i, r) if self.grammar_gap is not None else False,
            swa_block_table=tuple(b.block_id - 1 for b in swa),  # the null block 0 reads as -1
            stop_reason="" if r.stop_reason is None else str(r.stop_reason),
        )
        if not live:
            self._gone[i] = obs
        return obs


def delivered_and_finished(outputs: Mapping[str, Any]) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
    """(``delivered``, ``finished``) of one ``update_from_output`` from its EngineCoreOutputs."""
    delivered = tuple(sorted((req_index(r), tuple(int(t) for t in o.new_token_ids))
                             for r, o in outputs.items() if o.new_token_ids))
    finished = tuple(sorted((req_index(r), str(o.finish_reason.name).lower())
                            for r, o in outputs.items() if o.finish_reason is not None))
    return delivered, finished
