"""``schedule()``: one scheduling step of vLLM's (Async)Scheduler.

Models ``Scheduler.schedule`` (vllm/v1/core/sched/scheduler.py, vLLM 0.33.0):
pass 1 over the running requests (max_tokens guard, V2+PP decode stagger, the
gap, allocation with preemption of the last running request), pass 2 over the
waiting queue (skipped after a preemption; stale-output skip; admission), and
the epilogue (``sched_step_seq`` for non-empty steps, then
``_update_after_schedule`` of the base class and of ``AsyncScheduler``).
The per-request arithmetic is in ``spec/request.py``.
"""
from __future__ import annotations

from asyncspec.spec import blocks, connector, encoder, mamba, offload, policy, streaming, swa
from asyncspec.spec import events as ev
from asyncspec.spec import request as rq
from asyncspec.spec.algebra import CONCRETE as A
from asyncspec.spec.config import SpecConfig
from asyncspec.spec.draft import Draft, has_requests
from asyncspec.spec.state import PAUSED_ALL, PAUSED_NEW, UNPAUSED, EngineState, Step, StepEntry
from asyncspec.spec.cites import models


@models("vllm.v1.core.sched.scheduler.Scheduler._preempt_request")
def preempt_request(cfg: SpecConfig, d: Draft, victim: int, drop: bool) -> None:
    """``Scheduler._preempt_request``: free blocks, reset counters, prepend to waiting.

    The caller has already removed ``victim`` from ``running``.
    """
    c = d.counters[victim]
    if c.num_in_flight_tokens > 0:
        d.emit(ev.PREEMPT_IN_FLIGHT_DROP if drop else ev.PREEMPT_IN_FLIGHT_DELIVER)
    d.emit(ev.PREEMPTION)
    blocks.free_request_blocks(cfg, d, victim)
    offload.preempted(cfg, d, victim)
    encoder.free_request(cfg, d, victim)
    d.counters[victim] = rq.preempt(A, c, drop)
    d.waiting.insert(0, victim)
    policy.order_queues(cfg, d)


@models("vllm.v1.core.sched.scheduler.Scheduler.schedule",
        "vllm.v1.core.sched.scheduler.Scheduler._request_blocks_can_be_freed",
        pr=49675)
def _allocate_or_preempt(cfg: SpecConfig, d: Draft, req: int, n: int, preempted: list[int],
                         out: list[tuple[int, int]] | None = None,
                         enc: encoder.EncoderPass | None = None) -> tuple[bool, int, int]:
    """The allocation loop of pass 1: preempt the victim (``running[-1]``, or the largest
    (priority, arrival) under the priority policy) until ``req`` fits.

    Stops (not ok) when the victim's free would be deferred (PR #49675) or when
    ``req`` preempted itself.  A victim already scheduled in this step (priority
    policy) is taken out of ``out`` and its tokens go back to the budget.  Returns
    (ok, victims before ``req`` in ``running``, tokens returned to the budget).
    """
    before = returned = 0
    while True:
        if blocks.allocate_slots(cfg, d, req, n):
            return True, before, returned
        victim = policy.preemption_victim(cfg, d)
        if not blocks.preemption_frees_blocks(cfg, d, victim):
            return False, before, returned
        index = d.running.index(victim)
        if index != len(d.running) - 1:
            d.emit(ev.PRIORITY_PREEMPTION)
        before += index < d.running.index(req)
        del d.running[index]
        for k, (r, m) in enumerate(out or ()):
            if r == victim and out is not None:
                d.emit(ev.PREEMPTED_SCHEDULED_UNDONE)
                del out[k]
                returned += m
                encoder.undo(cfg, enc, victim)
                break
        preempt_request(cfg, d, victim, drop=cfg.stale_mode == "drop")
        preempted.append(victim)
        if victim == req:
            return False, before, returned


