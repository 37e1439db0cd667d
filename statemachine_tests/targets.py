"""The targets of differential fuzzing: the spec (the oracle) and vLLM 0.33.0.

``make_target(name, workload)`` builds one.  Registered names:

* ``spec`` — ``SpecTarget``: the executable spec (``spec/engine.py``),
  called action by action with a ``SpecConfig`` built from the workload
  (every request declared up front, ``late_arrivals=True``).  It is the
  oracle: it also says which events are enabled and which spec events
  (coverage) each transition exercised.
* ``vllm`` — ``VllmTarget``: vLLM's real ``AsyncScheduler`` (depth 2) or
  ``Scheduler`` (depth 1) through ``engine/vllm_driver.py``.
* ``reference`` — ``reference/`` through its abstraction to the spec
  (``reference_target.py``).
* ``torch`` — not a lock-step target: the torch engine is fuzzed by its own
  oracle (``engine/torch_oracle.py``, ``asyncspec fuzz --target torch``).

Block ids are normalized to the spec's: vLLM's pool has the null block 0 in
front, so vLLM block ``b`` is spec block ``b - 1`` (both free queues start in
id order and both return freed blocks with the same front/back rule, so the
orders can be compared exactly).
"""
from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any

from asyncspec.spec import engine as eng
from asyncspec.spec import request as rq
from asyncspec.spec.config import SpecConfig
from asyncspec.spec.draft import has_requests
from asyncspec.spec.engine import Action
from asyncspec.spec.output import takes_acceptance
from asyncspec.spec.state import EngineState, initial_state

from .harness import (
    ABORT,
    ADD_REQUEST,
    DELIVER,
    RESET_PREFIX_CACHE,
    SCHEDULE,
    Event,
    Observation,
    RequestObs,
    Target,
    Workload,
    sampled_token,
)

TargetFactory = Callable[[Workload], Target]

_SPEC_STATUS = {
    rq.WAITING: "WAITING",
    rq.RUNNING: "RUNNING",
    rq.PREEMPTED: "PREEMPTED",
    rq.FINISHED_STOPPED: "STOPPED",
    rq.FINISHED_LENGTH_CAPPED: "LENGTH",
    rq.FINISHED_ABORTED: "ABORTED",
}
_FINISH_REASON = {rq.FINISHED_STOPPED: "stop", rq.FINISHED_LENGTH_CAPPED: "length"}

_TO_SPEC = {
    SCHEDULE: eng.SCHEDULE,
    DELIVER: eng.UPDATE_FROM_OUTPUT,
    ABORT: eng.ABORT,
    ADD_REQUEST: eng.ADD_REQUEST,
    RESET_PREFIX_CACHE: eng.RESET_PREFIX_CACHE,
}
_FROM_SPEC = {v: k for k, v in _TO_SPEC.items()}


# --------------------------------------------------------------------------- spec


def spec_config(w: Workload) -> SpecConfig:
    """The ``SpecConfig`` of a workload (``ConfigError`` if the spec cannot take it).

    ``SpecConfig`` validates at most 6 requests, a bound for exhaustive checking,
    not for the spec's actions (``reference/harness.py`` lifts it the same way):
    a larger workload is validated with its first request, then given all of
    them (``workload_problem`` has checked each one).
    """
    requests = tuple((r.prompt_len, r.max_tokens) for r in w.requests)
    eos = tuple((r.eos_position,) for r in w.requests)
    if len(requests) <= 6:
        return _spec_config(w, requests, eos, w.structured_output)
    cfg = _spec_config(w, requests[:1], eos[:1], tuple(i for i in w.structured_output if i == 0))
    object.__setattr__(cfg, "requests", requests)
    object.__setattr__(cfg, "eos_positions", eos)
    object.__setattr__(cfg, "structured_output", w.structured_output)
    return cfg


def _spec_config(w: Workload, requests: tuple[tuple[int, int], ...],
                 eos: tuple[tuple[int], ...], structured: tuple[int, ...]) -> SpecConfig:
    return SpecConfig(
        name="fuzz",
        requests=requests,
        batch_queue_depth=w.depth,
        loop=w.loop,
        token_budget=w.token_budget,
        max_num_seqs=w.max_num_seqs,
        block_size=w.block_size,
        num_blocks=w.num_blocks,
        enable_chunked_prefill=w.chunked_prefill,
        enable_prefix_caching=w.prefix_caching,
        defer_block_free=w.defer_block_free,
        stale_mode=w.stale_mode,
        eos_positions=eos,
        aborts=w.aborts,
        late_arrivals=True,
        forced_preemptions=w.reset_prefix_cache,
        num_speculative_tokens=w.num_speculative_tokens,
        structured_output=structured,
    )


