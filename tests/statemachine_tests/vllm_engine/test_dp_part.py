"""The ``dp`` part: vLLM's ``DPEngineCoreProc.run_busy_loop`` on two or three ranks against the DP spec.

Default tier: a hand case read off the spec and played on vLLM; a rank woken alone hangs as the spec
says; the stand-in all-reduce agrees with vLLM's own over a real gloo group; 30 drawn cases are clean;
a divergence's bucket and saved case.  Slow: 300 cases on seeds 0-2 are clean and reach every
category; every DP mutant of the corpus dies in the part's ``mutate-vllm`` stage (a child process,
vLLM imported under the mutant's overlay).
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from asyncspec.engine.vllm.mutants_features import DP_MUTANTS
from asyncspec.spec import dp
from asyncspec.statemachine_tests.vllm_engine.dp_case import Expected, Walked, draw_case, rank_scripts
from asyncspec.statemachine_tests.vllm_engine.dp_part import DP_COVERAGE, DPPartRun, check_case, first_difference

pytest.importorskip("vllm")

from asyncspec.engine.vllm.dp_driver import DPDriver  # noqa: E402


@pytest.fixture(scope="module")
def driver() -> DPDriver:
    return DPDriver(2)


def _walk(cfg: dp.DPConfig, actions: list[str]) -> list[Walked]:
    s, out = dp.initial_state(cfg), []
    for text in actions:
        t = dp.apply(cfg, s, dp.parse_dp_action(text))
        out.append(Walked(text, s, t.state, t.events, s.coordinator_wave))
        s = t.state
    return out


HAND = dp.DPConfig("hand", ((0, 2),), dp_sync_interval=2)
HAND_WALK = ["add_request r0", "step rank0", "start_dp_wave rank1", "step rank1", "all_reduce",
             "end_iteration rank0", "end_iteration rank1", "step rank0", "step rank1", "all_reduce",
             "end_iteration rank0", "end_iteration rank1"]


def test_a_hand_case_reads_as_each_ranks_iterations_and_vllm_agrees(driver: DPDriver) -> None:
    scripts = rank_scripts(HAND, _walk(HAND, HAND_WALK))
    assert scripts[0].inputs == [[("add", 2, 0)], []] and scripts[1].inputs == [[("start", 0, 0)], []]
    assert scripts[0].expected == [Expected("step", 1, 0, True, (("start_wave", 0), ("start_wave", 0))),
                                   Expected("step", 0, 1, False, (("wave_complete", 0),))]
    assert scripts[1].expected == [Expected("dummy", 1, 0, True, ()), Expected("dummy", 0, 1, False, ())]
    runs = driver.run([s.inputs for s in scripts], HAND.dp_sync_interval)
    assert [first_difference(s, r) for s, r in zip(scripts, runs)] == [None, None]


def test_a_rank_woken_alone_hangs_in_the_all_reduce_as_the_spec_says(driver: DPDriver) -> None:
    cfg = dp.DPConfig("alone", ((0, 1),), dp_sync_interval=2)
    walk = _walk(cfg, ["add_request r0", "step rank0"])  # rank 1 never reads its START_DP_WAVE
    scripts = rank_scripts(cfg, walk)
    assert scripts[0].hangs and not scripts[1].hangs
    runs = driver.run([s.inputs for s in scripts], cfg.dp_sync_interval)
    assert runs[0].error is not None and runs[0].error.startswith("DPHang")
    assert first_difference(scripts[0], runs[0]) is None
    scripts[0].hangs = False  # a spec that expected the loop to end is told otherwise
    assert "vLLM's loop failed" in (first_difference(scripts[0], runs[0]) or "")


def test_the_stand_in_all_reduce_agrees_with_a_real_gloo_group(driver: DPDriver) -> None:
    gloo = DPDriver(2, gloo=True)
    try:
        cases = [c for c in (draw_case(7, i) for i in range(40))
                 if c.cfg.dp_size == 2 and not any(s.hangs for s in c.scripts)][:8]
        for case in cases:
            inputs = [s.inputs for s in case.scripts]
            real = gloo.run(inputs, case.cfg.dp_sync_interval)
            stand_in = driver.run(inputs, case.cfg.dp_sync_interval)
            assert [r.seen for r in real] == [r.seen for r in stand_in] and not any(r.error for r in real)
    finally:
        gloo.close()


def test_thirty_drawn_cases_are_clean(tmp_path: Path) -> None:
    run = DPPartRun(0, 30, tmp_path, 5, False)
    run.run()
    assert run.ran == 30 and run.buckets == {}, run.messages
    assert run.coverage[dp.DUMMY_BATCH] > 0 and run.coverage[dp.WAVE_COMPLETE] > 0
    assert run.coverage[dp.START_WAVE_WAKES] > 0


def test_a_divergence_is_bucketed_and_its_case_saved(driver: DPDriver, tmp_path: Path) -> None:
    case = next(c for c in (draw_case(0, i) for i in range(20)) if c.cfg.dp_size == 2)
    first = case.scripts[1].expected[0]
    case.scripts[1].expected[0] = Expected(first.kind, 99, first.current_wave, first.engines_running, first.outputs)
    differences, runs = check_case(driver, case)
    assert differences[1] == "iteration 0: step_counter is 1, the spec's 99"
    run = DPPartRun(0, 1, tmp_path, 5, False)
    run._record(case, 0, 1, differences[1], runs)
    (bucket,) = run.buckets.values()
    assert bucket["signature"] == "dp rank1: step_counter" and bucket["first_example"] == 0
    saved = json.loads(Path(str(bucket["replay_file"])).read_text())
    assert saved["rank"] == 1 and saved["actions"] == case.actions


def _kill(mutant: str, examples: int) -> dict[str, object]:
    """The ``dp`` stage of ``mutate-vllm`` under ``mutant``: a child process imports vLLM through its overlay."""
    code = ("import json, sys\n"
            "from asyncspec.engine.vllm.overlay import install\n"
            "from asyncspec.engine.vllm.vllm_mutants import MUTANTS_BY_ID\n"
            "finder = install(MUTANTS_BY_ID[sys.argv[1]])\n"
            "from asyncspec.statemachine_tests.vllm_engine.engine_campaign import dp_summary\n"
            "s = dp_summary(int(sys.argv[2]), 0)\n"
            "print(json.dumps({'divergences': s['divergences'], 'first': s['first_divergence'], "
            "'loaded': finder.loaded}))\n")
    p = subprocess.run([sys.executable, "-c", code, mutant, str(examples)], capture_output=True, text=True,
                       timeout=600)
    lines = [line for line in p.stdout.splitlines() if line.startswith("{")]
    assert lines, p.stderr[-2000:]
    result: dict[str, object] = json.loads(lines[-1])
    return result


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_dp_part_is_clean_and_reaches_every_category(seed: int, tmp_path: Path) -> None:
    run = DPPartRun(seed, 300, tmp_path, 5, False)
    run.run()
    assert run.ran == 300 and run.buckets == {}, run.messages
    assert [c for c in DP_COVERAGE if run.coverage[c] == 0] == []


@pytest.mark.slow
@pytest.mark.parametrize("mutant", [m.id for m in DP_MUTANTS])
def test_every_dp_mutant_dies_in_the_dp_part(mutant: str) -> None:
    result = _kill(mutant, 100)
    assert result["loaded"] and int(str(result["divergences"])) > 0, result