@models("vllm.v1.core.sched.scheduler.Scheduler.schedule", pr=27922)
def schedule_running(cfg: SpecConfig, d: Draft, budget: int, out: list[tuple[int, int]],
                     threshold: int = 0, enc: encoder.EncoderPass | None = None) -> tuple[int, list[int]]:
    """Pass 1 over ``running``; appends (request, tokens) to ``out``.

    ``threshold``: this step's long-prefill cap (``policy.long_prefill_threshold``);
    ``enc``: this step's encoder inputs (``spec/encoder.py``), which may cut ``n``.
    Returns the remaining budget and the preempted requests.
    """
    preempted: list[int] = []
    i = 0
    while i < len(d.running) and budget > 0:
        req = d.running[i]
        p, c = d.params[req], d.counters[req]
        if rq.max_tokens_guard(A, p, c):
            d.emit(ev.MAX_TOKENS_GUARD)
            i += 1
            continue
        if c.decode_wait > 0:
            i += 1
            continue
        wanted = rq.num_new_tokens(p, c)
        n = min(policy.cap_long_prefill(wanted, threshold), budget)
        if n < min(wanted, budget):
            d.emit(ev.LONG_PREFILL_CAPPED)
        capped = policy.cap_model_len(cfg, c.num_computed_tokens, n)
        if capped < n:
            d.emit(ev.MODEL_LEN_CAPPED)
        n = mamba.aligned_split(cfg, d, req, c.num_computed_tokens, capped)  # before the encoder cut
        mamba.check_aligned(cfg, d, req, c.num_computed_tokens, n)
        to_compute: list[int] = []
        enc_budget = 0
        if n > 0:
            n, to_compute, enc_budget = encoder.try_schedule(cfg, d, enc, req, c.num_computed_tokens, n)
        if n <= 0:
            i += 1
            continue
        ok, before, returned = _allocate_or_preempt(cfg, d, req, n, preempted, out, enc)
        i -= before
        budget += returned
        if not ok:
            if cfg.policy == "priority" and d.counters[req].status == rq.PREEMPTED:
                continue  # it preempted itself; the requests after it may still fit
            break
        encoder.commit(cfg, d, enc, req, to_compute, enc_budget)
        out.append((req, n))
        budget -= n
        i += 1
    return budget, preempted


@models("vllm.v1.core.sched.scheduler.Scheduler.schedule")
def pads_spec_decode(cfg: SpecConfig, n: int, hit_tokens: int, running_scheduled: bool,
                     prefill_scheduled: bool) -> bool:
    """``pad_spec_decode`` of the waiting pass: an admission with one token to compute,
    behind decodes, is padded to 1 + k positions (k -1 drafts) to keep the step uniform."""
    return (cfg.num_speculative_tokens > 0 and n == 1 and not prefill_scheduled
            and (running_scheduled or hit_tokens > 0))


SKIP_TO_WAITING, SKIP_TO_KV_HOLDING, STOP_PASS = "waiting", "kv_holding", "stop"
"""``waiting_skip``'s answers: the queue a skipped request goes back to, or the pass stops."""


@models("vllm.v1.core.sched.scheduler.Scheduler.schedule")
def schedule_waiting(cfg: SpecConfig, d: Draft, budget: int, out: list[tuple[int, int]],
                     padded_reqs: set[int] | None = None, threshold: int = 0,
                     enc: encoder.EncoderPass | None = None) -> None:
    """Pass 2 over ``kv_holding_waiting`` (requests holding blocks: KV connector), then
    ``waiting`` (FCFS): admit requests while budget and blocks allow.

    A skipped request keeps its place at the front of the queue its blocks say
    (``skip_request``).  Without chunked prefill, a prompt larger than the budget
    stops the pass.  Requests admitted with ``pad_spec_decode`` are added to
    ``padded_reqs``.  A connector's asynchronous load is started and skipped.  An
    admission whose encoder inputs leave it no token is skipped; one whose blocks do not
    fit gives its encoder references back (``spec/encoder.py``).
    """
    skipped: dict[str, list[int]] = {SKIP_TO_WAITING: [], SKIP_TO_KV_HOLDING: []}
    running_scheduled = bool(out)  # scheduled_running_reqs of pass 1
    prefill_scheduled = any(d.counters[r].is_prefill_chunk for r, _ in out)  # flags of their last step
    while (d.kv_holding or admits_new(d) and d.waiting) and budget > 0 and streaming.num_active(d) < cfg.max_num_seqs:
        queue = d.kv_holding if d.kv_holding else d.waiting
        req = queue[0]
        skip = waiting_skip(cfg, d, req)
        if skip == STOP_PASS:
            break
        if skip is not None:
            skipped[skip].append(queue.pop(0))
            continue
        c = d.counters[req]
        hit, state = mamba.cut_hit(cfg, d, req, prefix_cache_hit(cfg, d, req))
        hit, swa_hit = swa.cut_hit(cfg, d, req, hit)
        hit_tokens = len(hit) * cfg.block_size
        uncomputed = rq.num_tokens(d.params[req], c) - hit_tokens - c.num_computed_tokens
        padded = pads_spec_decode(cfg, uncomputed, hit_tokens, running_scheduled, prefill_scheduled)
        n = waiting_num_new_tokens(cfg, d, uncomputed, budget, padded, threshold)
        if n is None:
            break
        n = mamba.aligned_split(cfg, d, req, c.num_computed_tokens + hit_tokens, n)
        mamba.check_aligned(cfg, d, req, c.num_computed_tokens + hit_tokens, n)
        if n == 0:
            d.emit(ev.MAMBA_SPLIT_STOPS_PASS)
            break
        n, to_compute, enc_budget = encoder.try_schedule(cfg, d, enc, req, c.num_computed_tokens + hit_tokens, n)
        if n == 0:  # skip_request: the requests behind it may still go
            skipped[SKIP_TO_KV_HOLDING if connector.holds_kv_blocks(d, req) else SKIP_TO_WAITING].append(queue.pop(0))
            continue
        if not allocate_waiting(cfg, d, req, hit, n, state, swa_hit):
            encoder.free_request(cfg, d, req)
            break
        if hit:
            d.emit(ev.PREFIX_CACHE_HIT)
        queue.pop(0)
        admit_waiting(cfg, d, req, c, hit_tokens, padded)
        if padded and padded_reqs is not None:
            padded_reqs.add(req)
        encoder.commit(cfg, d, enc, req, to_compute, enc_budget)
        out.append((req, n))
        budget -= n
    requeue_skipped(cfg, d, skipped)


