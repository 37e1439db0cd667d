"""The abstraction function: reference engine state -> spec ``EngineState``.

Each spec field is read off the reference's objects:

===========================  ==============================================
spec (``spec/state.py``)     reference
===========================  ==============================================
params[i]                    (len(prompt), max_tokens, the model's EOS position)
counters[i].status           ``Request.status``; NOT_ARRIVED before add_request
O, C, H, F, X, D, L          len(output_token_ids), num_computed_tokens, ...
is_prefill_chunk             ``Request.is_prefill_chunk``
num_cached_tokens            ``Request.num_cached_tokens_frontier``
decode_wait                  max(next_decode_eligible_step - current_step, 0)
ghost counters               the request's stats (wasted steps, out of order,
                             output-time frontier)
block_tables[i]              ids of the request's blocks in ``req_to_blocks``
waiting, running             indices of the scheduler's queues, in order
batch_queue                  the engine's in-flight steps, oldest first; an
                             entry's written blocks are its block table
                             sliced by the positions it computes
free_blocks                  the linked free queue, front to back
block_hashes[b]              (request, index) whose chained hash block b
                             carries, or None
deferred_frees               (fence, unhashed ids, hashed ids) per parked entry
Q, R                         sched_step_seq, processed_step_seq
finished_pending             ``finished_req_ids`` is not empty
forced_preemptions_left      the harness's budget of reset_prefix_cache calls
call_in_progress             ``EngineCore.call_in_progress`` (exact loop only)
===========================  ==============================================

``representation_problems`` checks the reference's *derived* data (reference
counts, the hash index, the hash chains, the token contents) against the
state, so that two reference states with the same abstraction behave the
same: this is what makes exploring the reference modulo its abstraction sound.

Example:
    >>> from asyncspec.spec.config import SpecConfig
    >>> from asyncspec.spec.state import initial_state
    >>> from asyncspec.reference.reference_harness import ReferenceHarness
    >>> cfg = SpecConfig(name="x", requests=((3, 2),), num_blocks=3, block_size=2)
    >>> h = ReferenceHarness.from_spec(cfg, (1,))
    >>> abstract(h) == initial_state(cfg, (1,))
    True
    >>> representation_problems(h)
    []
"""
from __future__ import annotations

from asyncspec.spec import request as rq
from asyncspec.spec.state import BlockHash, DeferredFree, EngineState, Step, StepEntry

from asyncspec.reference.block_pool import KVCacheBlock
from asyncspec.reference.reference_engine import output_token, prompt_token, request_index
from asyncspec.reference.reference_harness import ReferenceHarness
from asyncspec.reference.outputs import SchedulerOutput
from asyncspec.reference.reference_request import NONE_HASH, Request, hash_block_tokens


def abstract(h: ReferenceHarness) -> EngineState:
    """The spec state the reference harness ``h`` is in."""
    sched = h.core.scheduler
    pool = sched.kv_cache_manager.block_pool
    return EngineState(
        params=tuple(_params(h, i) for i in range(len(h.requests))),
        counters=tuple(_counters(h, i) for i in range(len(h.requests))),
        block_tables=tuple(
            tuple(b.block_id for b in sched.kv_cache_manager.get_blocks(r)) for r in h.requests),
        waiting=tuple(request_index(r.request_id) for r in sched.waiting),
        running=tuple(request_index(r.request_id) for r in sched.running),
        batch_queue=tuple(_step(h, so) for so in h.core.in_flight()),
        deferred_step=None,  # the reference has no structured output
        free_blocks=tuple(pool.free_block_ids()),
        block_hashes=_block_hashes(h),
        deferred_frees=tuple(_parked(fence, blocks) for fence, blocks in sched.deferred_frees),
        sched_step_seq=sched.sched_step_seq,
        processed_step_seq=sched.processed_step_seq,
        finished_pending=bool(sched.finished_req_ids),
        forced_preemptions_left=h.forced_preemptions_left,
        call_in_progress=h.loop == "exact" and h.core.call_in_progress,
    )


def _params(h: ReferenceHarness, i: int) -> rq.RequestParams:
    r = h.requests[i]
    return rq.RequestParams(r.num_prompt_tokens, r.max_tokens, h.eos_positions[i])


def _counters(h: ReferenceHarness, i: int) -> rq.RequestCounters:
    r = h.requests[i]
    sched = h.core.scheduler
    return rq.RequestCounters(
        status=int(r.status) if i < h.num_arrived else rq.NOT_ARRIVED,
        num_output_tokens=r.num_output_tokens,
        num_computed_tokens=r.num_computed_tokens,
        num_output_placeholders=r.num_output_placeholders,
        num_in_flight_tokens=r.num_in_flight_tokens,
        num_stale_output_tokens=r.num_stale_output_tokens,
        drop_stale_output=r.drop_stale_output,
        last_sched_seq=r.last_sched_seq,
        is_prefill_chunk=r.is_prefill_chunk,
        num_cached_tokens=r.num_cached_tokens_frontier,
        decode_wait=max(r.next_decode_eligible_step - sched.current_step, 0),
        output_cached_tokens=r.num_output_cached_tokens,
        num_wasted_steps=r.num_wasted_steps,
        output_out_of_order=r.output_out_of_order,
        abort_deferred=r.abort_deferred,
    )


