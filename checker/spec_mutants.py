"""Seeded bugs in the spec, each of which the checker must kill.

A mutant replaces one function of a spec module (``spec/request.py`` or
``spec/blocks.py``) for the duration of a check; the spec calls those
functions through the module (``rq.preempt``), so the replacement takes
effect everywhere, in the checker and in the prover alike.  Most mutants
re-create a bug vLLM has had (the PR is named); a mutant is *killed* when
checking its config reports a violation of the property it targets.

Example:
    >>> m = MUTANTS_BY_NAME["stale_delivery_decrements_placeholders"]
    >>> run_mutant(m).killed
    True
"""
from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from asyncspec.spec import (
    blocks, connector, draft, encoder, mamba, offload, output, request as rq, scheduler, streaming, swa,
)
from asyncspec.spec.algebra import Arith
from asyncspec.spec.state import KV_FAILED

from asyncspec.checker.bfs import explore
from asyncspec.checker.configs import named_configs
from asyncspec.checker.dp_mutants import DP_MUTANT_ROWS, explore_dp_mutant, is_dp_config
from asyncspec.checker.fast_explorer import explore_fast
from asyncspec.checker.spec_mutants_features import (
    _evictions_not_sent, _finished_jobs_unwatched, _frees_by_computed, _hit_not_reconciled, _no_aligned_split,
    _no_revive, _store_past_tokens,
)

Patch = tuple[Any, str, Callable[[Callable[..., Any]], Callable[..., Any]]]  # module, name, wrap(original)


@dataclass(frozen=True)
class Mutant:
    """One seeded bug: where it is, what it should break, and where to look."""

    name: str
    property: str  # the property the checker must report violated
    config: str  # the named config on which it is checked
    description: str
    patches: tuple[Patch, ...]


@dataclass(frozen=True)
class MutantResult:
    """Outcome of checking one mutant."""

    name: str
    property: str
    killed: bool
    violated: tuple[str, ...]  # every property reported violated
    distinct_states: int
    interrupted: bool = False  # Ctrl-C or SIGTERM ended its check early

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "property": self.property, "killed": self.killed,
                "violated": list(self.violated), "distinct_states": self.distinct_states}


@contextlib.contextmanager
def applied(patches: tuple[Patch, ...]) -> Iterator[None]:
    """Install the patches, and restore the originals afterwards (even on error)."""
    saved = [(module, name, getattr(module, name)) for module, name, _ in patches]
    try:
        for module, name, wrap in patches:
            setattr(module, name, wrap(getattr(module, name)))
        yield
    finally:
        for module, name, original in saved:
            setattr(module, name, original)


# ---------------------------------------------------------------- the bug catalogue


def _stale_as_fresh(orig: Callable[..., Any]) -> Callable[..., Any]:
    """Pre-#48245: a stale delivery decrements the (already reset) placeholders."""
    def mutant(A: Arith, p: Any, c: Any, is_stale: Any, position: Any, accepted: Any, knobs: Any) -> Any:
        out = orig(A, p, c, A.false(), position, accepted, knobs)
        return out._replace(num_output_placeholders=c.num_output_placeholders - A.ite(
            is_stale, A.lit(1), c.num_output_placeholders - out.num_output_placeholders))
    return mutant


def _drain_always(orig: Callable[..., Any]) -> Callable[..., Any]:
    """The stale drain subtracts even when nothing is stale."""
    def mutant(A: Arith, c: Any, n: Any) -> Any:
        out, stale = orig(A, c, n)
        return out._replace(num_stale_output_tokens=c.num_stale_output_tokens - n), stale
    return mutant


def _preempt_keeps_placeholders(orig: Callable[..., Any]) -> Callable[..., Any]:
    """_preempt_request forgets ``num_output_placeholders := 0``."""
    def mutant(A: Arith, c: Any, drop: Any) -> Any:
        return orig(A, c, drop)._replace(num_output_placeholders=c.num_output_placeholders)
    return mutant


def _output_decrements_computed(orig: Callable[..., Any]) -> Callable[..., Any]:
    """Fresh output takes one from num_computed_tokens too (confuses C with H)."""
    def mutant(A: Arith, p: Any, c: Any, is_stale: Any, position: Any, accepted: Any, knobs: Any) -> Any:
        out = orig(A, p, c, is_stale, position, accepted, knobs)
        return out._replace(num_computed_tokens=out.num_computed_tokens - A.ite(is_stale, A.lit(0), A.lit(1)))
    return mutant