class SpecTarget:
    """The spec, one ``engine.apply`` per event; the oracle of every comparison."""

    name = "spec"

    def __init__(self, w: Workload) -> None:
        self.workload = w
        self.cfg = spec_config(w)
        self.state: EngineState = initial_state(self.cfg, tuple(r.eos_position for r in w.requests))
        self._started = False  # r0 is in the spec's initial state; the harness adds it first
        self._events: frozenset[str] = frozenset()
        self._outputs: list[tuple[int, ...]] = [() for _ in w.requests]
        self._last: tuple[Any, Any, Any, Any] = ((), (), (), ())

    # ---- the oracle's extras ---------------------------------------------------

    def enabled(self) -> list[Event]:
        if not self._started:
            return [Event(ADD_REQUEST, 0)]
        return [self._event(a) for a in eng.enabled_actions(self.cfg, self.state)]

    def _event(self, a: Action) -> Event:
        """The harness event of spec action ``a`` (acceptance named by request)."""
        if not a.accepted:
            return Event(_FROM_SPEC[a.name], a.req)
        return Event(DELIVER, None, tuple(zip(self._verified_requests(), a.accepted)))

    def _verified_requests(self) -> list[int]:
        """The requests of the oldest step whose drafts the acceptance vector covers."""
        s = self.state
        return [e.req for e in s.batch_queue[0].entries if takes_acceptance(s, e)]

    def last_events(self) -> frozenset[str]:
        return self._events

    # ---- events ----------------------------------------------------------------

    def add_request(self, req: int, prompt_len: int, max_tokens: int, eos_position: int) -> None:
        p = self.state.params[req]
        if (p.num_prompt_tokens, p.max_tokens, p.eos_position) != (prompt_len, max_tokens, eos_position):
            raise ValueError(f"r{req} differs from the workload the spec was built with")
        if req == 0 and not self._started:
            self._started = True
            self._finish_event(self.state, frozenset(), (), ())
            return
        self._apply(Action(eng.ADD_REQUEST, req))

    def schedule(self) -> None:
        self._apply(Action(eng.SCHEDULE))

    def deliver_oldest(self, accepted: tuple[tuple[int, int], ...] = ()) -> None:
        counts = dict(accepted)
        if set(counts) - set(self._verified_requests()):
            raise ValueError(f"accept= names requests without verified drafts: {accepted}")
        vector = tuple(counts.get(r, 0) for r in self._verified_requests()) if accepted else ()
        self._apply(Action(eng.UPDATE_FROM_OUTPUT, None, vector))

    def abort(self, req: int) -> None:
        self._apply(Action(eng.ABORT, req))

    def reset_prefix_cache(self) -> None:
        self._apply(Action(eng.RESET_PREFIX_CACHE))

    def _apply(self, action: Action) -> None:
        before = self.state
        after, events = eng.apply(self.cfg, before, action)
        scheduled: tuple[tuple[int, int, int], ...] = ()
        delivered: tuple[tuple[int, tuple[int, ...]], ...] = ()
        if action.name == eng.SCHEDULE:
            # a step whose sampling is deferred (structured output) is not queued yet
            step = after.deferred_step if after.deferred_step is not None else after.batch_queue[-1]
            scheduled = tuple((e.req, e.num_tokens, e.sampled_position) for e in step.entries)
        elif action.name == eng.UPDATE_FROM_OUTPUT:
            delivered = self._record_delivery(before, after)
        self.state = after
        self._finish_event(before, events, scheduled, delivered)

    def _record_delivery(self, before: EngineState, after: EngineState) -> tuple[tuple[int, tuple[int, ...]], ...]:
        """The tokens appended per request: output positions ``sampled_position``,
        ``sampled_position + 1``, ... (accepted drafts + 1, trimmed at a stop)."""
        out: list[tuple[int, tuple[int, ...]]] = []
        for entry in before.batch_queue[0].entries:
            req = entry.req
            count = after.counters[req].num_output_tokens - before.counters[req].num_output_tokens
            if count > 0:
                eos = before.params[req].eos_position
                toks = tuple(sampled_token(req, entry.sampled_position + j, eos) for j in range(count))
                self._outputs[req] += toks
                out.append((req, toks))
        return tuple(sorted(out))

    def _finish_event(self, before: EngineState, events: frozenset[str],
                      scheduled: tuple[tuple[int, int, int], ...],
                      delivered: tuple[tuple[int, tuple[int, ...]], ...]) -> None:
        after = self.state
        finished = tuple(
            (i, _FINISH_REASON[c.status])
            for i, c in enumerate(after.counters)
            if c.status in _FINISH_REASON and before.counters[i].status != c.status
        )
        preempted = tuple(
            i for i, c in enumerate(after.counters)
            if c.status == rq.PREEMPTED and before.counters[i].status == rq.RUNNING
        )
        self._events = events
        self._last = (scheduled, delivered, finished, preempted)

    # ---- observation -----------------------------------------------------------

    def observe(self) -> Observation:
        s = self.state
        scheduled, delivered, finished, preempted = self._last
        return Observation(
            requests=tuple(
                (i, self._request_obs(i)) for i, c in enumerate(s.counters) if c.status != rq.NOT_ARRIVED
            ),
            waiting=s.waiting,
            running=s.running,
            scheduled=scheduled,
            delivered=delivered,
            finished=finished,
            preempted=preempted,
            num_in_flight_steps=len(s.batch_queue),
            has_requests=has_requests(s),
            free_blocks=s.free_blocks,
            sched_step_seq=s.sched_step_seq,
            processed_step_seq=s.processed_step_seq,
            deferred_frees=tuple(
                (d.fence, tuple(sorted(d.evict_first + d.evict_last))) for d in s.deferred_frees
            ),
            cached_blocks=tuple(
                (b, h.req, h.block_index) for b, h in enumerate(s.block_hashes) if h is not None
            ),
            sampling_deferred=s.deferred_step is not None,
        )

    def _request_obs(self, i: int) -> RequestObs:
        p, c = self.state.params[i], self.state.counters[i]
        return RequestObs(
            status=_SPEC_STATUS[c.status],
            num_tokens=rq.num_tokens(p, c),
            num_output_tokens=c.num_output_tokens,
            num_computed_tokens=c.num_computed_tokens,
            num_output_placeholders=c.num_output_placeholders,
            num_in_flight_tokens=c.num_in_flight_tokens,
            num_stale_output_tokens=c.num_stale_output_tokens,
            drop_stale_output=bool(c.drop_stale_output),
            is_prefill_chunk=bool(c.is_prefill_chunk),
            last_sched_seq=c.last_sched_seq,
            block_table=self.state.block_tables[i],
            output_tokens=self._outputs[i],
            num_spec_token_ids=c.num_spec_token_ids,
            grammar_gap=bool(c.grammar_gap),
        )


