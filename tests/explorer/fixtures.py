"""Trace files of every kind the explorer reads, made by the tool itself (no hand-written states).

* a checker counterexample: ``finding-d3-no-stagger`` (an expected finding);
* a lasso: the livelock that mutant ``processed_step_seq_frozen`` causes on
  ``async-d2-defer`` (rendered with the mutant applied: the real spec has no cycle);
* a vLLM fuzz divergence: a spec run of real fuzz events with one difference put in
  at the last event, saved by ``save_replay`` for target ``vllm``;
* a ``vllm-engine`` file: the same plus the engine target's extra keys.
"""
from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from asyncspec.checker import configs as cfgs
from asyncspec.checker.bfs import explore
from asyncspec.checker.spec_mutants import MUTANTS_BY_NAME, applied
from asyncspec.checker.trace import Trace, save_trace
from asyncspec.engine.vllm.engine_config import EngineDriverConfig
from asyncspec.explorer.checker_view import checker_view
from asyncspec.explorer.fuzz_view import spec_oracle
from asyncspec.statemachine_tests.core.harness import (
    Difference, RequestSpec, RunResult, Workload, run_lockstep, step_and_observe,
)
from asyncspec.statemachine_tests.core.replay_file import replay_json, save_replay
from asyncspec.statemachine_tests.scheduler.fuzz_example import pick
from asyncspec.statemachine_tests.vllm_engine.engine_case import EngineCase, EngineRequest
from asyncspec.statemachine_tests.scheduler.spec_target import SpecTarget

FINDING = "finding-d3-no-stagger"
LIVELOCK_MUTANT = "processed_step_seq_frozen"
FUZZ_CHOICES = (0, 0, 220, 0, 0, 0, 0, 0)  # r0, schedule, r1 arrives, then the engine loop


def counterexample(name: str = FINDING) -> Trace:
    """The shortest trace of the config's expected finding."""
    cfg = cfgs.resolve(name)[0]
    result = explore(cfg)
    return next(v.trace for v in result.violations if v.property == cfg.expect_violation)


def save_counterexample(folder: Path, name: str = FINDING) -> Path:
    path = folder / f"{name}.trace.json"
    save_trace(counterexample(name), path)
    return path


def lasso_view() -> dict[str, Any]:
    """The explorer view of the mutant's livelock (computed with the mutant applied)."""
    m = MUTANTS_BY_NAME[LIVELOCK_MUTANT]
    with applied(m.patches):
        result = explore(cfgs.resolve(m.config)[0])
        trace = next(v.trace for v in result.violations if v.property == "no_livelock")
        return checker_view(trace, f"livelock of mutant {LIVELOCK_MUTANT}")


def engine_case() -> EngineCase:
    """A ``vllm-engine`` case (real token ids; nothing of vLLM is run here)."""
    return EngineCase(EngineDriverConfig(depth=2, block_size=4, num_blocks=4, max_num_batched_tokens=6),
                      (EngineRequest((5, 6, 7, 8, 9), 3), EngineRequest((11, 12, 13), 2)))


def fuzz_run(oracle_of: Callable[[Workload], SpecTarget] = SpecTarget) -> RunResult:
    """Real fuzz events on the spec (both sides), the last one made to differ in r0.C."""
    w = engine_case().workload()
    oracle, events = oracle_of(w), []
    for choice in FUZZ_CHOICES:
        event = pick(oracle.enabled(), choice)
        events.append(event)
        step_and_observe(oracle, w, event)
    result = run_lockstep(w, oracle_of(w), oracle_of(w), events)
    last = result.rows[-1]
    computed = dict(last.expected.requests)[0].num_computed_tokens
    last.differences = [Difference("r0.num_computed_tokens", computed, computed - 1)]
    return result


def save_fuzz_divergence(folder: Path) -> Path:
    path = folder / "fuzz-vllm-seed0.json"
    save_replay(fuzz_run(), "vllm", path)
    return path


def save_engine_divergence(folder: Path) -> Path:
    """A ``vllm-engine`` file as ``engine_fuzz.save_engine_replay`` writes one: the case, the
    engine events and the worker column keyed by event number."""
    case = engine_case()
    result = fuzz_run(lambda w: spec_oracle(w, case.to_json()))
    data = replay_json(result, "vllm-engine")
    data["case"] = case.to_json()
    data["engine_events"] = ["add_request r0", "step", "add_request r1", "step", "step"]
    data["worker"] = {"2": ["r0@0:5,6,7,8,9"], "8": ["r0@6:17", "r1@3:41"]}
    path = folder / "fuzz-vllm-engine-seed0.json"
    path.write_text(json.dumps(data, indent=2))
    return path