def _preempt_adds_stale(orig: Callable[..., Any]) -> Callable[..., Any]:
    """X := X + F instead of X := F: counts an undrained stale share twice."""
    def mutant(A: Arith, c: Any, drop: Any) -> Any:
        out = orig(A, c, drop)
        return out._replace(num_stale_output_tokens=c.num_stale_output_tokens + c.num_in_flight_tokens)
    return mutant


def _two_placeholders(orig: Callable[..., Any]) -> Callable[..., Any]:
    """A sampling step reserves two placeholders instead of one."""
    def mutant(A: Arith, p: Any, c: Any, n: Any, seq: Any, knobs: Any) -> Any:
        out = orig(A, p, c, n, seq, knobs)
        extra = A.ite(out.num_output_placeholders > c.num_output_placeholders, A.lit(1), A.lit(0))
        return out._replace(num_output_placeholders=out.num_output_placeholders + extra)
    return mutant


def _placeholder_on_chunk(orig: Callable[..., Any]) -> Callable[..., Any]:
    """A prefill chunk, which samples nothing, also reserves a placeholder."""
    def mutant(A: Arith, p: Any, c: Any, n: Any, seq: Any, knobs: Any) -> Any:
        out = orig(A, p, c, n, seq, knobs)
        extra = A.ite(out.is_prefill_chunk, A.lit(1), A.lit(0))
        return out._replace(num_output_placeholders=out.num_output_placeholders + extra)
    return mutant


def _stop_late(orig: Callable[..., Any]) -> Callable[..., Any]:
    """check_stop compares ``num_output_tokens > max_tokens`` (off by one)."""
    def mutant(A: Arith, p: Any, c: Any, position: Any, count: Any, max_model_len: Any = None) -> Any:
        return orig(A, p._replace(max_tokens=p.max_tokens + 1), c, position, count, max_model_len)
    return mutant


def _no_guard(orig: Callable[..., Any]) -> Callable[..., Any]:
    """Before #27922: no max_tokens guard in the running pass."""
    def mutant(A: Arith, p: Any, c: Any) -> Any:
        return A.false()
    return mutant


def _cache_placeholders(orig: Callable[..., Any]) -> Callable[..., Any]:
    """cache_blocks is not capped at known tokens: it hashes placeholder positions."""
    def mutant(A: Arith, k: Any, p: Any, c: Any, upto: Any) -> Any:
        full = A.div(upto, k.block_size) * k.block_size
        return A.max(c.num_cached_tokens, full)
    return mutant


def _output_cache_optimistic(orig: Callable[..., Any]) -> Callable[..., Any]:
    """Output-time caching up to num_computed_tokens (ignores in-flight KV writes)."""
    def mutant(A: Arith, p: Any, c: Any, is_stale: Any, position: Any, accepted: Any, knobs: Any) -> Any:
        out = orig(A, p, c, is_stale, position, accepted, knobs)
        cache_now = A.and_(A.not_(is_stale), c.status == rq.RUNNING, c.num_output_placeholders > 0)
        base = out._replace(num_cached_tokens=c.output_cached_tokens)
        optimistic = rq.cached_frontier(A, knobs, p, base, out.num_computed_tokens)
        return out._replace(output_cached_tokens=A.ite(cache_now, optimistic, out.output_cached_tokens))
    return mutant


def _free_keeps_table(orig: Callable[..., Any]) -> Callable[..., Any]:
    """Blocks go back to the pool but stay in the request's block table."""
    def mutant(cfg: Any, d: Any, req: int) -> None:
        table = d.block_tables[req]
        orig(cfg, d, req)
        d.block_tables[req] = table
    return mutant


def _ignore_fence(orig: Callable[..., Any]) -> Callable[..., Any]:
    """Deferral ignored: blocks are freed while an in-flight step writes them."""
    def mutant(cfg: Any, d: Any, req: int) -> bool:
        return True
    return mutant


def _no_stale_skip(orig: Callable[..., Any]) -> Callable[..., Any]:
    """Before 0.31: pass 2 resumes a request whose deliverable stale output is in flight."""
    def mutant(A: Arith, c: Any) -> Any:
        return A.false()
    return mutant


