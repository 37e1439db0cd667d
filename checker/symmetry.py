"""Canonical forms: states equal up to renaming block ids and shifting step fences.

Block ids are interchangeable (nothing in the spec compares two ids except for
equality), so a state is renamed by the order in which blocks first appear:
block tables in request order, then the sliding-window tables in request order (the
null block stays), then parked frees, then the free queue.  With
deferral on, ``sched_step_seq``/``processed_step_seq``/fences/``last_sched_seq``
only matter relative to ``processed_step_seq``, so they are shifted to make it
0 (and values below it clamped), which keeps the state space finite.

Requests are *not* permuted: FIFO queues already record arrival order, so
identical requests rarely meet in symmetric states (measured gain 1.1-1.3x
at twice the cost per state; ``shared/notes/modelling-findings.md``).
"""
from __future__ import annotations

from asyncspec.spec.state import NULL_BLOCK, BlockHash, DeferredFree, EngineState, Step


def _block_order(s: EngineState) -> dict[int, int]:
    mapping: dict[int, int] = {}
    for table in s.block_tables:
        for b in table:
            mapping.setdefault(b, len(mapping))
    for table in s.swa_block_tables + s.mamba_tables:  # a second group's tables: NULL_BLOCK is no block
        for b in table:
            if b != NULL_BLOCK:
                mapping.setdefault(b, len(mapping))
    for entry in s.deferred_frees:
        for b in entry.evict_first + entry.evict_last:
            mapping.setdefault(b, len(mapping))
    for b in s.free_blocks:
        mapping.setdefault(b, len(mapping))
    return mapping


def _rename_step(step: Step, m: dict[int, int], shift: int) -> Step:
    entries = tuple(
        e._replace(written_blocks=tuple(m[b] for b in e.written_blocks),
                   state_blocks=tuple(m.get(b, b) for b in e.state_blocks))
        for e in step.entries
    )
    return step._replace(entries=entries, seq=max(step.seq - shift, 0))


def _rename_hashes(hashes: tuple[BlockHash | None, ...], m: dict[int, int]) -> tuple[BlockHash | None, ...]:
    renamed: list[BlockHash | None] = [None] * len(hashes)
    for b, h in enumerate(hashes):
        renamed[m[b]] = h
    return tuple(renamed)


def _rename_swa(tables: tuple[tuple[int, ...], ...], m: dict[int, int]) -> tuple[tuple[int, ...], ...]:
    """The sliding-window tables renamed; the null block is no block id."""
    return tuple(tuple(b if b == NULL_BLOCK else m[b] for b in t) for t in tables)


def canonical(s: EngineState) -> EngineState:
    """The representative of ``s``'s symmetry class."""
    m = _block_order(s)
    shift = s.processed_step_seq
    counters = s.counters
    if shift:
        counters = tuple(c._replace(last_sched_seq=max(c.last_sched_seq - shift, 0)) for c in counters)
    return EngineState(
        params=s.params,
        counters=counters,
        block_tables=tuple(tuple(m[b] for b in t) for t in s.block_tables),
        waiting=s.waiting,
        running=s.running,
        batch_queue=tuple(_rename_step(step, m, shift) for step in s.batch_queue),
        deferred_step=None if s.deferred_step is None else _rename_step(s.deferred_step, m, shift),
        free_blocks=tuple(m[b] for b in s.free_blocks),
        block_hashes=_rename_hashes(s.block_hashes, m),
        deferred_frees=tuple(
            DeferredFree(
                max(e.fence - shift, 0),
                tuple(m[b] for b in e.evict_first),
                tuple(m[b] for b in e.evict_last),
            )
            for e in s.deferred_frees
        ),
        sched_step_seq=s.sched_step_seq - shift,
        processed_step_seq=0,
        finished_pending=s.finished_pending,
        forced_preemptions_left=s.forced_preemptions_left,
        call_in_progress=s.call_in_progress,
        swa_block_tables=_rename_swa(s.swa_block_tables, m),
        pause_state=s.pause_state,
        pauses_left=s.pauses_left,
        pause_breached=s.pause_breached,
        kv_holding=s.kv_holding,  # request ids, no block ids: unchanged (connectors, streaming sessions)
        kv_transfer=s.kv_transfer,
        stream_sent=s.stream_sent,
        stream_applied=s.stream_applied,
        store_jobs=tuple(j._replace(blocks=tuple(m[b] for b in j.blocks)) for j in s.store_jobs),
        offload_stored=s.offload_stored,
        offload_tables=tuple(tuple(m[b] for b in t) for t in s.offload_tables),
        offload_finished=s.offload_finished,
        store_breached=s.store_breached,
        enc_inputs=s.enc_inputs,  # encoder-cache state names items and requests, no blocks: unchanged
        enc_entries=s.enc_entries,
        enc_freeable=s.enc_freeable,
        worker_encoder=s.worker_encoder,
        encoder_miss=s.encoder_miss,
        mamba_tables=_rename_swa(s.mamba_tables, m),  # NULL_BLOCK stays
        mamba_junction=s.mamba_junction,
        mamba_misaligned=s.mamba_misaligned,
    )


def identity(s: EngineState) -> EngineState:
    """No reduction (``--no-symmetry``): every concrete state is distinct."""
    return s
