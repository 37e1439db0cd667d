"""The trace explorer without a browser: the views of every trace kind, the page, the CLI."""
from __future__ import annotations

import doctest
import json
import re
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from asyncspec.checker.spec_mutants import MUTANTS_BY_NAME, applied
from asyncspec.checker.trace import SAVE_HOOKS, Trace
from asyncspec.checker.configs import named_configs
from asyncspec.explorer import beside, checker_view, page, samples, spec_info
from asyncspec.explorer.load import ExplorerError, html_for, view_of
from asyncspec.cli.main import main

from tests.explorer import fixtures


def embedded(html: str) -> dict[str, Any]:
    """The view a page carries in its ``#trace-data`` script."""
    found = re.search(r'<script type="application/json" id="trace-data">(.*?)</script>', html, re.S)
    assert found is not None
    data: dict[str, Any] = json.loads(found.group(1))
    return data


def test_doctests() -> None:
    for module in (spec_info, page, samples):
        assert doctest.testmod(module).failed == 0


def test_counterexample_view_has_lanes_counters_and_the_violation() -> None:
    trace = fixtures.counterexample()
    view = checker_view.checker_view(trace, "t")
    assert view["kind"] == "checker"
    assert [r["name"] for r in view["requests"]] == ["r0", "r1"]
    assert len(view["steps"]) == len(trace.actions) + 1
    bad = view["violated"]
    assert bad["name"] == "no_wasted_step_on_max_tokens" and "wasted" in bad["message"]
    assert bad["step"] == len(trace.actions)  # the wasted step shows at the last row
    assert any(c["target"].endswith("Scheduler.schedule") and 27922 in c["prs"] for c in bad["cites"])
    last = view["steps"][-1]
    assert last["action"] == "update_from_output" and last["spec"]["source"].startswith("spec/output.py:")
    assert last["lanes"]["r0"]["status"] == "LENGTH" and "batch queue" in last["engine"]
    assert "processed" in last["detail"]


def test_lasso_closes_the_livelock_cycle() -> None:
    view = fixtures.lasso_view()
    assert view["kind"] == "lasso" and view["violated"]["name"] == "no_livelock"
    k = view["loop_start"]
    assert k is not None and 0 <= k < len(view["steps"]) - 1
    assert view["steps"][k]["lanes"] == view["steps"][-1]["lanes"]
    assert view["steps"][k]["engine"] == view["steps"][-1]["engine"]
    assert f"back to step {k}" in view["violated"]["message"]


def test_a_named_loop_that_does_not_close_is_refused() -> None:
    m = MUTANTS_BY_NAME[fixtures.LIVELOCK_MUTANT]
    trace = fixtures.counterexample()
    with applied(m.patches), pytest.raises(ExplorerError, match="loop_start 1"):
        view_of(trace.to_json() | {"loop_start": 1}, "x", with_graph=False)


def test_fuzz_divergence_spec_and_target_side_by_side(tmp_path: Path) -> None:
    view = html_view(fixtures.save_fuzz_divergence(tmp_path), tmp_path)
    assert view["kind"] == "fuzz" and view["side"] == {"target": "vllm"}
    last, first = view["steps"][-1], view["steps"][0]
    assert view["violated"]["step"] == len(view["steps"]) - 1
    differs = [r for r in last["side"] if r["differs"]]
    assert [r["field"] for r in differs] == ["r0.num_computed_tokens"]
    assert int(differs[0]["spec"]) == int(differs[0]["target"]) + 1
    assert not any(r["differs"] for r in first["side"])
    assert last["lanes"]["r0"]["C"] == int(differs[0]["spec"])  # the lanes are the spec's side
    assert first["spec"]["function"] == "add_request"


def test_engine_target_extras_are_shown_where_they_belong(tmp_path: Path) -> None:
    view = html_view(fixtures.save_engine_divergence(tmp_path), tmp_path)
    assert view["target"] == "vllm-engine"
    assert view["steps"][1]["detail"]["worker"] == ["r0@0:5,6,7,8,9"]
    prompt = dict(view["steps"][1]["detail"])["fed to the worker"][0]["entry"]
    assert "[5, 6, 7, 8, 9]" in prompt  # the spec side uses the case's real token ids
    assert "worker" in view["steps"][7]["detail"] and "worker" not in view["steps"][0]["detail"]
    assert set(view["extra"]) == {"case", "engine_events"}


