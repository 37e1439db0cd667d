"""Engine cases (``vllm-engine`` replay files) and monitor windows closed down to every request (issue 30):
an unknown key, a float, a short or malformed second request, ``block_size = 0``, a CUDA case on a machine
without a GPU, an event naming a request the case has not: each is exit 2 and one line, found before vLLM
is imported (so no warning of its import reaches stderr).
"""
from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from asyncspec.checker import configs as cfgs
from tests.cli_contract import assert_usage_error, invoke


def engine_file() -> dict[str, Any]:
    """A valid vllm-engine replay file: one request, six engine events."""
    from asyncspec.engine.vllm import oracle_model as om
    from asyncspec.engine.vllm.engine_config import EngineDriverConfig
    from asyncspec.statemachine_tests.vllm_engine.engine_case import EngineCase, EngineRequest

    case = EngineCase(EngineDriverConfig(), (EngineRequest((om.FIRST_TOKEN_ID, om.FIRST_TOKEN_ID + 1), 3),
                                             EngineRequest((om.FIRST_TOKEN_ID + 2,), 2)))
    return {"asyncspec_fuzz_replay": 1, "target": "vllm-engine", "workload": case.workload().to_json(), "events": [],
            "case": case.to_json(), "engine_events": ["add_request r0", "add_request r1", "step", "step"]}


def _set(where: list[Any], value: Any) -> Any:
    def mutate(data: dict[str, Any]) -> dict[str, Any]:
        out = copy.deepcopy(data)
        target = out
        for key in where[:-1]:
            target = target[key]
        if value is _DROP:
            del target[where[-1]]
        else:
            target[where[-1]] = value
        return out
    return mutate


_DROP = object()

ENGINE_CASES = [
    (_set(["case", "bogus"], 1), r"unknown key 'bogus' in 'case'$"),
    (_set(["case", "engine", "max_model_lenn"], 1), r"unknown key 'max_model_lenn' in 'case.engine' \(did you mean"),
    (_set(["case", "requests", 1, "colour"], 1), r"unknown key 'colour' in 'case.requests\[1\]'"),
    (_set(["case", "requests", 0, "max_tokens"], 3.0), r"'case.requests\[0\].max_tokens' must be an integer \(got 3.0\)"),
    (_set(["case", "requests", 1, "max_tokens"], 2.5), r"'case.requests\[1\].max_tokens' must be an integer"),
    (_set(["case", "requests", 1, "prompt"], [102.5]), r"'case.requests\[1\].prompt\[0\]' must be an integer"),
    (_set(["case", "requests", 1, "prompt"], []), r"'case.requests\[1\].prompt' must list at least 1 item"),
    (_set(["case", "requests", 1, "ignore_eos"], _DROP), r"'ignore_eos' is required in 'case.requests\[1\]'"),
    (_set(["case", "requests", 1], [3, 2]), r"'case.requests\[1\]' must be a table of keys"),
    (_set(["case", "requests"], []), r"'case.requests' must list at least 1 item"),
    (_set(["case", "engine", "block_size"], 0), r"'case.engine.block_size' must be 1..1024 \(got 0\)"),
    (_set(["case", "engine", "num_blocks"], 10**9), r"'case.engine.num_blocks' must be 1..4096"),
    (_set(["case", "engine", "depth"], 7), r"'case.engine.depth' must be 1..3"),
    (_set(["case", "engine", "device"], "tpu"), r"'case.engine.device' must be one of cpu, cuda"),
    (_set(["case", "engine", "runner"], "v3"), r"'case.engine.runner' must be one of v1, mrv2"),
    (_set(["case", "decode_stagger"], 10**9), r"'case.decode_stagger' must be 1..4"),
    (_set(["case", "engine"], _DROP), r"'engine' is required in 'case'"),
    (_set(["engine_events"], ["add_request r0", "add_request r7", "step"]),
     r"engine event 2 'add_request r7' names a request the case does not have \(r0..r1\)"),
    (_set(["engine_events"], ["abort_in_step r2"]), r"engine event 1 'abort_in_step r2' names a request"),
    (_set(["engine_events"], ["warp"]), r"unknown engine event 'warp'"),
    (_set(["asyncspec_fuzz_replay"], 1.0), r"'asyncspec_fuzz_replay' must be an integer \(got 1.0\)"),
]


