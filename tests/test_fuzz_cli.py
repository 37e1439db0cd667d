"""``asyncspec fuzz`` from the command line: a bad budget, or an option its target does not take
(the table ``cli/fuzz_options.RULES``, every entry tried), is one line and exit 2."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from asyncspec.cli.fuzz_command import RUNS
from asyncspec.cli.fuzz_options import (CONFLICTS, TARGET_OPTIONS, TARGETS, Conflict, TargetOption,
                                        target_option_problem)
from asyncspec.cli.main import main
from tests.cli_contract import commands


@pytest.mark.parametrize("args, word", [
    (["--examples", "0"], "--examples"), (["--seconds", "-1"], "--seconds"), (["--seconds", "nan"], "--seconds"),
    (["--jobs", "0"], "--jobs"), (["--examples", "5", "--ray", "127.0.0.1:1"], "Ray"),
    (["--examples", "5", "--ray", "nonsense"], "--ray"), (["--jobs", "2"], "--jobs")])
def test_bad_budget_is_one_line_exit_2(args: list[str], word: str) -> None:
    target = "vllm-engine" if args == ["--jobs", "2"] else "reference"
    result = CliRunner().invoke(main, ["fuzz", "--target", target, *args])
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and word in lines[0], result.output


@pytest.mark.parametrize("target", ["reference", "vllm-engine"])
def test_an_out_dir_that_cannot_hold_the_replay_file_is_refused_before_the_campaign(
        target: str, tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    p = subprocess.run([sys.executable, "-m", "asyncspec", "fuzz", "--target", target, "--examples", "20",
                        "--out-dir", str(blocker / "traces")], capture_output=True, text=True, timeout=120)
    assert p.returncode == 2 and "Traceback" not in p.stderr
    assert p.stderr.strip().splitlines()[-1].startswith("fuzz: --out-dir") and "not a folder" in p.stderr


@pytest.mark.parametrize("target", ["reference", pytest.param("vllm-engine", marks=pytest.mark.slow)])
def test_seconds_is_an_outer_limit_of_fixed_work_exit_3_with_a_partial_report(target: str, tmp_path: Path) -> None:
    p = subprocess.run([sys.executable, "-m", "asyncspec", "fuzz", "--target", target, "--examples", "100000",
                        "--seconds", "1", "--json", "--out-dir", str(tmp_path)],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 3, p.stderr
    summary = json.loads(p.stdout)
    assert summary["result"] == "partial" and summary["examples"] < 100000
    assert p.stderr.strip().splitlines()[-1].startswith("fuzz: "), p.stderr


# ------------------------------------------------------- which options each target takes (cli/fuzz_options.py)


def _value_taken(option: TargetOption, target: str, value: str | None) -> str:
    """``value``, or (None) a value of ``option`` that ``target`` takes."""
    if value is not None:
        return value
    values = option.takes[target]
    return values[0] if values is not None else option.example


def _refused_pairs() -> list[tuple[str, TargetOption]]:
    return [(target, option) for option in TARGET_OPTIONS.values() for target in TARGETS
            if not option.taken(target, option.example)]


def _conflict_cases() -> list[tuple[str, Conflict, list[str]]]:
    """Each conflict on each target that takes both options (with the values that conflict) one by one."""
    cases = []
    for c in CONFLICTS:
        for target in c.targets or TARGETS:
            pairs = [(TARGET_OPTIONS[flag], value) for flag, value in (c.first, c.second)]
            if not all(target in option.takes for option, _ in pairs):
                continue
            given = [(option, _value_taken(option, target, value)) for option, value in pairs]
            if all(option.taken(target, value) for option, value in given):
                cases.append((target, c, [a for option, value in given for a in (option.flag, value)]))
    return cases


def _one_error_line(args: list[str]) -> tuple[int, list[str]]:
    result = CliRunner().invoke(main, ["fuzz", *args, "--examples", "1"])
    lines = [line for line in result.output.splitlines() if line.strip()]
    return result.exit_code, lines


@pytest.mark.parametrize("target, option", _refused_pairs(),
                         ids=[f"{t} {o.flag}" for t, o in _refused_pairs()])
def test_every_option_a_target_does_not_take_is_refused_in_one_line(target: str, option: TargetOption) -> None:
    code, lines = _one_error_line(["--target", target, option.flag, option.example])
    expected = option.refusals.get(target, option.refusal).format(target=target, value=option.example)
    assert code == 2 and lines == [f"asyncspec: error: {expected}"], lines


@pytest.mark.parametrize("target, conflict, args", _conflict_cases(),
                         ids=[f"{t} {' '.join(a)}" for t, _, a in _conflict_cases()])
def test_every_conflict_is_refused_in_one_line(target: str, conflict: Conflict, args: list[str]) -> None:
    code, lines = _one_error_line(["--target", target, *args])
    assert code == 2 and lines == [f"asyncspec: error: {conflict.refusal}"], lines


def test_every_rule_is_tried_and_every_taken_pair_passes() -> None:
    unset: dict[str, object] = {o.param: o.unset for o in TARGET_OPTIONS.values()}
    tried = {o.flag for _, o in _refused_pairs()} | {c.first[0] for _, c, _ in _conflict_cases()}
    assert tried == set(TARGET_OPTIONS) and {c for _, c, _ in _conflict_cases()} == set(CONFLICTS)
    assert target_option_problem("reference", unset) is None
    for option in TARGET_OPTIONS.values():
        for target, values in option.takes.items():
            value = values[0] if values is not None else option.example
            given = (value,) if isinstance(option.unset, tuple) else value
            assert target_option_problem(target, unset | {option.param: given}) is None, (target, option.flag)


def test_the_table_names_real_targets_and_options() -> None:
    command = commands()["fuzz"]
    params = {p.name: p for p in command.params}
    target_choices = [str(c) for c in params["target"].type.choices]  # type: ignore[attr-defined]
    assert target_choices == list(TARGETS) and set(RUNS) == set(TARGETS)  # each target has its run
    for option in TARGET_OPTIONS.values():
        assert set(option.takes) <= set(TARGETS), option.flag
        param = params[option.param]
        assert option.flag in param.opts
        assert param.default == option.unset or (param.multiple and option.unset == ()), option.flag
        param.type.convert(option.example, param, click.Context(command))  # a valid value: no BadParameter
