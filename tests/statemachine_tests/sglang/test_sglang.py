"""The SGLang target: the follower's checks on hand-made traces (no SGLang needed), the CLI's
one-line refusal without the SGLang venv, and a short fixed-work campaign on SGLang's real
scheduler (skipped, with the reason, only where the SGLang venv is absent)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from asyncspec.engine.sglang import case as cs
from asyncspec.engine.sglang import sglang_oracle as oracle
from asyncspec.engine.sglang.client import SGLangPool, venv_problem
from asyncspec.statemachine_tests.sglang import sglang_case as sc
from asyncspec.statemachine_tests.sglang.sglang_fuzz import Campaign
from asyncspec.statemachine_tests.sglang.sglang_run import check

ONE = cs.Case(requests=(cs.Request(prompt=(11, 12, 13), max_new_tokens=2),))


def _reqs(out: list[int], finished: str | None, committed: int) -> dict[str, Any]:
    return {"r0": {"out": out, "finished": finished, "committed": committed, "retracted": False}}


def _trace(stream: list[int], second_token: int, schedule_third: bool = False) -> dict[str, Any]:
    """What SGLang's overlap loop records for ONE: prefill, one decode, result processing."""
    pool = {"available": 123, "evictable": 0, "held": 5}
    fwd = [{"op": "forward", "mode": "extend", "rows": [{"rid": "r0", "n": 3, "seq_len": 3, "token": stream[0]}]}]
    it1 = [{"op": "forward", "mode": "decode", "rows": [{"rid": "r0", "n": 1, "seq_len": 4, "token": second_token}]},
           {"op": "process", "rows": [{"rid": "r0", "skipped": False, "out": 1, "finished": None}]}]
    if schedule_third:
        it1.append({"op": "forward", "mode": "decode", "rows": [{"rid": "r0", "n": 1, "seq_len": 5, "token": 7}]})
    it2 = [{"op": "process", "rows": [{"rid": "r0", "skipped": False, "out": 2, "finished": "length"}]}]
    return {"trace": {"pool_size": 128, "stalled": False, "iterations": [
        {"it": 0, "ops": [{"op": "arrive", "rid": "r0"}, *fwd], "reqs": _reqs([], None, 3), "pool": pool},
        {"it": 1, "ops": it1, "reqs": _reqs(stream[:1], None, 4), "pool": pool},
        {"it": 2, "ops": it2, "reqs": _reqs(stream[:2], "length", 4), "pool": pool},
    ]}}


def test_the_oracle_depends_on_the_whole_history_and_places_eos() -> None:
    assert oracle.stream((1, 2, 3), 0, 4) == oracle.stream((1, 2, 3), 0, 4)
    assert oracle.stream((1, 2, 3), 0, 3) != oracle.stream((9, 2, 3), 0, 3)
    assert oracle.stream((1, 2, 3), 2, 2)[1] == oracle.EOS
    assert oracle.EOS not in oracle.stream((1, 2, 3), 0, 50)


def test_a_correct_trace_passes_and_a_wrong_token_is_a_divergence() -> None:
    stream = oracle.stream(ONE.requests[0].prompt, 0, 2)
    assert not check(ONE, _trace(stream, stream[1])).diverged
    wrong = check(ONE, _trace(stream, stream[1] + 1))
    assert [d.field for d in wrong.diffs] == ["token r0@2"]


def test_a_decode_the_max_tokens_guard_forbids_is_a_divergence() -> None:
    stream = oracle.stream(ONE.requests[0].prompt, 0, 2)
    result = check(ONE, _trace(stream, stream[1], schedule_third=True))
    assert "max_tokens_guard r0" in [d.field for d in result.diffs]


def test_a_kv_slot_that_is_neither_free_evictable_nor_held_is_a_divergence() -> None:
    stream = oracle.stream(ONE.requests[0].prompt, 0, 2)
    leaking = _trace(stream, stream[1])
    leaking["trace"]["iterations"][1]["pool"] = {"available": 122, "evictable": 0, "held": 5}
    assert [d.field for d in check(ONE, leaking).diffs] == ["kv free+evictable+held"]


def test_a_crash_and_a_stalled_case_are_divergences() -> None:
    assert check(ONE, {"error": "IndexError: x", "where": []}).diffs[0].field == "crash"
    stalled = {"trace": {"pool_size": 128, "stalled": True, "iterations": []}}
    assert check(ONE, stalled).diffs[0].field == "drained"


def test_cases_are_drawn_from_seed_and_index_alone_and_shrinking_makes_them_smaller() -> None:
    a, b = sc.draw_case(3, 17), sc.draw_case(3, 17)
    assert a == b and cs.Case.from_json(a.to_json()) == a
    assert sc.draw_case(3, 18) != a
    assert all(len(c.requests) <= len(a.requests) for c in sc.candidates(a))
    assert sc.shrink(a, lambda c: True) != a or len(a.requests) == 1


def test_without_the_sglang_venv_the_cli_says_how_to_create_it(tmp_path: Path) -> None:
    env = dict(os.environ, ASYNCSPEC_SGLANG_PYTHON=str(tmp_path / "missing" / "python"))
    run = subprocess.run([sys.executable, "-m", "asyncspec", "fuzz", "--target", "sglang", "--examples", "2"],
                         env=env, capture_output=True, text=True, timeout=120)
    assert run.returncode == 2, run.stderr
    assert len(run.stderr.strip().splitlines()) == 1 and ".ci/install-sglang" in run.stderr


@pytest.mark.skipif(venv_problem() is not None, reason=f"SGLang venv absent: {venv_problem()}")
def test_a_short_fixed_work_campaign_on_sglangs_overlap_scheduler_is_clean_and_covers_the_issue(
        sglang_pool: SGLangPool) -> None:
    campaign = Campaign(seed=0, examples=20, seconds=600.0, configs=("overlap-pressure",))
    pool = sglang_pool  # the overlap-pressure driver is shared with test_sglang_abort.py
    found = campaign.run(pool)
    again = sc.draw_case(0, 3, ("overlap-pressure",))
    assert pool.run(again) == pool.run(again)  # the same case gives the same trace
    assert found is None, [d for d in found.diffs] if found else None
    assert campaign.done == 20
    for category in ("chunked_prefill", "eos_waste", "max_tokens_guard", "retraction_in_flight", "stale_drop",
                     "radix_hit", "finish_length"):
        assert campaign.coverage[category] > 0, category
