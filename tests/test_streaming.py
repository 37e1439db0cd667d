"""Streaming-input (resumable) sessions in the spec (``spec/streaming.py``): a turn's stop,
a pause for input, an update taken at once or later, the end of the stream; the config and
its refusals; the seeded mutants."""
from __future__ import annotations

import pytest

from asyncspec.checker.compiled import NOT_BUILT, not_covered
from asyncspec.checker.configs import config_from_dict, named_configs
from asyncspec.checker.spec_mutants import MUTANTS_BY_NAME, run_mutant
from asyncspec.spec import engine as eng
from asyncspec.spec import request as rq
from asyncspec.spec import streaming
from asyncspec.spec.algebra import CONCRETE as A
from asyncspec.spec.config import ConfigError, SpecConfig
from asyncspec.spec.draft import has_requests, num_waiting_for_streaming_input
from asyncspec.spec.properties import always_for
from asyncspec.spec.state import EngineState, initial_state


def _cfg(**kw: object) -> SpecConfig:
    base: dict[str, object] = dict(name="s", requests=((2, 1), (1, 1)), resumable=(0,), stream_updates=((2, 2),),
                                   token_budget=8, block_size=2, num_blocks=6, enable_prefix_caching=False)
    base.update(kw)
    return SpecConfig(**base)  # type: ignore[arg-type]


def _run(cfg: SpecConfig, actions: list[str], eos: tuple[int, ...] = ()) -> tuple[EngineState, list[frozenset[str]]]:
    s = initial_state(cfg, eos or (0,) * len(cfg.requests))
    seen = []
    for text in actions:
        action = eng.parse_action(text)
        assert action in eng.enabled_actions(cfg, s), (text, [str(a) for a in eng.enabled_actions(cfg, s)])
        s, events = eng.apply(cfg, s, action)
        seen.append(events)
        for p in always_for(cfg):
            assert p.check(cfg, s) is None, (text, p.name, p.check(cfg, s))
    return s, seen


def test_stop_frontier_resumes_from_the_materialized_frontier_and_drops_in_flight_output() -> None:
    c = rq.initial_counters(A)._replace(status=rq.FINISHED_STOPPED, num_computed_tokens=5,
                                        num_output_placeholders=1, num_in_flight_tokens=1)
    out = streaming.stop_frontier(A, c)
    assert (out.num_computed_tokens, out.num_output_placeholders, out.num_stale_output_tokens) == (4, 0, 1)
    assert out.drop_stale_output


def test_session_update_keeps_all_but_the_last_sampled_token_as_prompt() -> None:
    p = rq.RequestParams(num_prompt_tokens=2, max_tokens=3, eos_position=0)
    c = rq.initial_counters(A)._replace(num_output_tokens=3)
    params, out = streaming.session_update(A, p, c, 4, 1)
    assert (params.num_prompt_tokens, params.max_tokens, out.num_output_tokens, out.status) == (8, 1, 0, rq.WAITING)


def test_a_turn_stops_with_a_step_in_flight_pauses_and_resumes_on_its_update() -> None:
    cfg = _cfg(requests=((2, 2),))
    first = ["schedule", "schedule", "update_from_output"]  # EOS at output 1 while output 2 is in flight
    s, events = _run(cfg, first, eos=(1,))
    c = s.counters[0]
    assert c.status == rq.WAITING_FOR_STREAMING_REQ and "stream_stop_in_flight" in events[-1]
    assert (c.num_computed_tokens, c.num_output_placeholders, c.num_stale_output_tokens) == (2, 0, 1)
    assert c.drop_stale_output and s.kv_holding == (0,) and s.block_tables[0]
    assert num_waiting_for_streaming_input(s) == 1 and not has_requests(s)  # a paused session is not counted
    s, events = _run(cfg, first + ["update_from_output", "stream_update r0"], eos=(1,))
    assert s.counters[0].status == rq.WAITING and "stream_resume" in events[-1] and "stale_drop" in events[-2]
    assert (s.params[0].num_prompt_tokens, s.params[0].max_tokens) == (4, 2)  # 2 + 1 - 1 + 2
    s, events = _run(cfg, first + ["update_from_output", "stream_update r0", "schedule", "schedule",
                                   "update_from_output"], eos=(1,))
    assert s.counters[0].status == rq.WAITING_FOR_STREAMING_REQ and s.counters[0].num_output_tokens == 1
    assert eng.Action(eng.STREAM_CLOSE, 0) in eng.enabled_actions(cfg, s)


