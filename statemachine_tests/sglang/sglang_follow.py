"""The spec following SGLang's scheduler, iteration by iteration (``--target sglang``).

SGLang makes its own scheduling choices (``get_next_batch_to_run``: prefill or decode,
``PrefillAdder`` admission, ``retract_decode``'s victims); the spec does not model its
policy.  What the spec fixes is what each choice *means*, with vLLM's per-request arithmetic
(``spec/request.py``) under the ``sglang-overlap`` knobs: one step in flight while the next
is scheduled (async), drop-and-recompute on preemption, immediate frees.  So the follower
takes each of SGLang's recorded operations as the matching spec action and checks the guard
the spec puts on it:

=================  ==============================================  =========================
SGLang op          spec action (spec/request.py)                   guard checked
=================  ==============================================  =========================
``arrive``         ``add_request`` (status WAITING)                -
``forward`` row    ``admit`` (C := radix hit) + ``after_schedule``  not finished; fed at C;
                                                                   ``max_tokens_guard`` false
``process`` row    ``drain_in_flight`` + ``deliver_token``, or     skipped iff the spec drops
                   drop (stale), or ``note_output_after_finish``   or ignores the output
``retract``        ``preempt(drop_stale_output=True)``             -
``abort``          ``abort_mode = "deferred"`` (the spec's          -
                   ``configs/sglang-overlap.toml``): ``defer_abort``
                   when ``abort_defers``, else ``finish(ABORTED)``;
                   a delivered row then ``honour_deferred_abort``
=================  ==============================================  =========================

After every iteration both sides are compared per request: tokens delivered (count and
values: the oracle stream), finish reason, committed KV (the spec's C against
``req.kv.kv_committed_len``), wasted steps, retractions; and the pool's conservation
(free + evictable + held == pool size).
"""
from __future__ import annotations

import functools
from collections import Counter, deque
from dataclasses import dataclass, field
from typing import Any

from asyncspec.checker.configs import named_configs
from asyncspec.engine.sglang import case as cs
from asyncspec.engine.sglang import sglang_oracle as oracle
from asyncspec.spec import request as rq
from asyncspec.spec.algebra import CONCRETE as A
from asyncspec.spec.config import AbortMode, SpecConfig

FINISH = {rq.FINISHED_STOPPED: "stop", rq.FINISHED_LENGTH_CAPPED: "length", rq.FINISHED_ABORTED: "abort"}


@dataclass(frozen=True)
class Diff:
    """One field on which SGLang disagrees with the spec."""

    field: str
    expected: Any
    actual: Any


@functools.cache
def overlap_config() -> SpecConfig:
    """The spec's configuration of SGLang's overlap scheduler (``configs/sglang-overlap.toml``)."""
    return named_configs()["sglang-overlap"]


def spec_abort_mode() -> AbortMode:
    """The abort semantics the spec gives SGLang: the config's ``abort_mode``."""
    return overlap_config().abort_mode


@dataclass
class InFlight:
    """A scheduled share of a step: tokens, and the output position it samples (0: a chunk)."""

    n: int
    position: int


