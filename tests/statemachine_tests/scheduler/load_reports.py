"""A KV connector's asynchronous load, reported back, run on the spec and vLLM's scheduler in
lockstep: the shared case of the failed-load and invalid-block tests."""
from __future__ import annotations

from asyncspec.statemachine_tests.core.harness import Event, RequestSpec, Row, Workload, run_lockstep
from asyncspec.statemachine_tests.scheduler.spec_target import SpecTarget
from asyncspec.statemachine_tests.scheduler.vllm_target import VllmTarget


def reported_load(policy: str, name: str, prompt_len: int, report: str, invalid_blocks: bool = False) -> list[Row]:
    """One request of ``prompt_len`` tokens whose prompt connector ``name`` loads asynchronously
    (blocks of 4, 8 blocks, budget 16); two ``schedule()`` calls, the worker's ``report`` of the
    load (``fail`` or ``invalid@j``), then, under policy ``recompute``, one more ``schedule()``.
    The rows of a run in which the two sides agree (asserted)."""
    w = Workload(requests=(RequestSpec(prompt_len, 2),), depth=2, block_size=4, num_blocks=8, token_budget=16,
                 kv_connector=name, kv_load_failure_policy=policy, remote_loads=(0,),
                 kv_invalid_blocks=invalid_blocks)
    events = [Event("add_request", 0), Event("schedule"), Event("schedule"),
              Event("deliver", kv=(report, 0)), Event("schedule")]
    result = run_lockstep(w, SpecTarget(w), VllmTarget(w), events[:-1] if policy == "fail" else events)
    assert not result.diverged, result.rows[-1].differences
    return result.rows
