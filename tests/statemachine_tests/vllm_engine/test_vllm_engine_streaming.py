"""Streaming-input sessions on the ``vllm-engine`` target (issue 28, item 1, where it reaches the worker).

Default tier: the stream events parse; a case's sessions round-trip through JSON and are checked
(a session stops only at ``max_tokens``; the spec's limits); a hand-written case whose session takes two
more inputs while a step is in flight is followed by the spec, the runner fed each turn's prompt; the
``streaming`` profile's short campaign is clean and reaches ``stream_resume``; finding V10 (two sessions
waiting with their blocks deadlock a full pool) reproduces on vLLM's EngineCore, and the spec agrees
up to it (``configs/finding-stream-sessions-deadlock.toml`` is the checker's side).  Slow: the three mutants of the
V1 runner's session update path die in the streaming stage of ``mutate-vllm --target vllm-engine``.
"""
from __future__ import annotations

import json
from dataclasses import replace

import pytest

from asyncspec.engine.vllm.engine_config import EngineDriverConfig
from asyncspec.engine.vllm.mutants_features import RUNNER_STREAMING_MUTANTS
from asyncspec.statemachine_tests.vllm_engine import engine_case as ec
from asyncspec.statemachine_tests.vllm_engine.engine_campaign import run_fixed
from asyncspec.statemachine_tests.vllm_engine.engine_profile import STREAMING_ENGINE_PROFILE
from tests.statemachine_tests.vllm_engine.drive_case import drive, engine_kill

STEP = ec.EngineEvent(ec.STEP)


def _config(num_blocks: int) -> EngineDriverConfig:
    return EngineDriverConfig(depth=2, block_size=4, num_blocks=num_blocks, max_num_seqs=3, max_num_batched_tokens=8,
                              enable_chunked_prefill=True, enable_prefix_caching=False,
                              max_model_len=min(32, 4 * num_blocks))


def test_stream_events_parse_and_sessions_round_trip() -> None:
    for kind in (ec.STREAM_UPDATE, ec.STREAM_CLOSE):
        assert ec.parse_engine_event(f"{kind} r1") == ec.EngineEvent(kind, 1)
    case = ec.EngineCase(_config(8), (ec.EngineRequest((900, 901), 3), ec.EngineRequest((910,), 2)),
                         resumable=(0,), stream_updates=((2, 2), (1, 3)))
    assert ec.EngineCase.from_json(json.loads(json.dumps(case.to_json()))) == case
    assert ec.EngineCase.from_json(case.to_json()) == case  # the dict itself, as the explorer reads it
    assert ec.case_problem(case) is None
    w = case.workload()
    assert w.resumable == (0,) and w.stream_updates == ((2, 2), (1, 3))
    eos = ec.EngineCase(case.engine, (ec.EngineRequest((900, 901), 3, ignore_eos=False),), resumable=(0,),
                        stream_updates=((2, 2),))
    assert "must ignore EOS" in (ec.case_problem(eos) or "")
    prefix = replace(case, engine=replace(case.engine, enable_prefix_caching=True))
    assert "prefix caching" in (ec.case_problem(prefix) or "")


def test_a_session_takes_two_more_inputs_with_a_step_in_flight() -> None:
    pytest.importorskip("vllm")
    case = ec.EngineCase(_config(8), (ec.EngineRequest((900, 901, 902), 3), ec.EngineRequest((910, 911), 4)),
                         resumable=(0,), stream_updates=((2, 2), (3, 1)))
    events = [ec.EngineEvent(ec.ADD_REQUEST, 0), ec.EngineEvent(ec.ADD_REQUEST, 1), STEP, STEP,
              ec.EngineEvent(ec.STREAM_UPDATE, 0), STEP, STEP, STEP, ec.EngineEvent(ec.STREAM_UPDATE, 0), STEP]
    run, coverage = drive(case, events)
    assert not run.diverged, run.result.rows[-1].differences  # type: ignore[attr-defined]
    took = coverage.get("stream_resume", 0) + coverage.get("stream_continue", 0)  # paused or queued: both inputs
    assert took == 2, coverage
    fed = [row for rows in run.result.fed.values() for row in rows if row.startswith("r0")]  # type: ignore[attr-defined]
    assert len(fed) >= 3  # every turn reached the runner


def test_the_streaming_profile_is_clean_and_sessions_resume() -> None:
    pytest.importorskip("vllm")
    summary = run_fixed(60, 0, STREAMING_ENGINE_PROFILE.depths, STREAMING_ENGINE_PROFILE)
    assert summary["divergences"] == 0, summary["first_divergence"]
    assert summary["coverage"]["stream_resume"] > 0


def test_finding_v10_sessions_waiting_with_their_blocks_deadlock_a_full_pool() -> None:
    """Two sessions (P = 7, M = 2) fill a 4-block pool with their kept KV (C = 8 each); both take their
    next input (2 tokens) and wait in ``kv_holding_waiting`` for a third block that no one can free."""
    pytest.importorskip("vllm")
    prompt = (900, 901, 902, 903, 904, 905, 906)
    case = ec.EngineCase(_config(4), (ec.EngineRequest(prompt, 2), ec.EngineRequest((910, *prompt[1:]), 2)),
                         resumable=(0, 1), stream_updates=((2, 2),))
    assert ec.case_problem(case) is None
    events = [ec.EngineEvent(ec.ADD_REQUEST, 0), ec.EngineEvent(ec.ADD_REQUEST, 1), *[STEP] * 8,
              ec.EngineEvent(ec.STREAM_UPDATE, 0), ec.EngineEvent(ec.STREAM_UPDATE, 1), *[STEP] * 4]
    from asyncspec.statemachine_tests.vllm_engine.engine_run import EngineRun
    from asyncspec.statemachine_tests.vllm_engine.engine_target import EngineTarget

    target = EngineTarget(case.engine)
    run = EngineRun(case, target, {})
    for event in events:
        assert run.apply(event), run.result.rows[-1].differences  # the spec agrees all the way
    scheduler = target.driver.scheduler
    held = [r for r in scheduler.requests.values() if str(r.status) == "WAITING" or r.status.name == "WAITING"]
    assert len(held) == 2 and not scheduler.running
    assert scheduler.kv_cache_manager.block_pool.get_num_free_blocks() == 0
    assert target.driver.has_work() and target.driver.leftover() is not None  # it spins with empty steps
    assert eng_stuck(run)


def eng_stuck(run: object) -> bool:
    """The spec's view: both sessions wait with their blocks, none runs, no block is free, and what
    is left to happen is the engine loop, the end of an input stream (queued behind a turn that
    never runs) or an abort, the one way out."""
    from asyncspec.spec import engine as eng

    oracle = run.oracle  # type: ignore[attr-defined]
    state = oracle.state
    return (len(state.kv_holding) == 2 and not state.running and not state.free_blocks
            and all(a.name in (eng.SCHEDULE, eng.UPDATE_FROM_OUTPUT, eng.STREAM_CLOSE, eng.ABORT)
                    for a in eng.enabled_actions(oracle.cfg, state)))


@pytest.mark.slow
@pytest.mark.parametrize("mutant", [m.id for m in RUNNER_STREAMING_MUTANTS])
def test_the_runner_streaming_mutants_die_in_the_streaming_stage(mutant: str) -> None:
    pytest.importorskip("vllm")
    result = engine_kill(mutant)
    assert result["killed"] and "(streaming profile)" in result["detail"], result
