"""The exit-code contract as stated (README) and as kept (an internal error, a run that checked
nothing), and the help texts and docs naming every profile, target and config the code knows."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from asyncspec.cli.common import EXIT_INTERNAL, EXIT_OK, EXIT_PARTIAL, EXIT_USAGE, EXIT_VIOLATION
from tests.cli_contract import commands, invoke

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()

def _targets() -> list[str]:
    """The targets ``fuzz --target`` accepts (from the command itself)."""
    option = next(p for p in commands()["fuzz"].params if p.name == "target")
    return [str(c) for c in option.type.choices]  # type: ignore[attr-defined]


def test_the_codes() -> None:
    assert (EXIT_OK, EXIT_VIOLATION, EXIT_USAGE, EXIT_PARTIAL, EXIT_INTERNAL) == (0, 1, 2, 3, 70)


def test_the_readme_states_the_contract_for_every_command() -> None:
    section = README[README.index("## Commands"):README.index("## Tests")]
    for code, word in (("0", "ok"), ("1", "a finding"), ("2", "bad usage"), ("3", "partial"),
                       ("70", "an internal error")):
        assert re.search(rf"\*\*{code}\*\*\s+" + r"\s+".join(word.split()), section), code
    rows = [line for line in section.splitlines() if line.startswith("| `asyncspec ")]
    for name in commands():
        assert any(f"`asyncspec {name}" in row or f", `asyncspec {name}`" in row for row in rows), name
    assert all(row.rstrip().endswith("|") and row.count("|") - row.count("\\|") >= 4 for row in rows)


def test_an_unexpected_exception_is_one_line_and_exit_70(monkeypatch: pytest.MonkeyPatch) -> None:
    from asyncspec.checker import configs as cfgs

    def broken() -> None:
        raise RuntimeError("the disk\nfell off")

    monkeypatch.setattr(cfgs, "named_configs", broken)
    o = invoke("configs")
    assert o.code == 70 and o.stdout == ""
    assert o.stderr.count("\n") == 1 and "Traceback" not in o.stderr
    assert re.match(r"asyncspec: internal error: RuntimeError: the disk fell off \(test_contract.py:\d+\); "
                    r"please report it", o.stderr)
    monkeypatch.setenv("ASYNCSPEC_TRACEBACK", "1")
    with pytest.raises(RuntimeError):
        invoke("configs")


def test_a_fuzz_run_that_completes_no_example_never_exits_0(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import json

    from asyncspec.statemachine_tests.scheduler import fuzz
    from asyncspec.statemachine_tests.scheduler.shards import Merged

    monkeypatch.setattr(fuzz, "run_plan", lambda *a, **k: Merged())  # the budget ran out before example 0
    o = invoke("fuzz", "--target", "reference", "--seconds", "0.001", "--json", "--out-dir", str(tmp_path))
    assert o.code == EXIT_PARTIAL
    assert o.problem_lines()[-1].startswith("fuzz: no example completed within --seconds 0.001; raise --seconds")
    data = json.loads(o.stdout)
    assert data["examples"] == 0 and data["result"] == "partial"


def test_fuzz_help_and_docs_name_every_profile_and_target() -> None:
    from asyncspec.statemachine_tests.scheduler.profiles import PROFILES

    text = " ".join(invoke("fuzz", "--help").stdout.split())
    fuzzing = (ROOT / "docs" / "fuzzing.md").read_text()
    for name in PROFILES:
        assert name in text and f"`{name}`" in fuzzing, name
    listed = re.search(r"--profile \[([^\]]+)\]", text)
    assert listed is not None and listed.group(1).split("|")[:len(PROFILES)] == list(PROFILES)
    targets = _targets()
    assert {"reference", "vllm", "vllm-engine", "torch"} <= set(targets)
    assert f"--target [{'|'.join(targets)}]" in text
    for target in targets:
        assert f"`{target}`" in fuzzing and target in README, target
    stale = ("not connected until then", "Once the CLI wires it", "not done yet", "two cases", "3 of 5 profiles")
    for doc in ("fuzzing.md", "engine.md", "spec.md"):
        body = (ROOT / "docs" / doc).read_text()
        assert [s for s in stale if s in body] == [], doc


def test_every_config_is_listed_and_documented() -> None:
    from asyncspec.checker.configs import named_configs
    from asyncspec.explorer.site import fill_tables

    listed = invoke("configs").stdout
    page = fill_tables((ROOT / "docs" / "configs.md").read_text(), ROOT)
    for name in named_configs():
        assert re.search(rf"^{re.escape(name)} ", listed, re.M), name
        assert name in page, name
    from asyncspec.checker.dp_model import dp_configs

    for name in dp_configs():  # the DP wave model's, with their pinned counts
        assert re.search(rf"^{re.escape(name)} +dp +\d+ states", listed, re.M), name
    assert "--config NAME|SET|FILE A named config, a set (default, slow, finding; dp: the DP wave model)" in " ".join(
        invoke("check", "--help").stdout.split())


def test_demo_help_says_what_it_replays() -> None:
    from asyncspec.checker.demo import CASES

    text = " ".join(invoke("demo", "--help").stdout.split())
    assert "two cases" not in text and "max_tokens guard" in text
    assert sorted({c.config.batch_queue_depth for c in CASES}) == [2, 3] and "depth 2 and 3" in text


def test_a_closed_stdout_is_partial_not_a_finding() -> None:
    """``asyncspec configs | head -0``: the reader is gone before the first write; exit 3, no traceback."""
    import os
    import subprocess
    import sys

    read, write = os.pipe()
    os.close(read)
    try:
        p = subprocess.run([sys.executable, "-m", "asyncspec", "configs"], stdout=write, stderr=subprocess.PIPE,
                           text=True, timeout=120)
    finally:
        os.close(write)
    assert p.returncode == EXIT_PARTIAL and p.stderr == ""


def test_the_config_schema_leaves_no_setting_unchecked() -> None:
    """Every ``SpecConfig`` field has a type in the closed schema (a new field of another kind must be
    added to ``config_schema`` by hand)."""
    import dataclasses

    from asyncspec.checker.configs import config_schema
    from asyncspec.spec.config import SpecConfig

    props = config_schema()["properties"]
    fields = {f.name for f in dataclasses.fields(SpecConfig)} - {"extra"}
    assert fields <= set(props) and [k for k, v in props.items() if not v] == []
