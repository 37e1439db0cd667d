"""The per-request counter arithmetic (spec/request.py), on ints."""
from __future__ import annotations

import doctest

import pytest

from asyncspec.spec import algebra, config, request as rq, state
from asyncspec.spec.algebra import CONCRETE as A
from asyncspec.spec.request import ASYNC, Knobs, RequestParams


@pytest.mark.parametrize("module", [algebra, rq, config, state])
def test_doctests(module: object) -> None:
    failures, _ = doctest.testmod(module)  # type: ignore[arg-type]
    assert failures == 0


def _running(p: RequestParams) -> rq.RequestCounters:
    return rq.admit(A, rq.initial_counters(A), 0)


def test_worked_example_from_the_semantics_note() -> None:
    """P=10, M=3 at depth 2 (test_stop_by_max_tokens): 12 = P + M - 1 tokens scheduled."""
    p = RequestParams(10, 3, 0)
    c = rq.after_schedule(A, p, _running(p), 10, 0, ASYNC)
    assert (c.num_computed_tokens, c.num_in_flight_tokens, c.num_output_placeholders) == (10, 10, 1)
    assert not rq.max_tokens_guard(A, p, c) and rq.num_new_tokens(p, c) == 1
    c = rq.after_schedule(A, p, c, 1, 0, ASYNC)
    assert (c.num_computed_tokens, c.num_output_placeholders) == (11, 2)
    c, stale = rq.drain_in_flight(A, c, 10)
    c = rq.deliver_token(A, p, c, stale, 1, ASYNC)
    assert (c.num_in_flight_tokens, c.num_output_tokens, c.num_output_placeholders) == (1, 1, 1)
    c = rq.after_schedule(A, p, c, 1, 0, ASYNC)
    c, stale = rq.drain_in_flight(A, c, 1)
    c = rq.deliver_token(A, p, c, stale, 2, ASYNC)
    assert (c.num_computed_tokens, c.num_output_placeholders) == (12, 1)
    assert rq.max_tokens_guard(A, p, c)  # 12 + 2 - 1 >= 13: the 4th step is empty
    c, stale = rq.drain_in_flight(A, c, 1)
    c = rq.deliver_token(A, p, c, stale, 3, ASYNC)
    assert c.status == rq.FINISHED_LENGTH_CAPPED and c.num_output_placeholders == 0


def test_preempt_marks_in_flight_output_stale() -> None:
    p = RequestParams(4, 4, 0)
    c = rq.after_schedule(A, p, _running(p), 4, 0, ASYNC)
    c = rq.preempt(A, c, drop_stale_output=False)
    assert (c.num_computed_tokens, c.num_output_placeholders, c.num_stale_output_tokens) == (0, 0, 4)
    assert rq.stale_output_blocks_resume(A, c)
    c, stale = rq.drain_in_flight(A, c, 4)
    assert stale
    c2 = rq.deliver_token(A, p, c, stale, 1, ASYNC)
    assert c2.num_output_tokens == 1
    assert (c2.num_computed_tokens, c2.num_output_placeholders) == (0, 0)  # stale: counters untouched


def test_drop_flag_survives_only_while_stale_output_remains() -> None:
    c = rq.initial_counters(A)._replace(status=rq.RUNNING, num_in_flight_tokens=2)
    dropped = rq.preempt(A, c, drop_stale_output=True)
    assert dropped.drop_stale_output
    again = rq.preempt(A, dropped._replace(status=rq.RUNNING), drop_stale_output=False)
    assert again.drop_stale_output  # D and X > 0 keeps drop mode
    drained = dropped._replace(status=rq.RUNNING, num_stale_output_tokens=0)
    assert not rq.preempt(A, drained, drop_stale_output=False).drop_stale_output


def test_eos_is_checked_before_the_length_cap() -> None:
    one = rq.initial_counters(A)._replace(status=rq.RUNNING, num_output_tokens=1)
    assert rq.first_stop(A, RequestParams(2, 2, 2), one, 2, 1) == (1, True)  # EOS at max_tokens: STOPPED
    assert rq.first_stop(A, RequestParams(2, 2, 0), one, 2, 1) == (1, False)  # length cap
    assert rq.first_stop(A, RequestParams(2, 3, 0), one, 2, 1) == (2, False)  # goes on (index count + 1)


def test_accepted_drafts_stop_at_eos_and_trim_the_rest() -> None:
    p = RequestParams(4, 8, 3)
    c = rq.initial_counters(A)._replace(status=rq.RUNNING, num_output_tokens=1, num_computed_tokens=7,
                                        num_output_placeholders=3, num_in_flight_tokens=3)
    out = rq.deliver_tokens(A, p, c, False, 2, 2, rq.ASYNC._replace(num_spec_tokens=2))
    # positions 2, 3 (EOS), 4: two appended, one trimmed from C; H -= all three returned
    assert (out.status, out.num_output_tokens, out.num_computed_tokens, out.num_output_placeholders) == (
        rq.FINISHED_STOPPED, 3, 6, 0)


def test_rejected_drafts_roll_back_fresh_output_only() -> None:
    c = rq.initial_counters(A)._replace(status=rq.RUNNING, num_computed_tokens=9, num_output_placeholders=3)
    assert rq.reject_drafts(A, c, 2, False)[2:4] == (7, 1)
    assert rq.reject_drafts(A, c, 2, True) == c


def test_sync_scheduler_reserves_no_placeholders() -> None:
    p = RequestParams(4, 2, 0)
    sync = Knobs(False, False, 1, 4, True)
    c = rq.after_schedule(A, p, _running(p), 4, 0, sync)
    assert c.num_output_placeholders == 0 and not c.is_prefill_chunk


def test_prefill_chunk_samples_nothing() -> None:
    p = RequestParams(6, 2, 0)
    c = rq.after_schedule(A, p, _running(p), 4, 0, ASYNC)
    assert c.is_prefill_chunk and c.num_output_placeholders == 0


def test_cached_frontier_covers_known_full_blocks_only() -> None:
    p = RequestParams(6, 2, 0)
    c = rq.after_schedule(A, p, _running(p), 6, 0, ASYNC)
    assert c.num_cached_tokens == 4  # one full block of 4; positions 4-5 are a partial block