# --------------------------------------------------------------------------- vLLM


_VLLM_STATUS = {
    "WAITING": "WAITING",
    # a grammar request waits in this status until the next schedule() promotes it
    # (its RecordingGrammar is ready at once; the spec does not model compilation)
    "WAITING_FOR_STRUCTURED_OUTPUT_GRAMMAR": "WAITING",
    "RUNNING": "RUNNING",
    "PREEMPTED": "PREEMPTED",
    "FINISHED_STOPPED": "STOPPED",
    "FINISHED_LENGTH_CAPPED": "LENGTH",
    "FINISHED_ABORTED": "ABORTED",
}


def driver_config(w: Workload) -> Any:
    """The ``DriverConfig`` of a workload (``engine/vllm_driver.py``)."""
    from asyncspec.engine.vllm_driver import DriverConfig

    return DriverConfig(
        block_size=w.block_size,
        num_blocks=w.num_blocks,
        max_num_seqs=w.max_num_seqs,
        max_num_batched_tokens=w.token_budget,
        enable_chunked_prefill=w.chunked_prefill,
        async_scheduling=w.depth == 2,
        defer_block_free=False,  # forced by VllmTarget, so both modes share one vLLM config
        enable_prefix_caching=w.prefix_caching,
        max_model_len=w.max_model_len,
        num_speculative_tokens=w.num_speculative_tokens,
    )


class _InFlight:
    """A scheduled step the harness's worker holds: what it samples, per request.

    ``plan[req] = [first sampled output position (0 = prefill chunk), drafts
    scheduled, the request's num_preemptions when scheduled]``.  The position is
    the worker's: it moves earlier when an earlier step of the same request had
    drafts rejected (the on-device correction of Model Runner V2's
    ``post_update``; V1 since vllm#32951).
    """

    __slots__ = ("step", "plan")

    def __init__(self, step: Any, plan: dict[int, list[int]]) -> None:
        self.step = step
        self.plan = plan


