"""SGLang's deferred abort as the spec's ``abort_mode = "deferred"`` (docs/findings_sglang.md, 1):
the SGLang target follows it with the spec's own functions, and the parameter matters: in
``immediate`` mode (vLLM's abort) the spec diverges from SGLang on the finding's minimal case,
on a hand-made trace (no SGLang needed) and on SGLang's real scheduler (where its venv exists)."""
from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from asyncspec.engine.sglang import case as cs
from asyncspec.engine.sglang import sglang_oracle as oracle
from asyncspec.engine.sglang.client import SGLangPool, venv_problem
from asyncspec.statemachine_tests.sglang import sglang_case as sc
from asyncspec.statemachine_tests.sglang import sglang_follow
from asyncspec.statemachine_tests.sglang.sglang_run import check

PROMPT = (11, 12, 13)
MINIMAL = cs.Case(requests=(cs.Request(prompt=PROMPT, max_new_tokens=4),), aborts=(cs.Abort(0, 2),))
"""The finding's minimal case: one request, abort at the intake of iteration 2."""


def _row(rid: str, n: int, start: int, token: int) -> dict[str, Any]:
    return {"rid": rid, "n": n, "seq_len": start + n, "token": token}


def _minimal_trace() -> dict[str, Any]:
    """What SGLang 0.5.23's overlap loop records for MINIMAL (the finding's table)."""
    t = oracle.stream(PROMPT, 0, 3)
    pool = {"available": 123, "evictable": 0, "held": 5}

    def reqs(out: list[int], finished: str | None, committed: int) -> dict[str, Any]:
        return {"r0": {"out": out, "finished": finished, "committed": committed, "retracted": False}}

    def process(skipped: bool, out: int, finished: str | None) -> dict[str, Any]:
        return {"op": "process", "rows": [{"rid": "r0", "skipped": skipped, "out": out, "finished": finished}]}

    its = [
        ([{"op": "arrive", "rid": "r0"}, {"op": "forward", "mode": "extend", "rows": [_row("r0", 3, 0, t[0])]}],
         reqs([], None, 3)),
        ([{"op": "forward", "mode": "decode", "rows": [_row("r0", 1, 3, t[1])]}, process(False, 1, None)],
         reqs(t[:1], None, 4)),
        ([{"op": "abort", "rid": "r0"}, {"op": "forward", "mode": "decode", "rows": [_row("r0", 1, 4, t[2])]},
          process(False, 2, "abort")], reqs(t[:2], "abort", 5)),
        ([process(True, 2, "abort")], reqs(t[:2], "abort", 5)),
    ]
    iterations = [{"it": i, "ops": ops, "reqs": r, "pool": pool} for i, (ops, r) in enumerate(its)]
    return {"trace": {"pool_size": 128, "stalled": False, "iterations": iterations}}


def test_the_target_takes_its_abort_semantics_from_the_spec_config() -> None:
    assert sglang_follow.overlap_config().abort_mode == "deferred"
    assert sglang_follow.SpecFollower(MINIMAL).abort_mode == "deferred"


def test_the_deferred_spec_follows_the_minimal_trace_one_more_token_and_one_wasted_row() -> None:
    result = check(MINIMAL, _minimal_trace())
    assert not result.diverged, result.diffs
    assert result.snapshots[-1].spec["r0"].startswith("out=2 abort")
    assert "wasted=1" in result.snapshots[-1].spec["r0"]
    assert result.coverage["abort_delivers_in_flight"] == 1 and result.coverage["abort_waste"] == 1


def test_the_immediate_spec_diverges_from_the_minimal_trace_at_the_abort() -> None:
    result = check(MINIMAL, _minimal_trace(), abort_mode="immediate")
    assert result.diverged and result.snapshots[-1].it == 2
    assert "schedule r0" in [d.field for d in result.diffs]


def test_a_row_processed_after_the_deferred_abort_ended_the_request_is_a_divergence() -> None:
    trace = _minimal_trace()
    trace["trace"]["iterations"][3]["ops"] = [
        {"op": "process", "rows": [{"rid": "r0", "skipped": False, "out": 3, "finished": "abort"}]}]
    assert "output r0" in [d.field for d in check(MINIMAL, trace).diffs]


def _only_the_deferred_spec_follows(case: cs.Case, reply: dict[str, Any]) -> None:
    deferred = check(case, reply)
    assert not deferred.diverged, deferred.diffs
    assert deferred.coverage["abort_delivers_in_flight"] == 1
    immediate = check(case, reply, abort_mode="immediate")
    assert immediate.diverged and immediate.snapshots[-1].it == 2
    assert {"schedule r0", "outputs r0"} <= {d.field for d in immediate.diffs}


@pytest.mark.skipif(venv_problem() is not None, reason=f"SGLang venv absent: {venv_problem()}")
def test_on_sglangs_real_scheduler_under_pressure_only_the_deferred_spec_follows_the_minimal_case(
        sglang_pool: SGLangPool) -> None:
    """The default tier's run on SGLang's real scheduler: the minimal case on the campaign's
    ``overlap-pressure`` engine, whose driver the session already started (test_sglang.py)."""
    case = replace(MINIMAL, engine=sc.CONFIGS["overlap-pressure"])
    _only_the_deferred_spec_follows(case, sglang_pool.run(case))


@pytest.mark.slow
@pytest.mark.skipif(venv_problem() is not None, reason=f"SGLang venv absent: {venv_problem()}")
def test_on_sglangs_real_scheduler_only_the_deferred_spec_follows_the_minimal_case() -> None:
    """The finding's own engine (``overlap``, a driver of its own)."""
    pool = SGLangPool()
    try:
        reply = pool.run(MINIMAL)
    finally:
        pool.close()
    _only_the_deferred_spec_follows(MINIMAL, reply)
