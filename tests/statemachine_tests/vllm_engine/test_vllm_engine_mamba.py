"""A Mamba state group beside attention on the ``vllm-engine`` target (issue 28, item 6, mode ``none``).

The runner reports a ``MambaSpec`` layer beside its attention layer (``runner_stubs.stub_runner``), so vLLM's
own start-up builds the hybrid KV config and ``MambaManager`` gives each request one state block; the spec
follows with the same group (``spec/mamba.py``), and the oracle model carries each request's state through
the runner's second block table (``fake_model.py``).  Default tier: a case with a Mamba group round-trips
and is checked (``align`` refused with its CPU limit); the engine really has the two groups; a hand case
agrees with the spec, state blocks compared, and a state block overwritten behind the runner's back shows
in the sampled tokens; ``MambaCoverage`` counts what it says; 20 cases of the ``mamba`` part are clean and
reach its categories.  Slow: the part's 1000 cases on seeds 0-2 clean, every category reached; the runner
mutant ``runner_swap_row_first_group_only`` dies in the mamba stage of ``mutate-vllm --target vllm-engine``,
and makes ``fuzz --profile mamba`` exit 1 with a replay file that replays (1 under the mutant, 0 without).
"""
from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from asyncspec.engine.vllm.engine_config import EngineDriverConfig
from asyncspec.statemachine_tests.core.harness import DELIVER, SCHEDULE, Observation, RequestObs
from asyncspec.statemachine_tests.vllm_engine import engine_case as ec
from asyncspec.statemachine_tests.vllm_engine.engine_campaign import run_fixed
from asyncspec.statemachine_tests.vllm_engine.engine_parts import ENGINE_PARTS
from asyncspec.statemachine_tests.vllm_engine.engine_profile import MAMBA_ENGINE_PROFILE
from asyncspec.statemachine_tests.vllm_engine.mamba_coverage import MAMBA_ENGINE_COVERAGE, MambaCoverage, mamba_configs
from tests.statemachine_tests.vllm_engine.drive_case import drive, engine_kill

STEP = ec.EngineEvent(ec.STEP)
CONFIG = mamba_configs(2, "cpu")[0]


def _case(config: EngineDriverConfig = CONFIG) -> ec.EngineCase:
    return ec.EngineCase(config, (ec.EngineRequest((900, 901, 902, 903, 904, 905, 906, 907, 908, 909), 4),
                                  ec.EngineRequest((910, 911, 912), 5)))


def test_a_mamba_case_round_trips_and_is_checked() -> None:
    case = _case()
    assert ec.EngineCase.from_json(json.loads(json.dumps(case.to_json()))) == case
    assert ec.case_problem(case) is None and case.workload().mamba_cache_mode == "none"
    assert "mamba_cache_mode 'none'" in (ec.case_problem(_case(replace(CONFIG, mamba_cache_mode="align"))) or "")
    assert "prefix caching" in (ec.case_problem(_case(replace(CONFIG, enable_prefix_caching=True))) or "")
    small = _case(replace(CONFIG, num_blocks=5))  # r0: 14 tokens, 4 blocks and 2 for its states
    assert "pool alone" in (ec.case_problem(replace(small, requests=small.requests[:1])) or "")
    assert ec.case_problem(replace(small, requests=small.requests[1:])) is None  # r1's 8 tokens: 2 + 2


def test_the_engine_has_an_attention_and_a_mamba_group_in_one_pool() -> None:
    pytest.importorskip("vllm")
    from asyncspec.engine.vllm.engine_core_driver import EngineCoreDriver

    driver = EngineCoreDriver(CONFIG)
    kv = driver.engine.scheduler.kv_cache_config
    assert [type(g.kv_cache_spec).__name__ for g in kv.kv_cache_groups] == ["FullAttentionSpec", "MambaSpec"]
    assert kv.kv_cache_groups[1].kv_cache_spec.block_size == 256 and kv.num_blocks == CONFIG.num_blocks + 1
    assert driver.engine.scheduler.block_size == 256  # the LCM of the groups' (resolve_kv_cache_block_sizes)
    assert driver.engine.vllm_config.cache_config.mamba_cache_mode == "none"
    assert [t.block_size for t in driver.worker.runner.input_batch.block_table.block_tables] == [4, 256]


def test_a_hand_case_agrees_and_compares_each_state_block() -> None:
    pytest.importorskip("vllm")
    events = [ec.EngineEvent(ec.ADD_REQUEST, 0), ec.EngineEvent(ec.ADD_REQUEST, 1), STEP, STEP, STEP]
    run, _ = drive(_case(), events)
    assert not run.diverged, run.result.rows[-1].differences
    states = {i: r.swa_block_table for row in run.result.rows for i, r in row.expected.requests if r.swa_block_table}
    assert set(states) == {0, 1} and all(len(s) == 1 for s in states.values())  # one state block each
    assert states[0] != states[1]
    delivered: dict[int, list[int]] = {0: [], 1: []}
    for row in run.result.rows:
        for req, tokens in row.actual.delivered:
            delivered[req].extend(tokens)
    assert delivered == {i: list(r.stream) for i, r in enumerate(_case().requests)}
    assert run.result.coverage["mamba_state_carried"] > 0


