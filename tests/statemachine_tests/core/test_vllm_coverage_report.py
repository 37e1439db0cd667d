"""The ``--vllm-coverage`` report's format (``core/coverage_report.py``), on synthetic sources: no vLLM run."""
from __future__ import annotations

import pytest

from asyncspec.statemachine_tests.core import coverage_reasons, coverage_report
from asyncspec.statemachine_tests.core.coverage_reasons import MEASURED, Scenario
from asyncspec.statemachine_tests.core.coverage_report import (
    FileAnalysis, file_report, function_lines, in_scope, scenario_arcs, scenario_count, totals,
)

SOURCE = '''\
class Scheduler:
    def schedule(self, n):
        if n:
            return 1
        return 2

    def outer(self):
        def inner():
            return 3
        return inner()


def helper():
    pass
'''


def test_every_function_gets_its_own_body_lines_and_the_def_line_stays_with_the_enclosing_one() -> None:
    lines = function_lines(SOURCE)
    assert lines == {"Scheduler.schedule": {3, 4, 5}, "Scheduler.outer": {8, 10}, "Scheduler.outer.inner": {9},
                     "helper": {14}}


def test_scope_is_every_function_a_listed_name_or_a_class_prefix() -> None:
    assert in_scope("Scheduler.schedule", ())
    assert in_scope("EngineCore.step", ("EngineCore.",)) and not in_scope("EngineCoreProc.run", ("EngineCore.",))
    assert in_scope("GPUModelRunner._update_states", ("GPUModelRunner._update_states",))
    assert not in_scope("GPUModelRunner._update_states_after_model_execute", ("GPUModelRunner._update_states",))


def _analysis() -> FileAnalysis:
    # coverage.py's numbering: an entry is (-def line, first line), an exit (last line, -def line)
    arcs = {(-2, 3), (3, 4), (3, 5), (4, -2), (5, -2), (-8, 9), (9, -8), (-7, 8), (8, 10), (10, -7), (-13, 14),
            (14, -13), (1, 2), (2, 7), (7, 13)}
    ran = {(-2, 3), (3, 4), (4, -2), (1, 2), (2, 7), (7, 13)}
    return FileAnalysis(frozenset({1, 2, 3, 4, 5, 7, 8, 9, 10, 13, 14}), frozenset({1, 2, 3, 4, 7, 13}),
                        frozenset(arcs), frozenset(ran))


def test_a_file_report_per_function_with_its_unreached_arcs_and_their_reasons(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(coverage_report.WHY_UNREACHABLE, ("f.py", "Scheduler.schedule", "3->5"), "needs a GPU: X")
    report = file_report("f.py", SOURCE, _analysis(), ())["functions"]
    assert list(report) == sorted(report)
    assert report["Scheduler.schedule"] == {"lines": [2, 3], "arcs": [3, 5], "unreached_arcs": [[3, 5], [5, -2]],
                                            "why_unreachable": {"3->5": "needs a GPU: X"}}
    assert report["Scheduler.outer.inner"]["arcs"] == [0, 2]
    assert report["helper"] == {"lines": [0, 1], "arcs": [0, 2], "unreached_arcs": [[-13, 14], [14, -13]],
                                "why_unreachable": {}}
    # class and module bodies run at import: they belong to no function and are not counted
    assert totals({"files": {"f.py": {"functions": report}}}) == {"lines": [2, 7], "arcs": [3, 12]}


def test_the_measured_files_are_issue_27s_and_every_reason_names_a_measured_file() -> None:
    assert "vllm/v1/core/sched/scheduler.py" in MEASURED and MEASURED["vllm/v1/engine/core.py"] == ("EngineCore.",)
    assert len(coverage_reasons.SCHEDULER_KV_FILES) == 7
    for (file, function, arc), reason in coverage_reasons.WHY_UNREACHABLE.items():
        assert file in MEASURED and in_scope(function, MEASURED[file]) and "->" in arc and reason


def test_a_scenario_is_counted_per_call_when_every_arc_of_it_ran_in_that_call() -> None:
    scenario = Scenario("s", "f.py", "Scheduler.schedule", (("if n:", "return 1"), ("if n:", "return 2")))
    wanted = scenario_arcs(scenario, SOURCE, _analysis().arcs)
    assert wanted == [{(3, 4)}, {(3, 5)}]
    calls = [frozenset({(3, 4)}), frozenset({(3, 4), (3, 5)}), frozenset()]
    assert scenario_count(wanted, calls) == 1
    assert scenario_count(wanted[:1], calls) == 2
    gone = Scenario("s", "f.py", "Scheduler.schedule", (("if n:", "return 7"),))
    assert scenario_count(scenario_arcs(gone, SOURCE, _analysis().arcs), calls) == 0  # a line that moved: 0, never all
