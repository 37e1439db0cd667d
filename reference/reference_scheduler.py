"""The reference scheduler: vLLM 0.33.0's (Async)Scheduler, written as an engine is.

Mutable ``Request`` objects, an FCFS ``waiting`` deque and a ``running``
list, a ``KVCacheManager`` over a real block pool, and a deque of parked
frees.  ``schedule()`` costs O(requests it looks at): the running requests
(all scheduled unless skipped) and the waiting requests it admits or skips;
``update_from_output()`` costs O(requests in the step).

The behaviour is the spec's (``spec/scheduler.py``, ``spec/output.py``,
``spec/blocks.py``); ``reference/refinement.py`` checks it.  Every action
records the behaviours it exercised in ``last_events`` (the spec's event
names) and counts them in ``stats``.

Example (two requests, a pool too small for both; D = 2):
    >>> from asyncspec.reference.reference_config import ReferenceConfig
    >>> from asyncspec.reference.reference_request import Request
    >>> s = Scheduler(ReferenceConfig(num_gpu_blocks=3, block_size=2, max_num_batched_tokens=4))
    >>> for i, p in enumerate((3, 2)):
    ...     s.add_request(Request(f"r{i}", [i + 1] * p, max_tokens=2, block_size=2))
    >>> out = s.schedule()
    >>> [(e.request_id, e.num_tokens, e.sampled_position) for e in out.scheduled]
    [('r0', 3, 1), ('r1', 1, 0)]
    >>> outputs = s.update_from_output(out, {"r0": [9]})
    >>> [(o.request_id, o.new_token_ids) for o in outputs]
    [('r0', (9,))]
"""
from __future__ import annotations

import operator
from collections import Counter, deque
from collections.abc import Iterable, Mapping, Sequence

from asyncspec.reference.block_pool import KVCacheBlock
from asyncspec.reference.reference_config import ReferenceConfig
from asyncspec.reference.kv_cache_manager import KVCacheManager
from asyncspec.reference.outputs import RequestOutput, ScheduledRequest, SchedulerOutput
from asyncspec.reference.reference_request import Request, RequestStatus

# Event names: equal to the spec's (spec/events.py), compared by the refinement check.
MAX_TOKENS_GUARD = "max_tokens_guard"
WASTED_STEP = "wasted_step"
PREEMPT_IN_FLIGHT_DELIVER = "preemption_in_flight_deliver"
PREEMPT_IN_FLIGHT_DROP = "preemption_in_flight_drop"
STALE_DELIVERY = "stale_delivery"
STALE_DROP = "stale_drop"
STALE_RESUME_SKIP = "stale_resume_skip"
DEFERRED_FREE = "deferred_free"
DEFERRED_FREE_DRAINED = "deferred_free_drained"
CHUNKED_PREFILL = "chunked_prefill"
EMPTY_STEP = "empty_step"
RESET_PREFIX_CACHE_FAILED = "reset_prefix_cache_failed"
PREEMPTION = "preemption"
ABORT_IN_FLIGHT = "abort_in_flight"
PREFIX_CACHE_HIT = "prefix_cache_hit"
ABORT_DEFERRED = "abort_deferred"
DEFERRED_ABORT_DELIVERY = "deferred_abort_delivery"
DEFERRED_ABORT_WASTED_STEP = "deferred_abort_wasted_step"

_BLOCK_ID = operator.attrgetter("block_id")


