"""check_stop's other stops (spec/stop.py): stop tokens, min_tokens and repetition detection.

The spec's prediction of where ``check_stop`` (vllm/v1/core/sched/utils.py) ends a request, with
which status and ``stop_reason``; the workload's ``stops`` and their one-line problems; vLLM's
real scheduler in lock step with the spec on a workload of each kind, and on the ``stop`` part.

vLLM must be installed (``.ci/install-vllm``); without it this module fails at collection
(ASYNCSPEC_ALLOW_NO_VLLM=1 skips instead)."""
from __future__ import annotations

import json

from tests.vllm_guard import require_pinned_vllm

from asyncspec.spec import stop
from asyncspec.statemachine_tests.core.harness import RequestSpec, Workload, workload_problem
from asyncspec.statemachine_tests.core.replay_file import replay_problem
from asyncspec.statemachine_tests.core.stop_tokens import oracle_token, stop_token_id
from asyncspec.statemachine_tests.scheduler.fuzz_example import Stats, drive
from asyncspec.statemachine_tests.scheduler.profiles import ALL_PROFILE, STOP_PROFILE, part_names, reference_gaps
from asyncspec.statemachine_tests.scheduler.spec_target import SpecTarget

require_pinned_vllm()

EACH_KIND = Workload(
    requests=(RequestSpec(3, 10, 4), RequestSpec(2, 12, 2), RequestSpec(3, 10, 2), RequestSpec(2, 10, 3),
              RequestSpec(2, 6, 1)),
    depth=2, num_blocks=32,
    stops=((0, 1, 0, 0, 0, 0, 0),  # a stop token at output 4
           (1, 2, 0, 0, 3, 2, 2),  # period 2 from output 2, min_count 2: detected at 5
           (2, 0, 6, 0, 0, 0, 0),  # EOS at 2 below min_tokens 6: stops at 2
           (3, 2, 9, 1, 1, 3, 1),  # one token from 3, min_count 3: seen at 5, held to min_tokens 9
           (4, 2, 0, 1, 1, 3, 1)))  # one token from 1, min_count 3: detected at 3, within max_tokens 6
"""One request of each kind and order of check_stop's tests."""


def test_the_spec_predicts_where_each_rule_stops() -> None:
    rep = stop.StopRule(stop.STOP_REPETITION, 2, 0, 0, 3, 2, 2)
    assert stop.detected_length(rep) == 2 and stop.stop_position(rep, 12) == 5
    assert stop.stop_position(rep._replace(min_tokens=8), 12) == 8  # held back by min_tokens
    assert stop.stop_position(rep._replace(min_tokens=12), 12) == 0  # the length cap comes first
    assert stop.stop_position(rep, 5) == 0  # at the cap: LENGTH
    assert stop.detected_length(rep._replace(min_pattern_size=3, max_pattern_size=3)) == 0  # no multiple of 2
    assert stop.detected_length(rep._replace(pattern_len=1, min_pattern_size=2)) == 2  # the first tried
    token = stop.StopRule(stop.STOP_TOKEN, 4, 9)
    assert stop.stop_position(token, 10) == 4 and stop.stop_reason(token, "STOPPED", 1000) == "1000"
    assert stop.stop_position(stop.StopRule(stop.STOP_EOS, 2, 6), 10) == 2  # EOS before min_tokens
    assert stop.finish_status(rep, "STOPPED") == "REPETITION" and stop.finish_status(rep, "LENGTH") == "LENGTH"
    assert stop.stop_reason(rep, "STOPPED", 7) == stop.REPETITION_DETECTED and stop.stop_reason(rep, "LENGTH", 7) == ""
    assert stop.finish_reason(rep, "stop") == "repetition" and stop.finish_reason(token, "stop") == "stop"


def test_the_oracle_emits_the_signal_and_the_workload_round_trips() -> None:
    assert oracle_token(EACH_KIND, 0, 4) == stop_token_id(0) and oracle_token(EACH_KIND, 0, 3) != stop_token_id(0)
    assert [oracle_token(EACH_KIND, 1, k) for k in (2, 3, 4, 5)] == [oracle_token(EACH_KIND, 1, 2),
                                                                   oracle_token(EACH_KIND, 1, 3)] * 2
    assert oracle_token(EACH_KIND, 2, 2) == 2  # EOS
    assert SpecTarget(EACH_KIND).state.params[3].eos_position == 9
    data = json.loads(json.dumps(EACH_KIND.to_json()))
    assert Workload.from_json(data) == EACH_KIND and workload_problem(EACH_KIND) is None
    assert replay_problem({"asyncspec_fuzz_replay": 1, "workload": data, "events": []}) is None
    assert "stops" in str(replay_problem({"asyncspec_fuzz_replay": 1, "workload": {**data, "stops": [[0, 1]]},
                                          "events": []}))


def test_bad_stops_are_one_line_problems() -> None:
    one = (RequestSpec(2, 4, 1),)
    for stops, why in ((((1, 1, 0, 0, 0, 0, 0),), "does not exist"),
                       (((0, 3, 0, 0, 0, 0, 0),), "kind must be"),
                       (((0, 1, 5, 0, 0, 0, 0),), "min_tokens 0..max_tokens"),
                       (((0, 1, 0, 1, 1, 2, 1),), "last four values must be 0"),
                       (((0, 2, 0, 2, 1, 2, 1),), "repetition needs"),
                       (((0, 2, 0, 0, 1, 1, 1),), "repetition needs")):
        problem = workload_problem(Workload(one, stops=stops))
        assert problem is not None and why in problem and "\n" not in problem


def test_each_kind_stops_in_lock_step_with_vllm() -> None:
    for depth in (1, 2):
        w = Workload(**{**EACH_KIND.__dict__, "depth": depth})
        result = drive(w, "vllm", [0] * 200, Stats())
        last = result.rows[-1]
        assert not last.differences, last.differences
        final = dict(last.actual.requests)
        assert [(final[i].status, final[i].num_output_tokens, final[i].stop_reason) for i in range(5)] == [
            ("STOPPED", 4, "1000"), ("REPETITION", 5, "repetition_detected"), ("STOPPED", 2, ""),
            ("REPETITION", 9, "repetition_detected"), ("REPETITION", 3, "repetition_detected")]


def test_the_stop_part_is_in_the_default_mix_and_not_on_the_reference() -> None:
    assert part_names(ALL_PROFILE)[19] == "stop" and STOP_PROFILE.stops
    assert "stop tokens, min_tokens and repetition detection" in reference_gaps(STOP_PROFILE)
