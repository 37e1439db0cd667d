"""One ``sglang`` example: a case run on SGLang, then the spec following it iteration by iteration.

The driver returns the whole trace of a case (``engine/sglang/driver.py``); the follower
(``sglang_follow.py``) takes each iteration's operations in the order SGLang did them and
compares both sides after every iteration.  The first iteration with a difference ends the
check; a crash of SGLang or a case that never drains is a difference too.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from asyncspec.engine.sglang import case as cs
from asyncspec.spec.config import AbortMode

from asyncspec.statemachine_tests.sglang.sglang_follow import Diff, SpecFollower, spec_abort_mode


@dataclass
class Snapshot:
    """One iteration: SGLang's operations, then each request on both sides."""

    it: int
    ops: list[str]
    spec: dict[str, str]
    sglang: dict[str, str]
    diffs: list[Diff]


@dataclass
class SGLangResult:
    """The check of one case."""

    case: cs.Case
    snapshots: list[Snapshot] = field(default_factory=list)
    coverage: Counter[str] = field(default_factory=Counter)
    iterations: int = 0
    forwards: int = 0
    error: str | None = None

    @property
    def diffs(self) -> list[Diff]:
        return self.snapshots[-1].diffs if self.snapshots else []

    @property
    def diverged(self) -> bool:
        return bool(self.diffs)


def describe_op(op: dict[str, Any]) -> str:
    """One operation as a short line."""
    if op["op"] == "forward":
        rows = " ".join(f"{r['rid']}+{r['n']}@{r['seq_len'] - r['n']}->{r['token']}" for r in op["rows"])
        return f"forward {op['mode']} {rows}"
    if op["op"] == "process":
        rows = " ".join(f"{r['rid']}:{'skip' if r['skipped'] else 'out'}={r.get('out')}" for r in op["rows"])
        return f"process {rows}"
    return f"{op['op']} {op.get('rid', '')}".strip()


def sglang_row(got: dict[str, Any]) -> str:
    return (f"out={len(got['out'])} {got['finished'] or ('RETRACTED' if got['retracted'] else 'live')} "
            f"kv={got['committed']}")


def check(case: cs.Case, reply: dict[str, Any], abort_mode: AbortMode | None = None) -> SGLangResult:
    """Follow ``reply`` (the driver's answer for ``case``) with the spec; stop at the first difference.

    ``abort_mode``: the spec's abort semantics; None = ``configs/sglang-overlap.toml``'s."""
    result = SGLangResult(case)
    follower = SpecFollower(case, result.coverage, abort_mode or spec_abort_mode())
    if "error" in reply:
        result.error = str(reply["error"])
        result.snapshots.append(Snapshot(-1, [str(reply.get("where", ""))], {}, {},
                                         [Diff("crash", "no exception", result.error)]))
        return result
    trace = reply["trace"]
    for record in trace["iterations"]:
        result.iterations += 1
        diffs: list[Diff] = []
        for op in record["ops"]:
            result.forwards += op["op"] == "forward"
            diffs += follower.apply(op)
        diffs += follower.compare(record, trace["pool_size"])
        snap = Snapshot(record["it"], [describe_op(op) for op in record["ops"]],
                        {cs.rid(i): follower.row(i) for i in range(len(case.requests))},
                        {rid: sglang_row(got) for rid, got in record["reqs"].items()}, diffs)
        result.snapshots.append(snap)
        if diffs:
            return result
    if trace["stalled"]:
        result.snapshots.append(Snapshot(len(trace["iterations"]), [], {}, {},
                                         [Diff("drained", "every request finished", "still running (stalled)")]))
    return result
