"""Worker configs as TOML (configs/worker/*.toml): loaded and validated like the scheduler's,
a bad file is one line and exit 2, and the matrix they give is the one the pins name."""
from __future__ import annotations

import re
import shutil
import sys
from pathlib import Path

import pytest

from asyncspec.checker import configs as cfgs
from asyncspec.checker.configs import worker_config_from_dict, worker_configs, worker_expectations
from asyncspec.checker.worker_mutants import MUTANT_CONFIGS
from asyncspec.spec.config import ConfigError
from asyncspec.spec.worker import REQUIRED_WITNESSES
from tests.cli_contract import invoke

GOOD = {"name": "w", "order": 1, "requests": [[2, 2]],
        "worker": [{"strategy": "v1", "witnesses": ["worker_async_step"]}]}


def test_the_matrix_in_report_order() -> None:
    assert list(worker_configs()) == ["worker-d2", "worker-d3", "worker-d3-nostagger", "worker-d2-tp",
                                      "worker-d2-late"]
    rows = worker_expectations()
    assert [(e.config, e.strategy) for e in rows][:3] == [("worker-d2", s) for s in ("v1", "v2", "neuron")]
    assert {e.strategy: e.required_witnesses for e in rows if e.config == "worker-d2"} == REQUIRED_WITNESSES
    assert [e.config for e in rows if e.expect_violation] == ["worker-d3", "worker-d3", "worker-d2-late"]
    assert [e.config for e in rows if not e.engine_properties] == ["worker-d3-nostagger"] * 3
    assert set(MUTANT_CONFIGS) <= set(worker_configs())


def test_a_worker_config_is_a_scheduler_config_with_worker_tables() -> None:
    order, cfg, rows = worker_config_from_dict(GOOD)
    assert (order, cfg.name, cfg.requests, cfg.extra) == (1, "w", ((2, 2),), {})
    assert rows[0].required_witnesses == ("worker_async_step",) and rows[0].engine_properties


def _with(**changes: object) -> dict[str, object]:
    return {**GOOD, **changes}


@pytest.mark.parametrize("data, pattern", [
    (_with(witnesses=["wasted_step"]), r"unknown setting 'witnesses'"),
    (_with(set="default"), r"unknown setting 'set'"),
    (_with(order=0), r"'order' must be >= 1"),
    (_with(worker=[]), r"'worker' must list at least 1"),
    (_with(worker=[{"strategy": "v3", "witnesses": []}]), r"'worker\[0\]\.strategy' must be one of v1, v2, neuron"),
    (_with(worker=[{"strategy": "v1"}]), r"'witnesses' is required in 'worker\[0\]'"),
    (_with(worker=[{"strategy": "v1", "witnesses": ["worker_asnyc_step"]}]), r"did you mean 'worker_async_step'"),
    (_with(worker=[{"strategy": "v1", "witnesses": [], "expect": "W1"}]), r"unknown setting 'expect'"),
    (_with(worker=[{"strategy": "v1", "witnesses": []}] * 2), r"strategy 'v1' has two \[\[worker\]\] tables"),
    (_with(token_budget="3"), r"'token_budget' must be an integer"),
    ({k: v for k, v in GOOD.items() if k != "order"}, r"'order' is required"),
])
def test_bad_worker_config_is_one_line(data: dict[str, object], pattern: str) -> None:
    with pytest.raises(ConfigError) as info:
        worker_config_from_dict(data, "x.toml")
    message = str(info.value)
    assert "\n" not in message and message.startswith("x.toml: ") and re.search(pattern, message), message


def _configs_copy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A copy of configs/ that the loader reads instead; returns its worker folder."""
    shutil.copytree(cfgs._config_dir(), tmp_path / "configs")
    monkeypatch.setattr(cfgs, "_config_dir", lambda: tmp_path / "configs")
    return tmp_path / "configs" / "worker"


@pytest.mark.parametrize("text, pattern", [
    ('name = "worker-d2"\norder = 9\nrequests = [[2, 2]]\n[[worker]]\nstrategy = "v1"\nwitnesses = []\n',
     r"two files have name 'worker-d2'"),
    ('name = "extra"\norder = 1\nrequests = [[2, 2]]\n[[worker]]\nstrategy = "v1"\nwitnesses = []\n',
     r"two files have order 1"),
    ("name = \n", r"invalid TOML"),
])
def test_a_bad_file_among_the_worker_configs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str,
                                             pattern: str) -> None:
    (_configs_copy(tmp_path, monkeypatch) / "zz.toml").write_text(text)
    with pytest.raises(ConfigError, match=pattern):
        worker_configs()


def test_the_worker_command_ends_a_bad_config_with_one_line_and_exit_2(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    folder = _configs_copy(tmp_path, monkeypatch)
    text = (folder / "worker-d2.toml").read_text().replace('strategy = "v2"', 'strategy = "v9"')
    (folder / "worker-d2.toml").write_text(text)
    for module in ("asyncspec.checker.joint", "asyncspec.checker.worker_mutants"):  # read on import
        monkeypatch.delitem(sys.modules, module, raising=False)
    o = invoke("worker", "--strategy", "v1", "--mutants")
    assert o.code == 2 and o.stdout == "", (o.code, o.stderr)
    assert o.problem_lines() == [f"asyncspec: error: {folder / 'worker-d2.toml'}: 'worker[1].strategy' "
                                 "must be one of v1, v2, neuron (got \"v9\")"]
