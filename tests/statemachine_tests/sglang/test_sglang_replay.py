"""The ``sglang`` target's replay files: what ``save_replay`` writes passes the closed schema of
``statemachine_tests/sglang/sglang_replay.py`` and loads back as the same case; a file a campaign wrote under a
mutant replays as still diverging (slow, skipped with the reason where the SGLang venv is absent)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from asyncspec.engine.sglang import sglang_oracle as oracle
from asyncspec.engine.sglang.client import venv_problem
from asyncspec.engine.sglang.sglang_mutants import MUTANTS
from asyncspec.statemachine_tests.sglang.sglang_fuzz import save_replay
from asyncspec.statemachine_tests.sglang.sglang_replay import load_replay, replay_schema
from asyncspec.statemachine_tests.sglang.sglang_run import check

from tests.cli_contract import assert_usage_error, invoke
from tests.statemachine_tests.sglang.test_sglang import ONE, _trace


def test_a_saved_divergence_loads_back_and_a_changed_key_is_named(tmp_path: Path) -> None:
    stream = oracle.stream(ONE.requests[0].prompt, 0, 2)
    wrong = check(ONE, _trace(stream, stream[1] + 1))
    assert wrong.diverged
    path = tmp_path / "fuzz-sglang-seed0.json"
    save_replay(wrong, path, MUTANTS[0].name)
    assert load_replay(path) == (wrong.case, MUTANTS[0].name)
    data = json.loads(path.read_text())
    assert set(data) == set(replay_schema()["properties"])  # the schema names every key save_replay writes
    data["case"]["engine"]["page_size"] = 2
    path.write_text(json.dumps(data))
    assert_usage_error(invoke("replay", str(path), "--target", "sglang"), r"unknown key 'page_size' in 'case.engine'")
    data["case"]["engine"].pop("page_size")
    data["case"]["aborts"] = [{"req": 3, "at": 1}]
    path.write_text(json.dumps(data))
    assert_usage_error(invoke("replay", str(path)), r"'case.aborts\[0\].req' names a request the case does not have")


@pytest.mark.slow  # SGLang's driver twice: about a minute
@pytest.mark.skipif(venv_problem() is not None, reason=f"SGLang venv absent: {venv_problem()}")
def test_a_campaigns_replay_file_replays_as_still_diverging(tmp_path: Path) -> None:
    mutant = MUTANTS[0].name
    run = subprocess.run([sys.executable, "-m", "asyncspec", "fuzz", "--target", "sglang", "--sglang-mutant", mutant,
                          "--examples", "30", "--seed", "0", "--json", "--out-dir", str(tmp_path)],
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 1, run.stderr[-2000:]
    replay_file = json.loads(run.stdout)["replay_file"]
    assert load_replay(Path(replay_file))[1] == mutant
    again = subprocess.run([sys.executable, "-m", "asyncspec", "replay", replay_file], capture_output=True,
                           text=True, timeout=600)
    assert again.returncode == 1 and "Traceback" not in again.stderr, again.stderr[-2000:]


def test_every_drawn_case_fits_the_schema() -> None:
    """No false refusal: 600 cases as a campaign draws them, over every config, and each shrink of the first."""
    from asyncspec.checker.schema import schema_problem
    from asyncspec.statemachine_tests.sglang import sglang_case as sc
    from asyncspec.statemachine_tests.sglang.sglang_replay import case_schema

    schema = case_schema()
    cases = [sc.draw_case(seed, index, tuple(sc.CONFIGS)) for seed in range(3) for index in range(200)]
    for case in cases + list(sc.candidates(cases[0])):
        data = json.loads(json.dumps(case.to_json()))
        assert schema_problem(data, schema) is None, (case, schema_problem(data, schema))