@pytest.mark.parametrize("mutate, pattern", ENGINE_CASES, ids=[f"engine{i}" for i in range(len(ENGINE_CASES))])
def test_bad_engine_case(tmp_path: Path, mutate: Any, pattern: str) -> None:
    data = mutate(engine_file())
    path = tmp_path / "e.json"
    path.write_text(json.dumps(data))
    assert_usage_error(invoke("replay", str(path), "--target", "vllm-engine"), pattern)


def test_a_cuda_case_on_a_machine_without_a_gpu(tmp_path: Path) -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a CUDA GPU: the case runs")
    path = tmp_path / "e.json"
    path.write_text(json.dumps(_set(["case", "engine", "device"], "cuda")(engine_file())))
    assert_usage_error(invoke("replay", str(path), "--target", "vllm-engine"),
                       r"the case runs on device 'cuda' and this machine has no CUDA GPU")


def test_the_engine_case_schema_accepts_every_drawn_case() -> None:
    """What the campaign draws is valid against the closed schema (no key the schema forgets)."""
    import random

    from asyncspec.checker.schema import schema_problem
    from asyncspec.statemachine_tests.vllm_engine.engine_case import (
        CaseShape, EngineCase, case_schema, draw_requests,
    )
    from asyncspec.statemachine_tests.vllm_engine.engine_profile import _configs

    rng = random.Random(0)
    for engine in _configs(2, "cpu") + _configs(3, "cpu") + _configs(2, "cuda", "mrv2", k=2):
        requests = draw_requests(rng, 3, CaseShape(periodic_share=0.5), engine.max_model_len)
        data = EngineCase(engine, requests, resets=1, decode_stagger=1).to_json()
        assert schema_problem(data, case_schema()) is None
        assert EngineCase.from_json(json.loads(json.dumps(data))) == EngineCase(engine, requests, resets=1)


# ------------------------------------------------------------------- monitor windows, down to every request


def window() -> dict[str, Any]:
    from asyncspec.checker.window_trace import WindowTrace
    from asyncspec.spec.state import initial_state

    cfg = cfgs.named_configs()["sync-d1"]
    return WindowTrace(cfg, initial_state(cfg, (0, 0, 0)), [], [], "seen", {}).to_json()


WINDOWS = [
    (_set(["config", "requests", 1], [3]), r"'config.requests\[1\]' must list at least 2 item"),
    (_set(["config", "requests", 1], [3, 2.5]), r"'config.requests\[1\]\[1\]' must be an integer \(got 2.5\)"),
    (_set(["config", "requests", 1], "3x2"), r"'config.requests\[1\]' must be a list"),
    (_set(["config", "requests", 2], [3, 2, 1]), r"'config.requests\[2\]' must list at most 2 item"),
    (_set(["config", "eos_positions"], [[0], [1.5], [0]]), r"'config.eos_positions\[1\]\[0\]' must be an integer"),
    (_set(["start_state", "waiting"], [0, 1.0, 2]), r"'start_state.waiting\[1\]' must be an integer \(got 1.0\)"),
    (_set(["start_state", "params", 1], [2, 3]), r"'start_state.params\[1\]' must list at least 3 item"),
    (_set(["start_state", "params", 1, 0], 2.0), r"'start_state.params\[1\]\[0\]' must be an integer"),
    (_set(["start_state", "counters", 1, 6], 1), r"'start_state.counters\[1\]\[6\]' must be true or false"),
    (_set(["start_state", "scalars"], [0, 0, False, 0]), r"'start_state.scalars' must list at least 5 item"),
    (_set(["start_state", "colour"], 1), r"unknown key 'colour' in 'start_state'"),
    (_set(["config", "forced_preemptions"], 2**62 + 1), r"'forced_preemptions' must be 0..4611686018427387904"),
    (_set(["asyncspec_monitor_window"], 1.0), r"'asyncspec_monitor_window' must be an integer \(got 1.0\)"),
]


@pytest.mark.parametrize("mutate, pattern", WINDOWS, ids=[f"window{i}" for i in range(len(WINDOWS))])
def test_bad_monitor_window_request(tmp_path: Path, mutate: Any, pattern: str) -> None:
    path = tmp_path / "w.json"
    path.write_text(json.dumps(mutate(window())))
    assert_usage_error(invoke("replay", str(path)), pattern)


def test_a_window_with_the_monitors_unlimited_resets_replays(tmp_path: Path) -> None:
    from asyncspec.monitor.monitor_config import UNLIMITED_RESETS

    path = tmp_path / "w.json"
    path.write_text(json.dumps(_set(["config", "forced_preemptions"], UNLIMITED_RESETS)(window())))
    o = invoke("replay", str(path))
    assert o.code == 0, (o.stdout, o.stderr)