class VllmTarget:
    """vLLM 0.33.0's real scheduler, driven through ``VllmDriver``.

    Per step it remembers which output position each scheduled request
    samples, computed from vLLM's own counters right after ``schedule()``
    (``num_computed_tokens - drafts - num_prompt_tokens + 1``; 0 for a prefill
    chunk), and delivers ``sampled_token`` for it (and the accepted drafts'
    positions after it).  ``requires_kv_delivery`` is set on
    the scheduler for the drop stale mode (vLLM reads it from a KV-producer
    connector; nothing else in the scheduler reads it), as ``defer_block_free``
    is forced by the driver the way vLLM's tests do.

    The harness plays the engine loop and the worker:

    * a step is sampled (``get_grammar_bitmask``) as soon as it is scheduled,
      unless ``SchedulerOutput.pending_structured_output_tokens`` is set: then it
      is held as the deferred step and sampled, then queued, right after the next
      ``update_from_output`` (``EngineCore.step_with_batch_queue``; with
      speculative decoding the worker's drafts first replace its -1 placeholders,
      ``update_draft_token_ids_in_output``);
    * synchronous scheduling with speculative decoding: after each output the
      worker's k draft ids reach the scheduler (``update_draft_token_ids``, as
      ``EngineCore.post_step`` does); under async the scheduler keeps -1
      placeholders and the worker fills them;
    * structured output: every grammar is a ``RecordingGrammar``; a bitmask row
      built when the grammar had not seen every token before the sampled
      position (or had seen a different sequence than the request's output)
      shows as ``grammar_gap``.
    """

    name = "vllm"

    def __init__(self, w: Workload) -> None:
        from asyncspec.engine.vllm_driver import VllmDriver

        self.workload = w
        self.driver = VllmDriver(driver_config(w))
        self.sched: Any = self.driver.scheduler
        self.sched.defer_block_free = w.defer_block_free  # as vLLM's tests (and the driver) do
        self.sched.requires_kv_delivery = w.stale_mode == "drop"
        self._pool: Any = self.sched.kv_cache_manager.block_pool
        self._manager: Any = self.sched.kv_cache_manager.coordinator.single_type_managers[0]
        self._requests: dict[int, Any] = {}  # every arrived Request object, kept after it finishes
        self._gone: dict[int, RequestObs] = {}  # requests vLLM has freed: their observation is final
        self._queue: deque[_InFlight] = deque()
        self._deferred: _InFlight | None = None  # executed, sampling deferred (structured output)
        self._grammar_gap: set[int] = set()
        self._preemptions: dict[int, int] = {}
        self._last: tuple[Any, Any, Any] = ((), (), ())

    # ---- events ----------------------------------------------------------------

    def add_request(self, req: int, prompt_len: int, max_tokens: int, eos_position: int) -> None:
        self._begin()
        rid = f"r{req}"
        self.driver.add_request(rid, prompt_len=prompt_len, max_tokens=max_tokens,
                                structured_output=req in self.workload.structured_output)
        self._requests[req] = self.sched.requests[rid]

    def schedule(self) -> None:
        self._begin()
        step = self.driver.schedule()
        raw_order = [int(rid[1:]) for rid in step._raw.num_scheduled_tokens]
        scheduled: list[tuple[int, int, int]] = []
        plan: dict[int, list[int]] = {}
        for req in raw_order:
            rid = f"r{req}"
            drafts = step.num_scheduled_drafts.get(rid, 0)
            position = self._sampled_position(req, step.is_prefill_chunk[rid], drafts)
            scheduled.append((req, step.num_scheduled_tokens[rid], position))
            plan[req] = [position, drafts, int(self._requests[req].num_preemptions)]
        entry = _InFlight(step, plan)
        if step.pending_structured_output_tokens and not step.is_empty:
            self._deferred = entry  # forward pass now, sampling after the next output
        else:
            self._sample(entry)
        self._last = (tuple(scheduled), (), ())

    def _sampled_position(self, req: int, is_chunk: bool, drafts: int) -> int:
        if is_chunk:
            return 0
        r = self._requests[req]
        return int(r.num_computed_tokens) - drafts - int(r.num_prompt_tokens) + 1

    def _sample(self, entry: _InFlight) -> None:
        """Bitmask (structured output) and ``sample_tokens``; the step joins the queue."""
        if not entry.step.is_empty and self.workload.structured_output:
            for rid, known in self.driver.grammar_bitmask(entry.step).items():
                req = int(rid[1:])
                position = entry.plan[req][0] if req in entry.plan else 0
                if known != position - 1:
                    self._grammar_gap.add(req)
        self._queue.append(entry)

    def deliver_oldest(self, accepted: tuple[tuple[int, int], ...] = ()) -> None:
        self._begin()
        if not self._queue:
            raise RuntimeError("no step in flight")
        entry = self._queue[0]
        counts = dict(accepted)
        sampled: dict[str, list[int]] = {}
        for req, (position, drafts, incarnation) in entry.plan.items():
            if not position:
                continue
            n_accepted = counts.get(req, 0)
            if n_accepted > drafts:
                raise ValueError(f"r{req}: {n_accepted} drafts accepted but {drafts} scheduled")
            eos = self.workload.requests[req].eos_position
            sampled[f"r{req}"] = [sampled_token(req, position + j, eos) for j in range(n_accepted + 1)]
            if drafts > n_accepted:  # the worker corrects the request's later steps
                for later in (*list(self._queue)[1:], self._deferred):
                    plan = later.plan.get(req) if later is not None else None
                    if plan and plan[0] and plan[2] == incarnation:
                        plan[0] -= drafts - n_accepted
        result = self.driver.deliver(entry.step, sampled)
        self._queue.popleft()
        if self.workload.num_speculative_tokens and self.workload.depth == 1 and not entry.step.is_empty:
            self.driver.update_draft_token_ids(*self._drafts(entry))  # EngineCore.post_step
        if self._deferred is not None:
            deferred, self._deferred = self._deferred, None
            if self.workload.num_speculative_tokens:
                self.driver.update_draft_token_ids_in_output(deferred.step, *self._drafts(deferred))
            self._sample(deferred)
        delivered = tuple(sorted((int(r[1:]), toks) for r, toks in result.new_token_ids.items() if toks))
        finished = tuple(sorted((int(r[1:]), why) for r, why in result.finish_reasons.items()))
        self._last = ((), delivered, finished)

    def _drafts(self, entry: _InFlight) -> tuple[list[str], list[list[int]]]:
        """The worker's k draft ids for each request of ``entry`` (never EOS)."""
        k = self.workload.num_speculative_tokens
        reqs = list(entry.plan)
        return [f"r{r}" for r in reqs], [[3 + (r + j) % 997 for j in range(k)] for r in reqs]

    def abort(self, req: int) -> None:
        self._begin()
        self.driver.abort([f"r{req}"])

    def reset_prefix_cache(self) -> None:
        self._begin()
        self.sched.reset_prefix_cache(reset_running_requests=True)

    def _begin(self) -> None:
        self._preemptions = {i: int(r.num_preemptions) for i, r in self._requests.items()}
        self._last = ((), (), ())

    # ---- observation -----------------------------------------------------------

    def observe(self) -> Observation:
        sched = self.sched
        scheduled, delivered, finished = self._last
        preempted = tuple(
            i for i, r in sorted(self._requests.items())
            if int(r.num_preemptions) > self._preemptions.get(i, 0)
        )
        return Observation(
            requests=tuple((i, self._request_obs(i, r)) for i, r in sorted(self._requests.items())),
            waiting=tuple(int(r.request_id[1:]) for r in sched.waiting),
            running=tuple(int(r.request_id[1:]) for r in sched.running),
            scheduled=scheduled,
            delivered=delivered,
            finished=finished,
            preempted=preempted,
            num_in_flight_steps=len(self._queue),
            has_requests=bool(sched.has_requests()),
            free_blocks=tuple(b.block_id - 1 for b in self._pool.free_block_queue.get_all_free_blocks()),
            sched_step_seq=int(sched.sched_step_seq),
            processed_step_seq=int(sched.processed_step_seq),
            deferred_frees=tuple(
                (int(fence), tuple(sorted(b.block_id - 1 for b in blocks)))
                for fence, blocks in sched.deferred_frees
            ),
            cached_blocks=self._cached_blocks(),
            sampling_deferred=self._deferred is not None,
        )

    def _cached_blocks(self) -> tuple[tuple[int, int, int], ...]:
        """(spec block id, request, block index) of every block holding a hash.

        A hash no arrived request has (never expected) shows as request -1.
        """
        if not self.workload.prefix_caching:
            return ()
        from vllm.v1.core.kv_cache_utils import make_block_hash_with_group_id

        owner = {
            make_block_hash_with_group_id(h, 0): (i, k)
            for i, r in self._requests.items()
            for k, h in enumerate(r.block_hashes)
        }
        return tuple(
            (b.block_id - 1, *owner.get(b.block_hash, (-1, -1)))
            for b in self._pool.blocks
            if not b.is_null and b.block_hash is not None
        )

    def _has_grammar_gap(self, i: int, r: Any) -> bool:
        """A bitmask built out of order, or a grammar that saw other tokens than the output."""
        grammar = self.driver.grammars.get(r.request_id)
        if grammar is None:
            return False
        return i in self._grammar_gap or grammar.accepted != [int(t) for t in r.output_token_ids]

    def _request_obs(self, i: int, r: Any) -> RequestObs:
        """The counters of ``r``; once vLLM has freed it nothing changes them again."""
        if i in self._gone:
            return self._gone[i]
        rid = r.request_id
        live = rid in self.sched.requests
        blocks = self._manager.req_to_blocks.get(rid, ()) if live else ()
        obs = RequestObs(
            status=_VLLM_STATUS.get(r.status.name, r.status.name),
            num_tokens=int(r.num_tokens),
            num_output_tokens=int(r.num_output_tokens),
            num_computed_tokens=int(r.num_computed_tokens),
            num_output_placeholders=int(r.num_output_placeholders),
            num_in_flight_tokens=int(r.num_in_flight_tokens),
            num_stale_output_tokens=int(r.num_stale_output_tokens),
            drop_stale_output=bool(r.drop_stale_output),
            is_prefill_chunk=bool(r.is_prefill_chunk),
            last_sched_seq=int(r.last_sched_seq),
            block_table=tuple(b.block_id - 1 for b in blocks),
            output_tokens=tuple(int(t) for t in r.output_token_ids),
            num_spec_token_ids=len(r.spec_token_ids),
            grammar_gap=self._has_grammar_gap(i, r),
        )
        if not live:
            self._gone[i] = obs
        return obs