@models("vllm.v1.core.sched.scheduler.Scheduler.schedule",
        "vllm.v1.core.sched.scheduler.Scheduler._handle_blocked_waiting_request")
def waiting_skip(cfg: SpecConfig, d: Draft, req: int) -> str | None:
    """The skips at the top of the waiting loop, in vLLM's order: a connector's load not
    yet received or a paused streaming session (``_handle_blocked_waiting_request``);
    deliverable stale output in flight; an asynchronous load started now
    (``STOP_PASS`` when it does not fit).  The queue the skipped ``req`` goes back to, or None."""
    if not connector.ready_to_schedule(cfg, d, req):
        return SKIP_TO_KV_HOLDING
    if streaming.paused(d, req):  # WAITING_FOR_STREAMING_REQ: blocked until its next input
        d.emit(ev.STREAM_PAUSED_SKIP)
        return SKIP_TO_KV_HOLDING if connector.holds_kv_blocks(d, req) else SKIP_TO_WAITING
    if rq.stale_output_blocks_resume(A, d.counters[req]):
        d.emit(ev.STALE_RESUME_SKIP)
        return SKIP_TO_KV_HOLDING if connector.holds_kv_blocks(d, req) else SKIP_TO_WAITING
    if offload.lookup_delayed(cfg, d, req):  # get_num_new_matched_tokens: None
        d.emit(ev.OFFLOAD_LOOKUP_DELAYED)
        return SKIP_TO_WAITING
    if connector.starts_load(cfg, d, req):
        return SKIP_TO_KV_HOLDING if connector.admit_async_load(cfg, d, req) else STOP_PASS
    return None


@models("vllm.v1.core.sched.scheduler.Scheduler.schedule",
        "vllm.v1.core.kv_cache_manager.KVCacheManager.get_computed_blocks")
def prefix_cache_hit(cfg: SpecConfig, d: Draft, req: int) -> tuple[int, ...]:
    """The cached blocks a waiting request starts from; none when a connector's load
    already computed tokens (``num_computed_tokens`` > 0 only after a load)."""
    if d.counters[req].num_computed_tokens:
        return ()
    return blocks.longest_cache_hit(cfg, d, req)


@models("vllm.v1.core.sched.scheduler.Scheduler.schedule")
def waiting_num_new_tokens(cfg: SpecConfig, d: Draft, n: int, budget: int, padded: bool,
                           threshold: int) -> int | None:
    """The tokens an admission of ``n`` uncomputed tokens schedules: 1 + k when
    ``pad_spec_decode`` pads it, capped by the long-prefill threshold, then by the
    budget.  None stops the pass: a padded admission over the budget (vLLM prefers not
    scheduling to scheduling un-padded) or, without chunked prefill, a prompt larger than it."""
    if padded:
        n = 1 + cfg.num_speculative_tokens
        if n > budget:
            return None
    capped = policy.cap_long_prefill(n, threshold)
    if capped < min(n, budget):
        d.emit(ev.LONG_PREFILL_CAPPED)
    if not cfg.enable_chunked_prefill and capped > budget:
        return None
    return min(capped, budget)