def _stale_eos_ignored(orig: Callable[..., Any]) -> Callable[..., Any]:
    """A stale delivery appends its token but never runs check_stop."""
    def mutant(A: Arith, p: Any, c: Any, is_stale: Any, position: Any, accepted: Any, knobs: Any) -> Any:
        out = orig(A, p, c, is_stale, position, accepted, knobs)
        return out._replace(status=A.ite(is_stale, c.status, out.status))
    return mutant


def _fence_ahead(orig: Callable[..., Any]) -> Callable[..., Any]:
    """last_sched_seq is set one past the step's sched_step_seq."""
    def mutant(A: Arith, p: Any, c: Any, n: Any, seq: Any, knobs: Any) -> Any:
        return orig(A, p, c, n, seq + 1, knobs)
    return mutant


def _never_drain(orig: Callable[..., Any]) -> Callable[..., Any]:
    """The deferred-free drain never runs: parked blocks leak."""
    def mutant(d: Any) -> None:
        return None
    return mutant


def _freeze_processed(orig: Callable[..., Any]) -> Callable[..., Any]:
    """The step fence never advances."""
    def mutant(d: Any) -> None:
        return None
    return mutant


def _stays_running(orig: Callable[..., Any]) -> Callable[..., Any]:
    """A request stopped in update_from_output is never freed: it stays in
    ``running`` with its blocks, and is scheduled again."""
    def mutant(cfg: Any, d: Any, req: int) -> None:
        return None
    return mutant


def _paused_all_keeps_budget(orig: Callable[..., Any]) -> Callable[..., Any]:
    """The step budget ignores ``PAUSED_ALL``: a kept pause goes on scheduling."""
    def mutant(cfg: Any, d: Any) -> int:
        return int(cfg.token_budget)
    return mutant


def _paused_new_admits_waiting(orig: Callable[..., Any]) -> Callable[..., Any]:
    """Pass 2 draws on ``waiting`` under ``PAUSED_NEW`` too."""
    def mutant(d: Any) -> bool:
        return True
    return mutant


def _unfinished_ignores_pause(orig: Callable[..., Any]) -> Callable[..., Any]:
    """``get_num_unfinished_requests`` counts every queue whatever the pause state."""
    def mutant(d: Any) -> bool:
        return bool(d.running or d.kv_holding or d.waiting)
    return mutant


def _finish_leaks(orig: Callable[..., Any]) -> Callable[..., Any]:
    """_free_request without _free_blocks."""
    def mutant(cfg: Any, d: Any, req: int) -> None:
        for queue in (d.running, d.waiting):
            if req in queue:
                queue.remove(req)
    return mutant


def _hit_whole_sequence(orig: Callable[..., Any]) -> Callable[..., Any]:
    """A prefix-cache hit may cover the last known token: nothing left to compute."""
    def mutant(cfg: Any, d: Any, req: int) -> tuple[int, ...]:
        from asyncspec.spec.state import BlockHash
        by_hash = {d.block_hashes[b]: b for b in d.free_blocks if d.block_hashes[b] is not None}
        hit: list[int] = []
        while BlockHash(req, len(hit)) in by_hash:
            hit.append(by_hash[BlockHash(req, len(hit))])
        return tuple(hit)
    return mutant


def _rejection_keeps_computed(orig: Callable[..., Any]) -> Callable[..., Any]:
    """Rejected drafts roll back the placeholders but not num_computed_tokens."""
    def mutant(A: Arith, c: Any, num_rejected: Any, is_stale: Any) -> Any:
        return orig(A, c, num_rejected, is_stale)._replace(num_computed_tokens=c.num_computed_tokens)
    return mutant


def _no_position_correction(orig: Callable[..., Any]) -> Callable[..., Any]:
    """The worker runs in-flight steps at the positions the scheduler planned,
    ignoring rejected drafts (the V1 runner before vllm#32951)."""
    def mutant(cfg: Any, d: Any, req: int, rejected: int) -> None:
        return None
    return mutant


def _never_defer_sampling(orig: Callable[..., Any]) -> Callable[..., Any]:
    """pending_structured_output_tokens never set: the bitmask is built too early."""
    def mutant(A: Arith, p: Any, c: Any) -> Any:
        return A.false()
    return mutant


def _every_abort_wastes(orig: Callable[..., Any]) -> Callable[..., Any]:
    """Every aborted request's late rows count as wasted, not only a deferred abort's."""
    def mutant(A: Arith, c: Any) -> Any:
        return A.or_(orig(A, c), c.status == rq.FINISHED_ABORTED)
    return mutant


