"""The legend of vLLM's names (``checker/legend.py``) under every counter table a user reads.

``asyncspec replay`` of a saved violation trace, the check table of a
deferring config, a fuzz divergence report (a real one: the spec run with a
seeded bug against the reference) and the explorer's page each carry it, and
every short name they print has an entry: a column added without one fails here.
"""
from __future__ import annotations

import doctest
import re
from dataclasses import fields
from pathlib import Path

from rich.console import Console
from rich.table import Table

from asyncspec.checker import legend
from asyncspec.checker.configs import named_configs
from asyncspec.checker.legend import LEGEND_HEAD, VLLM_NAME
from asyncspec.checker.spec_mutants import MUTANTS_BY_NAME, applied
from asyncspec.checker.table import trace_table
from asyncspec.explorer.load import html_for
from asyncspec.explorer.page import legend_html, page_shorts
from asyncspec.spec.state import initial_states
from asyncspec.statemachine_tests.core.harness import RequestObs
from asyncspec.statemachine_tests.core.report import short_name
from asyncspec.statemachine_tests.scheduler.fuzz import replay

from tests.conftest import run_cli
from tests.explorer import fixtures

SELF_EXPLAINING = {"#", "action", "events", "field"}
"""Column heads that are words, not vLLM names abbreviated."""


def legend_of(text: str) -> dict[str, str]:
    """The ``  X = vLLM name`` lines under the legend's head line in ``text``."""
    assert LEGEND_HEAD in text, text[-2000:]
    lines = text[text.index(LEGEND_HEAD):].splitlines()[1:]
    entries = [re.match(r"  (\S+(?: \S+)?) = (.*)", line.rstrip()) for line in lines]
    return {m.group(1): m.group(2) for m in entries if m}


def column_shorts(table: Table) -> set[str]:
    """The short names a table's heads use: a head's first words, and a request head's ``K=`` keys."""
    shorts: set[str] = set()
    for column in table.columns:
        head = str(column.header)
        keys = re.findall(r"(\w+)=", head)
        if keys:  # ``r0 (P=3 M=2 eos=never)``: the request, then its parameters
            shorts |= {*keys, "status"}
        else:
            shorts.add(head.split(" (")[0])
    return shorts - SELF_EXPLAINING


def test_doctests() -> None:
    assert doctest.testmod(legend).failed == 0


def test_the_letters_are_vllms_request_fields() -> None:
    for short in ("N", "C", "H", "F", "X", "P", "M", "D", "L", "O"):
        assert VLLM_NAME[short].startswith("Request."), short
    assert VLLM_NAME["N"] == "Request.num_tokens" and VLLM_NAME["H"] == "Request.num_output_placeholders"
    assert VLLM_NAME["C"] == "Request.num_computed_tokens" and VLLM_NAME["P"] == "Request.num_prompt_tokens"
    assert VLLM_NAME["Q/R"] == "Scheduler.sched_step_seq / Scheduler.processed_step_seq"


def test_every_column_of_a_check_table_is_in_its_legend() -> None:
    for name in ("async-d2", "async-d2-defer"):  # the second adds the deferral columns Q/R and parked
        cfg = named_configs()[name]
        table = trace_table(cfg, [(None, initial_states(cfg)[0], frozenset())], title=name)
        shown = column_shorts(table)
        assert {"N", "C", "H", "F", "X", "P", "M", "eos"} <= shown
        assert cfg.defer_block_free == ("Q/R" in shown)
        assert shown <= set(legend_of(str(table.caption))), shown - set(legend_of(str(table.caption)))


def test_replay_of_a_saved_violation_prints_the_legend(tmp_path: Path) -> None:
    path = fixtures.save_counterexample(tmp_path)
    p = run_cli("replay", str(path))
    assert p.returncode == 1, p.stdout + p.stderr  # the trace's violation reproduces
    printed = legend_of(p.stdout)
    assert printed["N"] == "Request.num_tokens" and printed["X"] == "Request.num_stale_output_tokens"
    assert "violated at step" in p.stdout.split(LEGEND_HEAD)[1]  # the verdict follows the table, as before


def test_every_abbreviated_observation_field_has_an_entry() -> None:
    """A letter ``short_name`` gives a request field is in the legend (else it prints the field)."""
    for f in fields(RequestObs):
        tail = short_name(f"r0.{f.name}").partition(".")[2]
        assert tail == f.name or tail in VLLM_NAME, f.name


def test_a_fuzz_divergence_report_carries_the_legend_of_its_rows(tmp_path: Path) -> None:
    """``replay FILE --target reference`` with the spec bug ``two_placeholders_per_step``: a real
    divergence in ``num_output_placeholders``, shown as ``r0.H`` with its legend line."""
    path = fixtures.save_fuzz_divergence(tmp_path)
    console = Console(record=True, width=160, highlight=False)
    with applied(MUTANTS_BY_NAME["two_placeholders_per_step"].patches):
        assert replay(path, "reference", console=console) == 1
    text = console.export_text()
    assert "r0.num_output_placeholders: spec=2 reference=1" in text
    printed = legend_of(text)
    labels = re.findall(r"^│ (r\d+)\.(\S+)", text, re.M)
    assert ("r0", "H") in labels and printed["H"] == "Request.num_output_placeholders"
    abbreviated = {tail for _, tail in labels if tail not in {f.name for f in fields(RequestObs)}}
    assert abbreviated and abbreviated <= set(printed), abbreviated - set(printed)


def test_the_explorer_page_has_a_legend_of_what_it_shows(tmp_path: Path) -> None:
    for path in (fixtures.save_counterexample(tmp_path), fixtures.save_fuzz_divergence(tmp_path)):
        out = tmp_path / "page.html"
        view = html_for(path, out)
        html = out.read_text()
        assert legend_html(view) in html and f"<summary>{LEGEND_HEAD}</summary>" in html
        rows = dict(re.findall(r'<tr data-short="([^"]+)" data-vllm="([^"]+)">', html))
        assert rows["N"] == "Request.num_tokens" and rows["C"] == "Request.num_computed_tokens"
        engine = {k for step in view["steps"] for k in step["engine"]}
        assert {*view["counters"], "P", "M", "eos", "status", "blocks"} <= set(rows)
        assert set(page_shorts(view)) - set(rows) <= engine  # only an engine row may be a plain word