@models("vllm.v1.core.sched.scheduler.Scheduler.schedule",
        "vllm.v1.core.kv_cache_manager.KVCacheManager.allocate_slots")
def allocate_waiting(cfg: SpecConfig, d: Draft, req: int, hit: tuple[int, ...], n: int, state: int = -1,
                     swa_hit: tuple[int, ...] = ()) -> bool:
    """``allocate_slots`` for an admission: its blocks after a connector's load, else the
    prefix-cache hit (the sliding-window group's share ``swa_hit``) plus new blocks; False
    (the pass stops) when they do not fit."""
    if not blocks.admission_fits(cfg, d, req, hit, state, swa_hit):
        return False
    if d.counters[req].num_computed_tokens:
        return blocks.allocate_slots(cfg, d, req, n)
    return blocks.admit_with_hit(cfg, d, req, hit, n, state, swa_hit)


@models("vllm.v1.core.sched.scheduler.Scheduler.schedule")
def admit_waiting(cfg: SpecConfig, d: Draft, req: int, c: rq.RequestCounters, hit_tokens: int,
                  padded: bool) -> None:
    """The admission itself: ``req`` (counters ``c`` before its allocation) joins
    ``running``, RUNNING, from its cache hit (a loaded request keeps its computed tokens);
    padded, its next drafts are the k -1 placeholders."""
    d.running.append(req)
    if c.num_computed_tokens:
        d.counters[req] = c._replace(status=A.lit(rq.RUNNING))
    else:
        d.counters[req] = rq.admit(A, c, A.lit(hit_tokens))
    if padded:  # the padding positions are -1 drafts
        d.counters[req] = d.counters[req]._replace(num_spec_token_ids=cfg.num_speculative_tokens)


@models("vllm.v1.core.sched.scheduler.Scheduler.schedule")
def requeue_skipped(cfg: SpecConfig, d: Draft, skipped: dict[str, list[int]]) -> None:
    """The skipped requests go back to the front of their queues (``prepend_requests``)."""
    d.kv_holding[:0] = skipped[SKIP_TO_KV_HOLDING]
    d.waiting[:0] = skipped[SKIP_TO_WAITING]
    policy.order_queues(cfg, d)


@models("vllm.v1.core.sched.scheduler.Scheduler._update_after_schedule",
        "vllm.v1.core.sched.async_scheduler.AsyncScheduler._update_after_schedule")