def test_a_state_block_overwritten_behind_the_runner_shows_in_the_tokens() -> None:
    pytest.importorskip("vllm")
    from asyncspec.statemachine_tests.vllm_engine.engine_run import EngineRun
    from asyncspec.statemachine_tests.vllm_engine.engine_target import EngineTarget

    case = _case(replace(CONFIG, depth=1, max_num_batched_tokens=4))  # r0's prompt in chunks of 4
    target = EngineTarget(case.engine)
    run = EngineRun(case, target, {})
    assert run.apply(ec.EngineEvent(ec.ADD_REQUEST, 0)) and run.apply(STEP)
    model = target.driver.worker.model
    state = model.state_table()
    assert state is not None
    model.states[int(state[0, 0])] += 1  # the state r0's first chunk left
    ok = all(run.apply(STEP) for _ in range(6))
    assert not ok and run.result.rows[-1].differences[0].field == "delivered"


def _obs(tables: dict[int, tuple[tuple[int, ...], tuple[int, ...]]], scheduled: tuple[int, ...] = (),
         preempted: tuple[int, ...] = ()) -> Observation:
    blank = RequestObs(status="RUNNING", num_tokens=1, num_output_tokens=0, num_computed_tokens=0,
                       num_output_placeholders=0, num_in_flight_tokens=0, num_stale_output_tokens=0,
                       drop_stale_output=False, is_prefill_chunk=False, last_sched_seq=0, block_table=(),
                       output_tokens=())
    return Observation(requests=tuple((i, replace(blank, block_table=a, swa_block_table=s))
                                      for i, (a, s) in sorted(tables.items())),
                       waiting=(), running=(), scheduled=tuple((r, 1, 1) for r in scheduled), delivered=(),
                       finished=(), preempted=preempted, num_in_flight_steps=0, has_requests=True,
                       free_blocks=(), sched_step_seq=0, processed_step_seq=0, deferred_frees=())


def test_mamba_coverage_counts_preemptions_frees_in_flight_and_reuse() -> None:
    coverage: dict[str, int] = {}
    mamba = MambaCoverage(coverage)
    first = _obs({0: ((0,), (1,))}, scheduled=(0,))
    mamba.note(SCHEDULE, first)
    mamba.schedule(first, None)  # r0's step in flight
    second = _obs({0: ((), ()), 1: ((2,), (0,))}, scheduled=(1,), preempted=(0,))  # r1 takes r0's block 0
    mamba.note(SCHEDULE, second)
    assert coverage == {"mamba_state_carried": 0, "mamba_state_preempted": 1, "mamba_state_released_in_flight": 1,
                        "mamba_state_block_reused": 1}
    mamba.schedule(second, None)
    mamba.deliver()
    mamba.note(DELIVER, _obs({0: ((), ()), 1: ((), ())}))  # r1 finishes as its own step is delivered
    assert coverage["mamba_state_released_in_flight"] == 1 and coverage["mamba_state_preempted"] == 1


def test_the_mamba_part_is_in_the_default_campaign_and_clean_on_a_few_cases() -> None:
    pytest.importorskip("vllm")
    part = next(p for p in ENGINE_PARTS if p.name == "mamba")
    assert part.profile is MAMBA_ENGINE_PROFILE and part.examples == 1000
    summary = run_fixed(20, 0, MAMBA_ENGINE_PROFILE.depths, MAMBA_ENGINE_PROFILE)
    assert summary["divergences"] == 0, summary["first_divergence"]
    missing = [c for c in MAMBA_ENGINE_COVERAGE if summary["coverage"].get(c, 0) == 0]
    assert not missing, (missing, summary["coverage"])


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_mamba_part_is_clean_and_reaches_its_categories(seed: int) -> None:
    pytest.importorskip("vllm")
    summary = run_fixed(1000, seed, MAMBA_ENGINE_PROFILE.depths, MAMBA_ENGINE_PROFILE)
    assert summary["divergences"] == 0, summary["first_divergence"]
    missing = [c for c in MAMBA_ENGINE_PROFILE.categories() if summary["coverage"].get(c, 0) == 0]
    assert not missing, missing


@pytest.mark.slow
def test_a_runner_side_mamba_mutant_dies_on_the_engine() -> None:
    pytest.importorskip("vllm")
    result = engine_kill("runner_swap_row_first_group_only")
    assert result["killed"] and "(mamba profile)" in result["detail"], result


@pytest.mark.slow
def test_the_mamba_mutant_makes_fuzz_exit_1_and_its_replay_file_replays(tmp_path: Path) -> None:
    pytest.importorskip("vllm")
    from tests.statemachine_tests.vllm_engine.test_vllm_engine import asyncspec_under

    args = ("fuzz", "--target", "vllm-engine", "--profile", "mamba", "--examples", "40", "--out-dir", str(tmp_path))
    p = asyncspec_under("runner_swap_row_first_group_only", *args)
    assert p.returncode == 1 and "DIVERGENCE" in p.stdout + p.stderr, p.stdout[-3000:] + p.stderr[-3000:]
    replay = tmp_path / "fuzz-vllm-engine-seed0.json"
    assert json.loads(replay.read_text())["case"]["engine"]["mamba_cache_mode"] == "none"
    again = asyncspec_under("runner_swap_row_first_group_only", "replay", str(replay), "--target", "vllm-engine")
    assert again.returncode == 1, again.stdout[-2000:]
    clean = subprocess.run([sys.executable, "-m", "asyncspec", "replay", str(replay), "--target", "vllm-engine"],
                           capture_output=True, text=True, timeout=600)
    assert clean.returncode == 0, clean.stdout[-2000:] + clean.stderr[-2000:]