def _step(h: ReferenceHarness, so: SchedulerOutput) -> Step:
    bs = h.config.block_size
    entries = tuple(
        StepEntry(request_index(e.request_id), e.num_tokens, e.sampled_position,
                  e.written_block_ids(bs), num_drafts=0, start_position=e.start_position)
        for e in so.scheduled)
    return Step(entries, so.sched_step_seq)


def _hash_owners(h: ReferenceHarness) -> dict[int, BlockHash]:
    """Every request's block hashes, as (request, block index); updated incrementally.

    Hashes are only ever appended to a request's list, so the map kept on the
    harness only needs the new ones (O(new full blocks) per call).
    """
    owners, seen = h.hash_owners, h.hash_owners_seen
    for i, r in enumerate(h.requests):
        for k in range(seen[i], len(r.block_hashes)):
            owners[r.block_hashes[k]] = BlockHash(i, k)
        seen[i] = len(r.block_hashes)
    return owners


def _block_hashes(h: ReferenceHarness) -> tuple[BlockHash | None, ...]:
    owners = _hash_owners(h)
    blocks = h.core.scheduler.kv_cache_manager.block_pool.blocks
    return tuple(None if b.block_hash is None else owners[b.block_hash] for b in blocks)


def _parked(fence: int, blocks: list[KVCacheBlock]) -> DeferredFree:
    first = tuple(b.block_id for b in blocks if b.block_hash is None)
    last = tuple(b.block_id for b in blocks if b.block_hash is not None)
    return DeferredFree(fence, first, last)


# ---------------------------------------------------------------- representation invariants


def representation_problems(h: ReferenceHarness) -> list[str]:
    """Where the reference's derived data disagrees with its state (empty = consistent)."""
    problems: list[str] = []
    problems += _token_problems(h)
    problems += _ownership_problems(h)
    problems += _hash_index_problems(h)
    problems += _queue_problems(h)
    return problems


def _expected_hashes(r: Request) -> list[int]:
    out, parent, bs = [], NONE_HASH, r.block_size
    for start in range(0, r.num_tokens - bs + 1, bs):
        parent = hash_block_tokens(parent, tuple(r.token_at(i) for i in range(start, start + bs)))
        out.append(parent)
    return out


def _token_problems(h: ReferenceHarness) -> list[str]:
    problems = []
    for i, r in enumerate(h.requests):
        prompt = [prompt_token(i, k) for k in range(r.num_prompt_tokens)]
        outputs = [output_token(i, k, h.eos_positions[i]) for k in range(1, r.num_output_tokens + 1)]
        if r.prompt_token_ids != prompt or r.output_token_ids != outputs:
            problems.append(f"{r.request_id}: tokens are not the model's tokens")
        if r.block_hashes != _expected_hashes(r):
            problems.append(f"{r.request_id}: block hashes do not chain over its known tokens")
    return problems


def _ownership_problems(h: ReferenceHarness) -> list[str]:
    """Reference counts equal holders; the free queue holds exactly the unreferenced blocks."""
    sched = h.core.scheduler
    pool = sched.kv_cache_manager.block_pool
    holders = [0] * len(pool.blocks)
    for table in sched.kv_cache_manager.req_to_blocks.values():
        for b in table:
            holders[b.block_id] += 1
    for _, blocks in sched.deferred_frees:
        for b in blocks:
            holders[b.block_id] += 1
    problems = [f"block {b.block_id}: ref_cnt {b.ref_cnt} but {holders[b.block_id]} holder(s)"
                for b in pool.blocks if b.ref_cnt != holders[b.block_id]]
    free = pool.free_block_ids()
    if sorted(free) != [b.block_id for b in pool.blocks if b.ref_cnt == 0]:
        problems.append(f"free queue {free} is not the set of unreferenced blocks")
    if len(free) != pool.get_num_free_blocks():
        problems.append("free-block count disagrees with the free queue")
    stamps = [b.free_stamp for b in pool.free_block_queue]
    if stamps != sorted(stamps):
        problems.append("free-queue stamps are not increasing front to back")
    return problems


def _hash_index_problems(h: ReferenceHarness) -> list[str]:
    """The hash index lists exactly the hashed blocks; tables are hashed up to the frontier."""
    sched = h.core.scheduler
    kv = sched.kv_cache_manager
    pool = kv.block_pool
    indexed = {(bh, bid) for bh, same in pool.cached_block_hash_to_block.items() for bid in same}
    hashed = {(b.block_hash, b.block_id) for b in pool.blocks if b.block_hash is not None}
    problems = [] if indexed == hashed else ["the hash index disagrees with the blocks' hashes"]
    owners = _hash_owners(h)
    problems += [f"block {bid} carries a hash no request has" for bh, bid in hashed if bh not in owners]
    for r in h.requests:
        table = kv.req_to_blocks.get(r.request_id, [])
        cached = r.num_cached_tokens_frontier // r.block_size
        for k, b in enumerate(table):
            want = r.block_hashes[k] if k < cached else None
            if b.block_hash != want:
                problems.append(f"{r.request_id}: block {b.block_id} (index {k}) hash is not its frontier's")
    return problems


def _queue_problems(h: ReferenceHarness) -> list[str]:
    sched = h.core.scheduler
    queued = {r.request_id for r in sched.waiting} | {r.request_id for r in sched.running}
    problems = [] if queued == set(sched.requests) else ["requests dict != waiting + running"]
    if len(queued) != len(sched.waiting) + len(sched.running):
        problems.append("a request is queued twice")
    return problems
