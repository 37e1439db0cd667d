"""Torch replay files: what ``fuzz --target torch`` writes (``torch_oracle.replay_json``) passes the closed
schema of ``engine/torch/replay.py``, for every workload the campaign draws, and loads back unchanged."""
from __future__ import annotations

import json
import random
from dataclasses import asdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from asyncspec.checker.schema import schema_problem
from asyncspec.engine.torch.replay import load_torch_replay, replay_schema
from asyncspec.engine.torch.torch_engine import Workload, default_model
from asyncspec.engine.torch.torch_oracle import FUZZ_MODEL, build_workload, check_workload, replay_json

from tests.cli_contract import assert_usage_error, invoke


def test_every_drawn_workload_fits_the_schema() -> None:
    """No false refusal: 500 workloads as the campaign draws them (``random.Random(seed).randint``)."""
    schema = replay_schema()
    for seed in range(500):
        w = build_workload(random.Random(seed).randint)
        data = {"asyncspec_torch_replay": 1, "target": "torch", "seed": seed, "example": 0,
                "workload": json.loads(json.dumps(asdict(w))), "strategy": "v1", "depths": [1, 2], "problems": []}
        assert schema_problem(data, schema) is None, (seed, schema_problem(data, schema))


def test_a_written_divergence_loads_back(tmp_path: Path) -> None:
    w = Workload(prompts=((24,), (33, 13, 23)), max_tokens=(2, 5), token_budget=5, max_num_seqs=3, block_size=4,
                 num_blocks=2, stale_mode="drop")
    report = check_workload(w, strategy="v2", depths=(1, 2), bug="feed_by_row", check_spec=False,
                            model=default_model("cpu", FUZZ_MODEL))
    data = replay_json(report, 7, 3) | {"bug": "feed_by_row"}
    assert set(data) <= set(replay_schema()["properties"])
    path = tmp_path / "fuzz-torch-seed7.json"
    path.write_text(json.dumps(data))
    workload, strategy, depths, bug = load_torch_replay(path)
    assert (workload, strategy, bug) == (w, "v2", "feed_by_row") and depths


@pytest.mark.parametrize("change, words", [
    (lambda d: d["workload"]["prompts"][0].append(64), r"'workload.prompts\[0\]\[1\]' must be 0..63"),
    (lambda d: d["workload"].update(prompts=[[24, 25, 26], [33]], max_tokens=[511, 5]),
     r"request r0: prompt and max_tokens \(3 \+ 511\) exceed the model's 512 positions"),
    (lambda d: d["workload"].__setitem__("aborts", [[1, 2]]), r"'workload.aborts\[0\]' names a request"),
    (lambda d: d.__setitem__("bug", "no_such_bug"), r"'bug' must be one of"),
], ids=["token-past-vocab", "past-positions", "abort-of-no-request", "unknown-bug"])
def test_what_the_engine_cannot_hold_is_one_line(change: Callable[[dict[str, Any]], None], words: str,
                                                 tmp_path: Path) -> None:
    data = {"asyncspec_torch_replay": 1, "target": "torch", "workload": {"prompts": [[24], [33, 13]],
                                                                         "max_tokens": [2, 5]}, "strategy": "v2"}
    change(data)
    path = tmp_path / "t.json"
    path.write_text(json.dumps(data))
    assert_usage_error(invoke("replay", str(path), "--target", "torch"), words)
