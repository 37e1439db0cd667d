"""One hand-written engine case driven to its end, the spec following (the pause and streaming tests)."""
from __future__ import annotations

from typing import Any

from asyncspec.statemachine_tests.vllm_engine import engine_case as ec
from asyncspec.statemachine_tests.vllm_engine.engine_profile import drain


def drive(case: ec.EngineCase, events: list[ec.EngineEvent]) -> tuple[Any, dict[str, int]]:
    """``events`` on a fresh engine, then the campaign's drain; each must keep the two sides equal.
    The run (``EngineRun``, its liveness checked at the end) and the spec events it counted."""
    from asyncspec.statemachine_tests.vllm_engine.engine_run import EngineRun
    from asyncspec.statemachine_tests.vllm_engine.engine_target import EngineTarget

    target = EngineTarget(case.engine)
    coverage: dict[str, int] = {}
    run = EngineRun(case, target, coverage)
    for event in events:
        assert run.apply(event), run.result.rows[-1].differences
    for _ in range(80):
        event = drain(len(case.requests), len(case.requests), target.driver.has_work(), target.driver.paused(),
                      run.oracle.enabled())
        if event is None:
            break
        assert run.apply(event), run.result.rows[-1].differences
    run.check_finished(target.driver.leftover())
    return run, coverage


def engine_kill(mutant: str) -> dict[str, Any]:
    """``asyncspec mutate-vllm --target vllm-engine --only MUTANT --json``: the mutant's result on the target."""
    import json
    import subprocess
    import sys

    p = subprocess.run([sys.executable, "-m", "asyncspec", "mutate-vllm", "--target", "vllm-engine",
                        "--only", mutant, "--json"], capture_output=True, text=True, timeout=900)
    result: dict[str, Any] = json.loads(p.stdout)["mutants"][0]["results"]["vllm-engine"]
    return result