def _keep_first_invalid(orig: Callable[..., Any]) -> Callable[..., Any]:
    """_update_requests_with_invalid_blocks truncating after the first invalid block,
    (idx + 1) x block_size: that block's positions count as computed."""
    def mutant(cfg: Any, d: Any, report: Any) -> Any:
        out = orig(cfg, d, report)
        first = None if report is None else connector.invalid_from(report[0])
        if first is not None and d.kv_transfer[report[1]] == KV_FAILED:
            d.counters[report[1]] = d.counters[report[1]]._replace(num_computed_tokens=(first + 1) * cfg.block_size)
        return out
    return mutant


def _invalid_keeps_computed(orig: Callable[..., Any]) -> Callable[..., Any]:
    """An async load's invalid blocks mark the load failed but leave num_computed_tokens at
    the loaded count (the rollback forgotten)."""
    def mutant(cfg: Any, d: Any, report: Any) -> Any:
        req = None if report is None else report[1]
        before = None if req is None else d.counters[req].num_computed_tokens
        out = orig(cfg, d, report)
        if req is not None and before is not None and d.kv_transfer[req] == KV_FAILED:
            d.counters[req] = d.counters[req]._replace(num_computed_tokens=before)
        return out
    return mutant


def _stop_keeps_in_flight(orig: Callable[..., Any]) -> Callable[..., Any]:
    """A stopped session's in-flight steps are not marked stale: their output reaches the next turn."""
    def mutant(A: Arith, c: Any) -> Any:
        out = orig(A, c)
        return out._replace(num_stale_output_tokens=c.num_stale_output_tokens, drop_stale_output=c.drop_stale_output)
    return mutant


def _paused_frees_slot(orig: Callable[..., Any]) -> Callable[..., Any]:
    """The waiting pass counts only ``running`` (before the paused-session term of vLLM's check)."""
    def mutant(d: Any) -> int:
        return len(d.running)
    return mutant