# --------------------------------------------------------------------------- registry


class TargetUnavailable(RuntimeError):
    """The target cannot be loaded (vLLM missing or not pinned, or not connected); one line."""


NOT_CONNECTED: dict[str, str] = {
    "torch": "the torch engine is not a lock-step target here: `asyncspec fuzz --target torch` "
             "runs its own oracle (engine/torch_oracle.py)",
}
"""Targets with a name but no lock-step factory, and where to go instead."""


def _not_connected(name: str) -> TargetFactory:
    def factory(w: Workload) -> Target:
        raise TargetUnavailable(NOT_CONNECTED[name])

    return factory


def _reference_target(w: Workload) -> Target:
    from .reference_target import ReferenceTarget

    return ReferenceTarget(w)


TARGETS: dict[str, TargetFactory] = {
    "spec": SpecTarget,
    "vllm": VllmTarget,
    "reference": _reference_target,
    **{name: _not_connected(name) for name in NOT_CONNECTED},
}


def register_target(name: str, factory: TargetFactory) -> None:
    """Connect a target (e.g. ``reference``): ``factory(workload)`` returns a ``Target``."""
    TARGETS[name] = factory
    NOT_CONNECTED.pop(name, None)


def make_target(name: str, w: Workload) -> Target:
    """Build target ``name`` for workload ``w``; ``KeyError`` for an unknown name."""
    return TARGETS[name](w)


def load_target(name: str, allow_version: bool) -> None:
    """Check that target ``name`` can be built; ``TargetUnavailable`` (one line) if not.

    For ``vllm``: vLLM must be exactly the pinned release unless ``allow_version``.
    """
    if name not in TARGETS or name == "spec":
        known = ", ".join(sorted(k for k in TARGETS if k != "spec"))
        raise TargetUnavailable(f"unknown target {name!r} (known: {known})")
    if name in NOT_CONNECTED:
        raise TargetUnavailable(NOT_CONNECTED[name])
    if name == "vllm":
        from asyncspec.engine.vllm_driver import VllmUnavailable, check_vllm_version

        try:
            check_vllm_version(allow_other=allow_version)
        except VllmUnavailable as exc:
            raise TargetUnavailable(str(exc)) from exc
