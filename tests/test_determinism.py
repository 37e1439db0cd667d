"""Determinism (issue 15, item 5): a time-bounded or interrupted fuzz run reports the examples
it ran and the seed, and ``--examples N --seed S`` reproduces exactly that work."""
from __future__ import annotations

import json
import signal
import threading
from pathlib import Path
from typing import Any

import pytest

from asyncspec.checker import interrupt
from asyncspec.statemachine_tests.scheduler.fuzz import fuzz_main

SAME = ("examples", "events", "coverage", "spec_events", "divergences")


def _json(capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    return json.loads(capsys.readouterr().out.strip().splitlines()[-1])  # type: ignore[no-any-return]


def test_an_interrupted_reference_run_is_reproduced_by_its_examples_and_seed(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    timer = threading.Timer(1.5, interrupt.note, (signal.SIGINT,))  # what the handler records
    timer.start()
    rc = fuzz_main("reference", 600.0, 11, True, False, tmp_path)
    timer.cancel()
    cut = _json(capsys)
    assert rc == 3 and cut["interrupted"] and cut["examples"] > 0 and cut["result"] == "partial"
    assert fuzz_main("reference", 600.0, 11, True, False, tmp_path, examples=cut["examples"]) == 0
    again = _json(capsys)
    assert {k: again[k] for k in SAME} == {k: cut[k] for k in SAME}


def test_a_time_bounded_torch_run_is_reproduced_by_its_examples_and_seed(capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("torch")
    from asyncspec.engine.torch.torch_oracle import fuzz_torch

    assert fuzz_torch(1.5, seed=5, json_out=True) == 0
    timed = _json(capsys)
    assert timed["examples"] > 0 and timed["complete"]
    assert fuzz_torch(600.0, seed=5, json_out=True, examples=timed["examples"]) == 0
    fixed = _json(capsys)
    keys = ("examples", "events", "coverage", "spec_events", "wasted_steps")
    assert {k: fixed[k] for k in keys} == {k: timed[k] for k in keys}
    fuzz_torch(1.0, seed=5, json_out=False)
    assert "reproduce with: --examples" in capsys.readouterr().out