MUTANTS: tuple[Mutant, ...] = (
    Mutant("stale_delivery_decrements_placeholders", "placeholders_nonnegative", "async-d2",
           "vLLM before #48245: stale output decremented the reset placeholders",
           ((rq, "deliver_tokens", _stale_as_fresh),)),
    Mutant("stale_drain_unconditional", "stale_nonnegative", "async-d2",
           "the stale drain runs for fresh output too",
           ((rq, "drain_in_flight", _drain_always),)),
    Mutant("fresh_output_decrements_computed", "computed_minus_placeholders", "async-d2",
           "fresh output decrements num_computed_tokens as well as the placeholders",
           ((rq, "deliver_tokens", _output_decrements_computed),)),
    Mutant("preempt_keeps_placeholders", "placeholders_le_in_flight", "async-d2",
           "_preempt_request does not zero num_output_placeholders",
           ((rq, "preempt", _preempt_keeps_placeholders),)),
    Mutant("two_placeholders_per_step", "placeholders_count_sampling_steps", "async-d2",
           "AsyncScheduler reserves two placeholders per sampling step",
           ((rq, "after_schedule", _two_placeholders),)),
    Mutant("placeholder_on_prefill_chunk", "placeholders_count_sampling_steps", "async-d2",
           "a non-sampling prefill chunk reserves a placeholder",
           ((rq, "after_schedule", _placeholder_on_chunk),)),
    Mutant("preempt_adds_stale", "stale_le_in_flight", "async-free",
           "X := X + F at preemption counts an undrained stale share twice",
           ((rq, "preempt", _preempt_adds_stale),)),
    Mutant("stop_check_off_by_one", "output_within_max_tokens", "async-d2",
           "check_stop lets one token past max_tokens",
           ((rq, "first_stop", _stop_late),)),
    Mutant("cache_placeholder_positions", "prefix_cache_frontier_known", "async-d2",
           "cache_blocks hashes positions whose token is still a placeholder",
           ((rq, "cached_frontier", _cache_placeholders),)),
    Mutant("output_cache_ignores_in_flight", "output_caching_kv_written", "async-d2",
           "output-time caching up to num_computed_tokens (0.33.0 uses C - F)",
           ((rq, "deliver_tokens", _output_cache_optimistic),)),
    Mutant("free_keeps_block_table", "blocks_conserved", "async-d2",
           "a freed request keeps its block table: blocks owned twice",
           ((blocks, "free_request_blocks", _free_keeps_table),)),
    Mutant("free_ignores_fence", "inflight_writes_safe", "async-d2-defer",
           "defer_block_free ignored: blocks freed under an in-flight write",
           ((blocks, "blocks_can_be_freed", _ignore_fence),)),
    Mutant("no_stale_resume_skip", "delivered_in_order", "finding-d3-no-stagger",
           "vLLM 0.27-0.30: resume while deliverable stale output is in flight",
           ((rq, "stale_output_blocks_resume", _no_stale_skip),)),
    Mutant("stale_eos_ignored", "matches_sync_output", "async-d2",
           "a stale delivery never runs check_stop, so EOS is missed",
           ((rq, "deliver_tokens", _stale_eos_ignored),)),
    Mutant("no_max_tokens_guard", "no_wasted_step_on_max_tokens", "async-d2",
           "vLLM before #27922: a step is scheduled past max_tokens",
           ((rq, "max_tokens_guard", _no_guard),)),
    Mutant("fence_ahead", "last_sched_seq_bounded", "async-d2-defer",
           "last_sched_seq set past sched_step_seq",
           ((rq, "after_schedule", _fence_ahead),)),
    Mutant("never_drain_deferred_frees", "deferred_frees_drained", "async-d2-defer",
           "_drain_deferred_frees never runs: parked blocks leak",
           ((blocks, "drain_deferred_frees", _never_drain),)),
    Mutant("processed_step_seq_frozen", "no_livelock", "async-d2-defer",
           "update_from_output never advances processed_step_seq: fences never pass",
           ((blocks, "step_processed", _freeze_processed),)),
    Mutant("prefix_hit_covers_last_token", "no_livelock", "async-d2-defer",
           "get_computed_blocks without the N - 1 cap: a resumed request has nothing to compute, the waiting "
           "pass skips it at 0 tokens (as vLLM's does) and it never runs again",
           ((blocks, "longest_cache_hit", _hit_whole_sequence),)),
    Mutant("finished_stays_running", "wasted_steps_bounded", "sync-d1",
           "a request stopped by its output is never freed: it stays running and is scheduled again",
           ((output, "free_finished", _stays_running),)),
    Mutant("rejection_keeps_computed", "computed_minus_placeholders", "async-d2-spec",
           "spec-decode verification rolls back H but not num_computed_tokens",
           ((rq, "reject_drafts", _rejection_keeps_computed),)),
    Mutant("no_worker_position_correction", "delivered_in_order", "async-d2-spec",
           "in-flight steps keep their planned positions after rejected drafts",
           ((output, "shift_in_flight", _no_position_correction),)),
    Mutant("structured_output_not_deferred", "grammar_in_order", "async-d2-structured",
           "sampling is not deferred for a grammar request with tokens in flight",
           ((rq, "defers_sampling", _never_defer_sampling),)),
    Mutant("every_abort_wastes", "wasted_steps_bounded", "sglang-overlap",
           "an immediate abort's rows in flight are charged as a deferred abort's wasted row",
           ((rq, "wastes_output_after_finish", _every_abort_wastes),)),
    Mutant("invalid_blocks_keep_first_invalid", "kv_rollback_to_valid_prefix", "kv-invalid-blocks",
           "invalid-block recovery truncates after the first invalid block, not at it",
           ((connector, "invalid_blocks", _keep_first_invalid),)),
    Mutant("invalid_blocks_keep_computed", "kv_rollback_to_valid_prefix", "kv-invalid-blocks",
           "invalid blocks of an async load mark it failed but keep num_computed_tokens",
           ((connector, "invalid_blocks", _invalid_keeps_computed),)),
    Mutant("finish_leaks_blocks", "no_deadlock", "async-d2",
           "a finished request leaves the queues but its blocks are never freed",
           ((output, "free_finished", _finish_leaks),)),
    Mutant("paused_all_keeps_budget", "pause_respected", "async-d2-pause",
           "PAUSED_ALL keeps the token budget: pause_scheduler(mode='keep') goes on scheduling (vllm#32351)",
           ((scheduler, "step_budget", _paused_all_keeps_budget),)),
    Mutant("paused_new_admits_waiting", "pause_respected", "async-d2-pause",
           "PAUSED_NEW admits waiting requests: adds made during a pause run before resume (vllm#34125)",
           ((scheduler, "admits_new", _paused_new_admits_waiting),)),
    Mutant("unfinished_ignores_pause", "no_livelock", "async-d2-pause",
           "get_num_unfinished_requests ignores the pause: a paused engine spins on empty steps (vllm#51487)",
           ((draft, "has_unfinished_requests", _unfinished_ignores_pause),)),
    Mutant("stream_stop_keeps_in_flight", "stopped_turn_output_dropped", "async-d2-stream",
           "a stopped streaming turn's in-flight output is not dropped: an old token reaches the new turn",
           ((streaming, "stop_frontier", _stop_keeps_in_flight),)),
    Mutant("paused_session_frees_slot", "paused_sessions_hold_slots", "async-d2-stream",
           "the waiting pass ignores paused sessions' model-runner slots (num_waiting_for_streaming_input)",
           ((streaming, "num_active", _paused_frees_slot),)),
    Mutant("offload_finished_jobs_unwatched", "store_reads_fenced", "kv-offloading",
           "OffloadingConnector.request_finished registers no deferred fences: a finished request's "
           "pending store reads blocks a later step rewrites",
           ((offload, "request_finished", _finished_jobs_unwatched),)),
    Mutant("offload_store_past_tokens", "offload_accounting", "kv-offloading",
           "the store horizon not capped by num_tokens: under async scheduling a decode's placeholder "
           "positions are stored as if computed",
           ((offload, "store_horizon", _store_past_tokens),)),
    Mutant("encoder_hit_stays_freeable", "encoder_output_available", "async-d2-encoder",
           "check_and_update_cache does not take a freeable entry back: another request's allocation evicts it "
           "under a step that reads it",
           ((encoder, "check_and_update_cache", _no_revive),)),
    Mutant("encoder_evictions_not_sent", "encoder_cache_bounded", "async-d2-encoder",
           "evicted entries are never sent in free_encoder_mm_hashes: the worker's encoder cache outgrows its size",
           ((encoder, "freed_hashes", _evictions_not_sent),)),
    Mutant("mamba_frees_by_computed", "mamba_states_held", "async-d2-mamba",
           "MambaManager.remove_skipped_blocks on C instead of C - F: the state an in-flight step starts "
           "from is freed and reused",
           ((mamba, "remove_skipped_blocks", _frees_by_computed),)),
    Mutant("mamba_split_skipped", "mamba_chunks_aligned", "async-d2-mamba",
           "no _mamba_block_aligned_split: a prefill chunk ends inside a Mamba block, its state cached as a block's",
           ((mamba, "aligned_split", _no_aligned_split),)),
    Mutant("swa_hit_not_reconciled", "window_kv_held", "async-d2-swa-hit",
           "HybridKVCacheCoordinator.find_longest_cache_hit does not cut full attention's hit to the window "
           "group's: the request resumes past the window blocks its group holds",
           ((swa, "cut_hit", _hit_not_reconciled),)),
) + tuple(Mutant(*row) for row in DP_MUTANT_ROWS)  # data parallelism's waves: checker/dp_mutants.py

MUTANTS_BY_NAME = {m.name: m for m in MUTANTS}
MUTANT_STATE_CAP = 100_000


def run_mutant(m: Mutant, explorer: str = "fast") -> MutantResult:
    """Check ``m``'s config with ``m`` applied (``explorer``: "fast" or "plain", same result)."""
    explore_with = explore_fast if explorer == "fast" else explore
    with applied(m.patches):  # a mutant may make the state space infinite: cap it
        if is_dp_config(m.config):  # the DP model (checker/dp_model.py): its own search
            result = explore_dp_mutant(m.config, m.name)
        else:
            cfg = _without_expectation(named_configs()[m.config])
            result = explore_with(cfg, stop_on_first=False, max_states=MUTANT_STATE_CAP)
    violated = tuple(sorted({v.property for v in result.violations}))
    return MutantResult(m.name, m.property, m.property in violated, violated, result.distinct_states,
                        result.partial_reason.startswith("interrupted"))


def _without_expectation(cfg: Any) -> Any:
    """A finding config checked for a mutant: all its properties, none expected."""
    import dataclasses

    return dataclasses.replace(cfg, expect_violation=None, properties=None)