def test_a_file_the_spec_cannot_replay_is_still_shown(tmp_path: Path) -> None:
    data = json.loads(fixtures.save_fuzz_divergence(tmp_path).read_text())
    data["events"] = ["step", "warp r0"]
    data["divergence"] = {"event": 2, "differences": [{"field": "r0.status", "spec": "RUNNING", "vllm": "WAITING"}]}
    view = view_of(data, "odd")
    assert [s["action"] for s in view["steps"]] == ["step", "warp r0"]
    assert view["steps"][1]["side"][0]["target"] == "WAITING"


def html_view(path: Path, folder: Path) -> dict[str, Any]:
    out = folder / "page.html"
    html_for(path, out)
    return embedded(out.read_text())


def test_page_is_self_contained(tmp_path: Path) -> None:
    out = tmp_path / "p.html"
    html_for(fixtures.save_counterexample(tmp_path), out)
    html = out.read_text()
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", html)
    assert "default-src 'none'" in html and "<svg" in html  # the state graph, drawn by graphviz


def test_replay_html_cli(tmp_path: Path) -> None:
    runner = CliRunner()
    trace = fixtures.save_counterexample(tmp_path)
    out = tmp_path / "x.html"
    r = runner.invoke(main, ["replay", str(trace), "--html", str(out)])
    assert r.exit_code == 0 and out.exists(), r.output
    assert embedded(out.read_text())["violated"]["name"] == "no_wasted_step_on_max_tokens"
    fuzz = fixtures.save_fuzz_divergence(tmp_path)
    r = runner.invoke(main, ["replay", str(fuzz), "--html", str(out)])
    assert r.exit_code == 0 and embedded(out.read_text())["kind"] == "fuzz"


@pytest.mark.parametrize("content, message", [
    ("[1, 2]", "expected a JSON object"),
    ("{", "not valid JSON"),
    ('{"x": 1}', "neither a checker trace nor a fuzz replay file"),
    ('{"asyncspec_trace": 1, "config": {}}', "corrupt trace"),
])
def test_bad_files_exit_2_with_one_line(tmp_path: Path, content: str, message: str) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(content)
    r = CliRunner().invoke(main, ["replay", str(bad), "--html", str(tmp_path / "o.html")])
    assert r.exit_code == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0] and "Traceback" not in r.output
    assert not (tmp_path / "o.html").exists()


def test_check_writes_the_page_beside_each_trace(tmp_path: Path) -> None:
    r = CliRunner().invoke(main, ["check", "-c", "finding-frontier-strict", "--trace-dir", str(tmp_path)])
    assert r.exit_code == 0, r.output
    traces = sorted(tmp_path.glob("*.trace.json"))
    assert traces and all(t.with_suffix(".html").exists() for t in traces)


def test_fuzz_replay_files_get_a_page_too(tmp_path: Path) -> None:
    beside.install_html_hooks()
    beside.install_html_hooks()
    assert SAVE_HOOKS.count(beside.html_beside) == 1
    path = fixtures.save_fuzz_divergence(tmp_path)
    assert embedded(path.with_suffix(".html").read_text())["target"] == "vllm"


def test_a_page_that_cannot_be_made_costs_a_warning_not_the_trace(tmp_path: Path, capsys: Any) -> None:
    path = tmp_path / "t.trace.json"
    path.write_text(json.dumps(Trace.to_json(fixtures.counterexample()) | {"loop_start": "x"}))
    beside.html_beside(path)
    assert "warning: no explorer page" in capsys.readouterr().err and path.exists()


def test_a_witness_sample_ends_on_the_step_that_exercises_it() -> None:
    cfg = named_configs()["async-d2"]
    view = samples.witness_view(cfg, "stale_delivery")
    assert view is not None and view["violated"]["kind"] == "witness"
    assert "stale_delivery" in view["steps"][-1]["events"]
    assert not any("stale_delivery" in s["events"] for s in view["steps"][:-1])  # the shortest such run
    assert samples.witness_view(cfg, "no_such_event") is None