class Scheduler:
    """FCFS scheduler with chunked prefill, prefix caching, preemption and async placeholders."""

    def __init__(self, config: ReferenceConfig) -> None:
        self.config = config
        self.kv_cache_manager = KVCacheManager(
            config.block_size, config.num_gpu_blocks, config.enable_prefix_caching)
        self.requests: dict[str, Request] = {}
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []
        self.deferred_frees: deque[tuple[int, list[KVCacheBlock]]] = deque()
        self.sched_step_seq = 0  # Q
        self.processed_step_seq = 0  # R
        self.current_step = 0  # schedule() calls so far (the decode stagger's clock)
        self.finished_req_ids: set[str] = set()  # finished since the last schedule(): sent with it
        self.num_steps = 0
        self.stats: Counter[str] = Counter()
        self.last_events: set[str] = set()

    # ------------------------------------------------------------ bookkeeping

    def _emit(self, event: str) -> None:
        self.last_events.add(event)
        self.stats[event] += 1

    def _begin(self) -> None:
        self.last_events = set()

    def has_requests(self) -> bool:
        """``Scheduler.has_requests()``: a request is waiting or running, or finished
        requests still have to be announced to the worker (``finished_req_ids``)."""
        return bool(self.waiting) or bool(self.running) or bool(self.finished_req_ids)

    def add_request(self, request: Request) -> None:
        """``Scheduler.add_request``: enqueue at the back of ``waiting``."""
        self._begin()
        if request.request_id in self.requests:
            raise ValueError(f"request {request.request_id} was added already")
        request.status = RequestStatus.WAITING
        self.requests[request.request_id] = request
        self.waiting.append(request)

    # ------------------------------------------------------------ schedule()

    def schedule(self) -> SchedulerOutput:
        """One scheduling step: pass 1 (running), pass 2 (waiting), the epilogue."""
        self._begin()
        self.current_step += 1
        self.num_steps += 1
        scheduled: list[tuple[Request, int]] = []
        preempted: list[Request] = []
        budget = self._schedule_running(self.config.max_num_batched_tokens, scheduled, preempted)
        if not preempted:
            self._schedule_waiting(budget, scheduled)
        seq = 0
        if self.config.defer_block_free and scheduled:
            self.sched_step_seq += 1
            seq = self.sched_step_seq
        entries = tuple(self._update_after_schedule(req, n) for req, n in scheduled)
        finished, self.finished_req_ids = frozenset(self.finished_req_ids), set()
        if not entries:
            self._emit(EMPTY_STEP)
        self.stats["scheduled_tokens"] += sum(n for _, n in scheduled)
        return SchedulerOutput(self.num_steps, entries, seq, tuple(r.request_id for r in preempted),
                               finished)

    def _max_tokens_guard(self, req: Request) -> bool:
        """PR #27922: the step in flight is sure to reach max_tokens."""
        h = req.num_output_placeholders
        return h > 0 and req.num_computed_tokens + 2 - h >= req.num_prompt_tokens + req.max_tokens

    def _schedule_running(
        self, budget: int, scheduled: list[tuple[Request, int]], preempted: list[Request]
    ) -> int:
        """Pass 1 over ``running``; returns the budget left."""
        i = 0
        while i < len(self.running) and budget > 0:
            req = self.running[i]
            i += 1
            if self._max_tokens_guard(req):
                self._emit(MAX_TOKENS_GUARD)
                continue
            if req.next_decode_eligible_step > self.current_step:
                continue
            n = min(req.num_tokens + req.num_output_placeholders - req.num_computed_tokens, budget)
            if n <= 0:
                continue
            if not self._allocate_or_preempt(req, n, preempted):
                break
            scheduled.append((req, n))
            budget -= n
        return budget

    def _allocate_or_preempt(self, req: Request, n: int, preempted: list[Request]) -> bool:
        """Allocate, preempting ``running[-1]`` until ``req`` fits.

        Stops when the victim's free would be deferred (PR #49675) or when
        ``req`` preempted itself.
        """
        while self.kv_cache_manager.allocate_slots(req, n) is None:
            victim = self.running[-1]
            if not self._request_blocks_can_be_freed(victim):
                return False
            self.running.pop()
            self._preempt_request(victim, drop_stale_output=self.config.requires_kv_delivery)
            preempted.append(victim)
            if victim is req:
                return False
        return True

    def _schedule_waiting(self, budget: int, scheduled: list[tuple[Request, int]]) -> None:
        """Pass 2 over ``waiting`` (FCFS); skipped requests keep their place."""
        skipped: list[Request] = []
        kv = self.kv_cache_manager
        while self.waiting and budget > 0 and len(self.running) < self.config.max_num_seqs:
            req = self.waiting[0]
            if self._stale_output_blocks_resume(req):
                self._emit(STALE_RESUME_SKIP)
                skipped.append(self.waiting.popleft())
                continue
            hits, num_hit_tokens = kv.get_computed_blocks(req)
            n = req.num_tokens - num_hit_tokens
            if not self.config.enable_chunked_prefill and n > budget:
                break
            n = min(n, budget)
            new_blocks = kv.allocate_slots(
                req, n, hits, full_sequence_must_fit=self.config.scheduler_reserve_full_isl)
            if new_blocks is None:
                break
            if hits:
                self._emit(PREFIX_CACHE_HIT)
            self.waiting.popleft()
            self.running.append(req)
            req.status = RequestStatus.RUNNING
            req.num_computed_tokens = num_hit_tokens
            scheduled.append((req, n))
            budget -= n
        self.waiting.extendleft(reversed(skipped))

    @staticmethod
    def _stale_output_blocks_resume(req: Request) -> bool:
        """Deliverable stale output is in flight (X > 0, not D): resuming could resample it."""
        return req.num_stale_output_tokens > 0 and not req.drop_stale_output

    def _update_after_schedule(self, req: Request, n: int) -> ScheduledRequest:
        """``_update_after_schedule`` (base and async) for one scheduled request."""
        start = req.num_computed_tokens
        req.num_computed_tokens += n
        req.num_in_flight_tokens += n
        if self.config.defer_block_free:
            req.last_sched_seq = self.sched_step_seq
        chunk = req.num_computed_tokens < req.num_tokens + req.num_output_placeholders
        req.is_prefill_chunk = chunk
        sampled = 0
        if chunk:
            self._emit(CHUNKED_PREFILL)
        else:
            sampled = req.num_computed_tokens - req.num_prompt_tokens + 1
            if self.config.async_scheduling:
                req.num_output_placeholders += 1
                if self.config.decode_stagger > 1:
                    req.next_decode_eligible_step = self.current_step + self.config.decode_stagger
        table = self.kv_cache_manager.get_blocks(req)
        return ScheduledRequest(req.request_id, req, n, start, tuple(map(_BLOCK_ID, table)), sampled)

    # ------------------------------------------------------------ preemption and frees

    def _request_blocks_can_be_freed(self, req: Request) -> bool:
        """``_request_blocks_can_be_freed``: no unprocessed step of ``req`` (or no deferral)."""
        return not self.config.defer_block_free or req.last_sched_seq <= self.processed_step_seq

    def _preempt_request(self, req: Request, drop_stale_output: bool) -> None:
        """``_preempt_request``: free blocks, reset, mark in-flight output stale, prepend."""
        if req.num_in_flight_tokens > 0:
            self._emit(PREEMPT_IN_FLIGHT_DROP if drop_stale_output else PREEMPT_IN_FLIGHT_DELIVER)
        self._emit(PREEMPTION)
        self._free_request_blocks(req)
        req.status = RequestStatus.PREEMPTED
        req.num_computed_tokens = 0
        req.num_output_placeholders = 0
        req.drop_stale_output = drop_stale_output or (
            req.drop_stale_output and req.num_stale_output_tokens > 0)
        req.num_stale_output_tokens = req.num_in_flight_tokens
        req.num_cached_tokens_frontier = 0
        req.num_output_cached_tokens = 0  # next_decode_eligible_step is kept, as vLLM
        req.num_preemptions += 1
        self.waiting.appendleft(req)

    def _free_request_blocks(self, req: Request) -> None:
        """Free now, or park the blocks behind fence Q (``defer_block_free``)."""
        kv = self.kv_cache_manager
        if self._request_blocks_can_be_freed(req):
            kv.free(req)
            return
        blocks = kv.pop_blocks_for_free(req)
        if blocks:
            self.deferred_frees.append((self.sched_step_seq, blocks))
            self._emit(DEFERRED_FREE)

    def _drain_deferred_frees(self) -> None:
        """Return parked blocks whose fence has passed (front first; stop at a pending fence)."""
        while self.deferred_frees and self.deferred_frees[0][0] <= self.processed_step_seq:
            _, blocks = self.deferred_frees.popleft()
            self.kv_cache_manager.block_pool.free_blocks(blocks)
            self._emit(DEFERRED_FREE_DRAINED)

    def _free_request(self, req: Request) -> None:
        """``_free_request``: leave the queues and ``requests``; free (or park) the blocks."""
        if req in self.running:
            self.running.remove(req)
        elif req in self.waiting:
            self.waiting.remove(req)
        self._free_request_blocks(req)
        self.requests.pop(req.request_id, None)
        self.finished_req_ids.add(req.request_id)

    # ------------------------------------------------------------ update_from_output()

    def update_from_output(
        self, scheduler_output: SchedulerOutput, sampled_token_ids: Mapping[str, Sequence[int]]
    ) -> list[RequestOutput]:
        """Process one step's output; the steps must come back in scheduling order."""
        self._begin()
        if self.config.defer_block_free and scheduler_output.scheduled:
            self.processed_step_seq += 1
            self._drain_deferred_frees()
        outputs: list[RequestOutput] = []
        for entry in scheduler_output.scheduled:
            out = self._process_entry(entry, sampled_token_ids)
            if out is not None:
                outputs.append(out)
        return outputs

    def _process_entry(
        self, entry: ScheduledRequest, sampled_token_ids: Mapping[str, Sequence[int]]
    ) -> RequestOutput | None:
        req = entry.request
        assert req is not None
        if req.is_finished():  # gone from self.requests: the output is ignored
            by_engine = req.status in (RequestStatus.FINISHED_STOPPED, RequestStatus.FINISHED_LENGTH_CAPPED)
            if by_engine or req.abort_deferred:  # a deferred abort also ends it by its own row
                req.num_wasted_steps += 1
                self._emit(WASTED_STEP)
                if not by_engine:
                    self._emit(DEFERRED_ABORT_WASTED_STEP)
            return None
        stale = self._drain_in_flight(req, entry.num_tokens)
        if stale and req.drop_stale_output:
            self._emit(STALE_DROP)
            return None
        if not entry.samples:
            return None
        tokens = sampled_token_ids.get(req.request_id, ())
        if not tokens:
            raise ValueError(f"step {entry.request_id}: the model sampled no token for a sampling step")
        if stale:
            self._emit(STALE_DELIVERY)
        return self._update_request_with_output(req, entry.sampled_position, tokens[0], stale)

    def _drain_in_flight(self, req: Request, num_tokens: int) -> bool:
        """The lockstep drain: F -= n, and X -= n while stale output is due; True if stale."""
        req.num_in_flight_tokens -= num_tokens
        if req.num_stale_output_tokens <= 0:
            return False
        req.num_stale_output_tokens -= num_tokens
        assert req.num_stale_output_tokens >= 0, f"{req.request_id}: stale count underflow"
        return True

    def _update_request_with_output(
        self, req: Request, position: int, token_id: int, stale: bool
    ) -> RequestOutput:
        """Append the token, ``check_stop``, the placeholder drain, output-time caching."""
        was_running = req.status == RequestStatus.RUNNING
        had_placeholders = req.num_output_placeholders > 0
        req.output_out_of_order |= position != req.num_output_tokens + 1
        req.append_output_token_ids(token_id)
        stop = check_stop(req, token_id)
        if req.abort_deferred:  # SGLang's Req.update_finish_state: to_finish before EOS and length
            stop = RequestStatus.FINISHED_ABORTED
            self._emit(DEFERRED_ABORT_DELIVERY)
        if not stale and had_placeholders:
            req.num_output_placeholders -= 1
        if not stale and was_running and had_placeholders:
            self._cache_at_output(req)
        if stop is not None:
            req.status = stop
            self._free_request(req)
        return RequestOutput(req.request_id, (token_id,), req.finish_reason, stale)

    def _cache_at_output(self, req: Request) -> None:
        """``cache_blocks(r, C - F)``: only positions whose steps were all processed."""
        if not self.config.enable_prefix_caching:
            return
        processed = req.num_computed_tokens - req.num_in_flight_tokens
        self.kv_cache_manager.cache_blocks(req, processed)
        bs = self.config.block_size
        full = min(processed, req.num_tokens) // bs * bs
        req.num_output_cached_tokens = max(req.num_output_cached_tokens, full)

    # ------------------------------------------------------------ client actions

    def finish_requests(self, request_ids: Iterable[str], status: RequestStatus) -> None:
        """``finish_requests``: unknown or finished ids are ignored."""
        self._begin()
        assert status.is_finished
        for request_id in request_ids:
            req = self.requests.get(request_id)
            if req is None or req.is_finished():
                continue
            if status == RequestStatus.FINISHED_ABORTED and req.num_in_flight_tokens > 0:
                self._emit(ABORT_IN_FLIGHT)
            req.status = status
            self._free_request(req)

    def abort(self, request_id: str) -> None:
        """The client aborts one request.

        ``abort_mode = "deferred"`` (SGLang's ``Scheduler.abort_request``): a running
        request that is not mid chunked prefill only gets the flag (SGLang's
        ``Req.to_finish``); its next delivered token ends it (``_update_request_with_output``).
        """
        req = self.requests.get(request_id)
        deferred = self.config.abort_mode == "deferred"
        if deferred and req is not None and req.status == RequestStatus.RUNNING and not req.is_prefill_chunk:
            self._begin()
            if req.num_in_flight_tokens > 0:
                self._emit(ABORT_IN_FLIGHT)
            req.abort_deferred = True
            self._emit(ABORT_DEFERRED)
            return
        self.finish_requests((request_id,), RequestStatus.FINISHED_ABORTED)

    def reset_prefix_cache(self, reset_running_requests: bool = True) -> bool:
        """``reset_prefix_cache``: preempt every running request (drop mode), then reset.

        Running requests are popped from the back, so they return to
        ``waiting`` in FIFO order.  The cache itself is cleared only if no
        block is in use; returns whether it was.
        """
        self._begin()
        if reset_running_requests:
            while self.running:
                self._preempt_request(self.running.pop(), drop_stale_output=True)
        return self._reset_cache_if_idle()

    def _reset_cache_if_idle(self) -> bool:
        """``BlockPool.reset_prefix_cache``: forget every hash if no block is in use.

        Otherwise (blocks parked behind a fence) vLLM raises to the caller of a
        forced reset; the spec records ``reset_prefix_cache_failed``.
        """
        if self.kv_cache_manager.block_pool.reset_prefix_cache():
            return True
        self._emit(RESET_PREFIX_CACHE_FAILED)
        return False


def check_stop(req: Request, token_id: int) -> RequestStatus | None:
    """``check_stop``: EOS first, then the length cap; None if the request goes on."""
    if token_id == req.eos_token_id:
        return RequestStatus.FINISHED_STOPPED
    if req.num_output_tokens >= req.max_tokens:
        return RequestStatus.FINISHED_LENGTH_CAPPED
    return None