def test_a_queued_update_is_taken_at_the_stop_and_the_end_of_the_stream_finishes_the_session() -> None:
    cfg = _cfg(requests=((2, 1),))
    s, events = _run(cfg, ["stream_update r0", "stream_close r0", "schedule", "schedule", "update_from_output"])
    assert s.counters[0].status == rq.WAITING and "stream_continue" in events[-1]
    assert "stream_queued" in events[0] and s.stream_applied[0] == 1
    for _ in range(20):  # the engine loop alone finishes the session: its inputs are all queued
        engine = [a for a in eng.enabled_actions(cfg, s) if a.name in (eng.SCHEDULE, eng.UPDATE_FROM_OUTPUT)]
        if not engine:
            break
        s, _ = eng.apply(cfg, s, engine[0])
    assert s.counters[0].status == rq.FINISHED_LENGTH_CAPPED and s.block_tables[0] == () and not has_requests(s)
    assert eng.enabled_actions(cfg, s) == []


def test_the_end_of_a_paused_sessions_stream_aborts_it_and_frees_its_blocks() -> None:
    cfg = _cfg(requests=((2, 1),), stream_updates=())
    s, events = _run(cfg, ["schedule", "schedule", "update_from_output", "update_from_output", "stream_close r0"])
    assert s.counters[0].status == rq.FINISHED_ABORTED and "stream_end" in events[-1]
    assert len(s.free_blocks) == cfg.num_blocks and eng.enabled_actions(cfg, s) == [eng.Action(eng.SCHEDULE)]


def test_a_paused_session_holds_its_model_runner_slot() -> None:
    cfg = _cfg(max_num_seqs=1, stream_updates=())
    s, events = _run(cfg, ["schedule", "schedule", "update_from_output", "schedule"])
    assert s.counters[0].status == rq.WAITING_FOR_STREAMING_REQ and "empty_step" in events[-1]
    assert s.counters[1].status == rq.WAITING and s.batch_queue[-1].entries == ()  # r1 waits for the slot
    s, _ = _run(cfg, ["schedule", "schedule", "update_from_output", "stream_close r0", "schedule"])
    assert s.counters[1].status == rq.RUNNING  # the session's end frees the slot


def test_session_configs_are_refused_with_one_line_where_not_modelled() -> None:
    for bad, match in (({"enable_prefix_caching": True}, "modelled with chunked prefill"),
                       ({"stream_updates": ((0, 1),)}, "at least 1 new prompt token"),
                       ({"resumable": (5,)}, "does not exist"),
                       ({"num_blocks": 2}, "session r0 reaches")):
        with pytest.raises(ConfigError, match=match):
            _cfg(**bad)
    with pytest.raises(ConfigError, match="stream_updates"):
        config_from_dict({"name": "x", "requests": [[2, 1]], "resumable": [0], "stream_updates": [["a", 1]]})
    assert not_covered(named_configs()["async-d2-stream"]) in (None, NOT_BUILT)  # csrc/streaming.c encodes sessions


@pytest.mark.slow  # also in the default tier's tests/test_mutants.py, with every other spec mutant
@pytest.mark.parametrize("name", ["stream_stop_keeps_in_flight", "paused_session_frees_slot"])
def test_the_streaming_spec_mutants_are_killed(name: str) -> None:
    assert run_mutant(MUTANTS_BY_NAME[name]).killed