@dataclass
class SpecFollower:
    """The spec's counters for one case, advanced by SGLang's recorded operations."""

    case: cs.Case
    coverage: Counter[str] = field(default_factory=Counter)
    abort_mode: AbortMode = field(default_factory=spec_abort_mode)  # "immediate": vLLM's (to show it matters)

    def __post_init__(self) -> None:
        self.knobs = rq.Knobs(async_scheduling=self.case.engine.overlap, defer_block_free=False,
                              decode_stagger=1, block_size=1, enable_prefix_caching=False)
        self.params = [rq.RequestParams(len(r.prompt), r.max_new_tokens, r.eos_at) for r in self.case.requests]
        self.counters = [rq.initial_counters(A, rq.NOT_ARRIVED) for _ in self.case.requests]
        self.in_flight: list[deque[InFlight]] = [deque() for _ in self.case.requests]
        self.retractions = [0] * len(self.case.requests)
        self.sglang_wasted = [0] * len(self.case.requests)
        self.ended_by_own_row = [False] * len(self.case.requests)  # SGLang: a processed row finished it

    # ---- the expected stream -----------------------------------------------------------

    def token(self, req: int, position: int) -> int:
        """The oracle's token for output ``position`` (1-based) of ``req``, history fed right."""
        r = self.case.requests[req]
        return oracle.stream(r.prompt, r.eos_at, position)[-1]

    def expected_outputs(self, req: int) -> list[int]:
        r = self.case.requests[req]
        return oracle.stream(r.prompt, r.eos_at, int(self.counters[req].num_output_tokens))

    # ---- operations --------------------------------------------------------------------

    def apply(self, op: dict[str, Any]) -> list[Diff]:
        """Take one recorded SGLang operation; the guards it violates."""
        kind = op["op"]
        if kind == "arrive":
            i = cs.req_index(op["rid"])
            self.counters[i] = self.counters[i]._replace(status=rq.WAITING)
            self.coverage["late_arrival" if self.case.requests[i].arrive_at > 0 else "arrival"] += 1
            return []
        if kind in ("abort", "retract_abort"):
            return self._abort(cs.req_index(op["rid"]), kind)
        if kind == "retract":
            return self._retract(cs.req_index(op["rid"]))
        if kind == "forward":
            return self._forward(op)
        if kind == "process":
            return [d for row in op["rows"] for d in self._process(row)]
        return [Diff("operation", "a known SGLang operation", kind)]

    def _abort(self, i: int, kind: str) -> list[Diff]:
        """The spec's abort under ``abort_mode`` (``spec/engine.py`` ``abort``): deferred, a
        running request not mid chunked prefill only gets ``abort_deferred`` (SGLang's
        ``Req.to_finish``, docs/findings_sglang.md 1); any other finishes at once.  A
        retraction's own abort (``retract_decode`` out of memory) finishes at once."""
        c = self.counters[i]
        if rq.is_finished(A, c) or c.abort_deferred:
            return []
        self.coverage["abort_in_flight" if c.num_in_flight_tokens > 0 else "abort"] += 1
        if kind == "retract_abort":
            self.coverage["retract_abort"] += 1
        if self.abort_mode == "deferred" and kind == "abort" and rq.abort_defers(A, c):
            self.counters[i] = rq.defer_abort(A, c)
            return []
        self.counters[i] = rq.finish(A, c, rq.FINISHED_ABORTED)
        return []

    def _retract(self, i: int) -> list[Diff]:
        c = self.counters[i]
        if c.status != rq.RUNNING:
            return [Diff(f"retract {cs.rid(i)}", "a running request", rq.STATUS_NAMES[c.status])]
        self.coverage["retraction"] += 1
        self.coverage["forced_retraction" if self.case.test_retract else "pressure_retraction"] += 1
        if c.num_in_flight_tokens > 0:
            self.coverage["retraction_in_flight"] += 1
        self.retractions[i] += 1
        self.counters[i] = rq.preempt(A, c, True)
        return []

    def _forward(self, op: dict[str, Any]) -> list[Diff]:
        diffs: list[Diff] = []
        scheduled = {cs.req_index(row["rid"]) for row in op["rows"]}
        if op["mode"] == "decode":
            for i, c in enumerate(self.counters):
                if i not in scheduled and c.status == rq.RUNNING and rq.max_tokens_guard(A, self.params[i], c):
                    self.coverage["max_tokens_guard"] += 1
        for row in op["rows"]:
            diffs += self._schedule(cs.req_index(row["rid"]), row)
        return diffs

    def _schedule(self, i: int, row: dict[str, Any]) -> list[Diff]:
        p, c, name = self.params[i], self.counters[i], cs.rid(i)
        n, start = int(row["n"]), int(row["seq_len"]) - int(row["n"])
        if rq.is_finished(A, c) or c.status == rq.NOT_ARRIVED:
            return [Diff(f"schedule {name}", f"not schedulable ({rq.STATUS_NAMES[c.status]})", "scheduled")]
        diffs = []
        if c.status in (rq.WAITING, rq.PREEMPTED):
            if start > 0:
                self.coverage["radix_hit"] += 1
            c = rq.admit(A, c, start)
        elif c.num_computed_tokens != start:
            diffs.append(Diff(f"position {name}", f"fed from {c.num_computed_tokens}", f"fed from {start}"))
        if self.knobs.async_scheduling and rq.max_tokens_guard(A, p, c):
            diffs.append(Diff(f"max_tokens_guard {name}", "not scheduled: its step in flight reaches "
                              "max_new_tokens", "scheduled"))
        c = rq.after_schedule(A, p, c, n, 0, self.knobs)
        position = 0 if c.is_prefill_chunk else int(c.num_computed_tokens) - p.num_prompt_tokens + 1
        if position == 0:
            self.coverage["chunked_prefill"] += 1
        elif self.token(i, position) != row["token"]:
            diffs.append(Diff(f"token {name}@{position}", self.token(i, position), row["token"]))
        self.counters[i] = c
        self.in_flight[i].append(InFlight(n, position))
        return diffs

    def _process(self, row: dict[str, Any]) -> list[Diff]:
        i = cs.req_index(row["rid"])
        name, p, c = cs.rid(i), self.params[i], self.counters[i]
        if not self.in_flight[i]:
            return [Diff(f"output {name}", "no step in flight", "an output row")]
        entry = self.in_flight[i].popleft()
        skip = True
        if rq.is_finished(A, c):
            c = rq.note_output_after_finish(A, c)
            if rq.wastes_output_after_finish(A, c):
                waste = {rq.FINISHED_STOPPED: "eos_waste", rq.FINISHED_ABORTED: "abort_waste"}
                self.coverage[waste.get(int(c.status), "wasted_step")] += 1
        else:
            c, stale = rq.drain_in_flight(A, c, entry.n)
            if stale and c.drop_stale_output:
                self.coverage["stale_drop"] += 1
            elif entry.position == 0:
                skip = False
            else:
                skip = False
                c = rq.deliver_token(A, p, c, stale, entry.position, self.knobs)
                if self.abort_mode == "deferred" and c.abort_deferred:
                    c = rq.honour_deferred_abort(A, c)
                    self.coverage["abort_delivers_in_flight"] += 1
                if rq.is_finished(A, c):
                    self.coverage[f"finish_{FINISH[int(c.status)]}"] += 1
        self.counters[i] = c
        self._count_sglang_waste(i, row)
        if bool(row["skipped"]) != skip:
            return [Diff(f"output {name}", "skipped" if skip else "processed",
                         "skipped" if row["skipped"] else "processed")]
        return []

    def _count_sglang_waste(self, i: int, row: dict[str, Any]) -> None:
        """SGLang's wasted rows: skipped rows of a request one of its own processed rows had
        finished (``update_finish_state``: EOS, length, or a deferred abort's ``to_finish``),
        not of one ``abort_request`` or ``process_pending_chunked_abort`` ended."""
        if row["skipped"] and self.ended_by_own_row[i]:
            self.sglang_wasted[i] += 1
        elif not row["skipped"] and row.get("finished"):
            self.ended_by_own_row[i] = True

    # ---- after an iteration ----------------------------------------------------------

    def compare(self, record: dict[str, Any], pool_size: int) -> list[Diff]:
        """Every per-request field and the pool, after one SGLang iteration."""
        diffs: list[Diff] = []
        for i, c in enumerate(self.counters):
            got = record["reqs"].get(cs.rid(i))
            if got is None:
                continue
            diffs += self._compare_request(i, c, got)
        pool = record["pool"]
        total = pool["available"] + pool["evictable"] + pool["held"]
        if total != pool_size:
            diffs.append(Diff("kv free+evictable+held", pool_size, total))
        return diffs

    def _compare_request(self, i: int, c: rq.RequestCounters, got: dict[str, Any]) -> list[Diff]:
        name, diffs = cs.rid(i), []
        expected = self.expected_outputs(i)
        if len(got["out"]) != len(expected):
            diffs.append(Diff(f"outputs {name}", len(expected), len(got["out"])))
        elif got["out"] != expected:
            diffs.append(Diff(f"tokens {name}", expected, got["out"]))
        finished = FINISH.get(int(c.status))
        if finished != got["finished"]:
            diffs.append(Diff(f"finished {name}", finished, got["finished"]))
        if finished is None and int(c.num_computed_tokens) != got["committed"]:
            diffs.append(Diff(f"kv {name}", int(c.num_computed_tokens), got["committed"]))
        if int(c.num_wasted_steps) != self.sglang_wasted[i]:
            diffs.append(Diff(f"wasted {name}", int(c.num_wasted_steps), self.sglang_wasted[i]))
        return diffs

    def row(self, i: int) -> str:
        """The spec's view of request ``i`` for the side-by-side table."""
        c = self.counters[i]
        return (f"out={int(c.num_output_tokens)} {FINISH.get(int(c.status)) or rq.STATUS_NAMES[int(c.status)]} "
                f"kv={int(c.num_computed_tokens)} inflight={len(self.in_flight[i])} "
                f"wasted={int(c.num_wasted_steps)} retracted={self.retractions[i]}")