def _entry(cfg: SpecConfig, d: Draft, req: int, n: int, padded: bool = False) -> StepEntry:
    """Apply ``_update_after_schedule`` to ``req`` and describe its share of the step.

    ``padded``: its drafts are ``pad_spec_decode``'s -1 ids, which vLLM's rejection
    sampler always rejects (``rejection_sampler.py``, the draft-id < 0 test).
    """
    before = d.counters[req]
    connector.scheduled(d, req)
    drafts = rq.scheduled_drafts(A, d.params[req], before, n)
    after = rq.after_schedule(A, d.params[req], before, n, d.sched_step_seq, cfg.knobs)
    d.counters[req] = after
    blocks.record_hashes(cfg, d, req, before.num_cached_tokens)
    first, last = before.num_computed_tokens, after.num_computed_tokens - 1
    table = d.block_tables[req]
    written = table[first // cfg.block_size : last // cfg.block_size + 1]
    sampled = 0
    if not after.is_prefill_chunk:
        sampled = after.num_computed_tokens - drafts - d.params[req].num_prompt_tokens + 1
    else:
        d.emit(ev.CHUNKED_PREFILL)
    return StepEntry(req=req, num_tokens=n, sampled_position=sampled, written_blocks=written,
                     num_drafts=drafts, start_position=first, padded_drafts=padded and drafts > 0,
                     state_blocks=mamba.state_blocks(cfg, d.mamba_tables[req] if cfg.mamba_cache_mode else (),
                                                     first, after.num_computed_tokens))


@models("vllm.v1.core.sched.scheduler.Scheduler.schedule")
def waiting_pass_allowed(d: Draft, preempted: list[int]) -> bool:
    """Pass 2 runs only if pass 1 preempted nobody (``if not preempted_reqs``) and the
    scheduler is not paused with ``PAUSED_ALL``."""
    return not preempted and d.pause_state != PAUSED_ALL


@models("vllm.v1.core.sched.scheduler.Scheduler.schedule")
def admits_new(d: Draft) -> bool:
    """Pass 2 draws on ``waiting`` only when unpaused: under ``PAUSED_NEW`` only requests
    holding KV blocks (``kv_holding_waiting``) are admitted."""
    return d.pause_state == UNPAUSED


@models("vllm.v1.core.sched.scheduler.Scheduler.schedule")
def step_budget(cfg: SpecConfig, d: Draft) -> int:
    """The step's token budget: ``max_num_batched_tokens``, 0 under ``PAUSED_ALL``."""
    return 0 if d.pause_state == PAUSED_ALL else cfg.token_budget


def record_pause_breach(s: EngineState, d: Draft, scheduled: list[tuple[int, int]]) -> None:
    """Ghost (``pause_respected``): mark a step that runs anything under ``PAUSED_ALL``, or,
    under ``PAUSED_NEW``, a request that was in ``waiting`` (not holding KV) before the call."""
    if s.pause_state == PAUSED_ALL and scheduled:
        d.pause_breached = True
    if s.pause_state == PAUSED_NEW and any(req in s.waiting for req, _ in scheduled):
        d.pause_breached = True


@models("vllm.v1.core.sched.scheduler.Scheduler.schedule",
        "vllm.v1.engine.core.EngineCore.step_with_batch_queue")
def schedule(cfg: SpecConfig, s: EngineState) -> tuple[EngineState, frozenset[str]]:
    """One ``schedule()`` call; the new step is appended to the batch queue."""
    d = Draft.of(s)
    if cfg.knobs.async_scheduling and cfg.knobs.decode_stagger > 1:
        d.counters = [rq.tick_decode_wait(A, c) for c in d.counters]
    scheduled: list[tuple[int, int]] = []
    padded: set[int] = set()
    threshold = policy.long_prefill_threshold(cfg, d)
    enc = encoder.new_pass(cfg)
    budget, preempted = schedule_running(cfg, d, step_budget(cfg, d), scheduled, threshold, enc)
    if waiting_pass_allowed(d, preempted):
        schedule_waiting(cfg, d, budget, scheduled, padded, threshold, enc)
    record_pause_breach(s, d, scheduled)
    seq = 0
    if cfg.defer_block_free and scheduled:
        d.sched_step_seq += 1
        seq = d.sched_step_seq
    before = {req: d.counters[req] for req, _ in scheduled}
    offload.build_connector_meta(cfg, s, d, scheduled)
    entries = tuple(_entry(cfg, d, req, n, req in padded) for req, n in scheduled)
    offload.check_store_reads(cfg, s, d, {e.req: set(e.written_blocks) for e in entries} | offload.loads_started(s, d))
    pending = cfg.async_scheduling and any(
        e.sampled_position and rq.defers_sampling(A, d.params[e.req], before[e.req]) for e in entries)
    d.finished_pending = False  # finished_req_ids went out with this SchedulerOutput
    step = encoder.finish_step(cfg, d, enc, Step(entries=entries, seq=seq))
    if not entries:
        d.emit(ev.EMPTY_STEP)
    if pending:
        d.deferred_step = step  # forward pass runs now; sampling waits (step_with_batch_queue)
        d.emit(ev.STRUCTURED_OUTPUT_DEFERRAL)
    else:
        sample(d, step)
    d.call_in_progress = call_goes_on(cfg, d, bool(entries))
    return d.freeze(), frozenset(d.events)


@models("vllm.v1.engine.core.EngineCore.step_with_batch_queue")
def call_goes_on(cfg: SpecConfig, d: Draft, model_executed: bool) -> bool:
    """Whether ``EngineCore.step_with_batch_queue`` goes on to process the oldest step
    after this ``schedule()`` instead of returning to its caller.

    It returns only if the step was queued, the queue has room, and the step ran
    the model or requests remain (``model_executed or has_requests()``): after an
    empty step with nothing left to schedule it blocks on the oldest output.
    """
    if cfg.loop == "free":
        return False  # the free loop has no calls: nothing to remember
    if d.deferred_step is not None or len(d.batch_queue) >= cfg.batch_queue_depth:
        return True
    return not (model_executed or has_requests(d))


@models("vllm.v1.core.sched.scheduler.Scheduler.get_grammar_bitmask",
        "vllm.v1.engine.core.EngineCore.step_with_batch_queue")
def sample(d: Draft, step: Step) -> None:
    """``get_grammar_bitmask`` + ``sample_tokens``, then ``batch_queue.appendleft``."""
    for e in step.entries:
        if e.sampled_position:
            d.counters[e.req] = rq.grammar_bitmask(A, d.params[e.req], d.counters[e.req], e.sampled_position)
    d.batch_queue.append(step)
