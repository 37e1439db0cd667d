"""The ``--vllm-coverage`` report: coverage.py's analysis of each measured vLLM file, per function.

coverage.py gives a file's statements and possible arcs (``Analysis``), and which
ran; Python's ``ast`` gives each function's body lines (``function_lines``: a
nested function's lines are its own, not its parent's).  A line belongs to the
innermost function whose body holds it; an arc to the function holding its
``from`` line, or its ``to`` line when it enters a function (coverage.py writes
an entry as ``(-def line, first line)`` and an exit as ``(last line, -def line)``).
Code outside any function (imports, class bodies) runs at import and is not
counted.  Everything is sorted, so the same run writes the same bytes.
"""
from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from asyncspec.statemachine_tests.core.coverage_reasons import WHY_UNREACHABLE, Scenario

Arc = tuple[int, int]


@dataclass(frozen=True)
class FileAnalysis:
    """What coverage.py measured of one file: the figures of ``coverage.results.Analysis`` the report reads."""

    statements: frozenset[int]
    executed: frozenset[int]
    arcs: frozenset[Arc]  # the possible arcs
    arcs_executed: frozenset[Arc]


def function_lines(source: str) -> dict[str, set[int]]:
    """Each function's qualified name (``Class.method``, ``outer.inner``) -> the lines of its body that are
    its own (nested functions and classes taken out)."""
    found: dict[str, set[int]] = {}

    def visit(node: ast.AST, prefix: str, owner: set[int] | None) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                name = prefix + child.name
                span = set(range(child.body[0].lineno, (child.body[-1].end_lineno or child.lineno) + 1))
                if owner is not None:  # the def line stays the enclosing function's: it runs there
                    owner -= span
                if isinstance(child, ast.ClassDef):
                    visit(child, name + ".", None)
                else:
                    found[name] = span
                    visit(child, name + ".", span)
            else:
                visit(child, prefix, owner)

    visit(ast.parse(source), "", None)
    return found


def in_scope(name: str, scope: tuple[str, ...]) -> bool:
    """Whether function ``name`` counts: every function (empty scope), a name listed, or under a class prefix."""
    return not scope or any(name == s or (s.endswith(".") and name.startswith(s)) for s in scope)


def _owner_of_lines(functions: Mapping[str, set[int]]) -> dict[int, str]:
    return {line: name for name, lines in functions.items() for line in lines}


def arc_owner(arc: Arc, owners: Mapping[int, str]) -> str | None:
    """The function an arc belongs to (its ``from`` line's, else its ``to`` line's), None outside any."""
    a, b = arc
    return owners.get(a) if a > 0 else owners.get(b)


def _pair(hit: Iterable[object], total: Iterable[object]) -> list[int]:
    return [len(set(hit)), len(set(total))]


def file_report(path_key: str, source: str, analysis: FileAnalysis, scope: tuple[str, ...]) -> dict[str, Any]:
    """``{"functions": {name: {lines, arcs, unreached_arcs, why_unreachable}}}`` for one file."""
    functions = {n: ls for n, ls in function_lines(source).items() if in_scope(n, scope)}
    owners = _owner_of_lines(functions)
    arcs_of: dict[str, set[Arc]] = {n: set() for n in functions}
    for arc in analysis.arcs:
        owner = arc_owner(arc, owners)
        if owner is not None:
            arcs_of[owner].add(arc)
    out: dict[str, Any] = {}
    for name in sorted(functions):
        statements = analysis.statements & functions[name]
        if not statements:
            continue
        unreached = sorted(arcs_of[name] - analysis.arcs_executed)
        reasons = {f"{a}->{b}": WHY_UNREACHABLE[(path_key, name, f"{a}->{b}")] for a, b in unreached
                   if (path_key, name, f"{a}->{b}") in WHY_UNREACHABLE}
        out[name] = {"lines": _pair(statements & analysis.executed, statements),
                     "arcs": _pair(arcs_of[name] & analysis.arcs_executed, arcs_of[name]),
                     "unreached_arcs": [[a, b] for a, b in unreached], "why_unreachable": reasons}
    return {"functions": out}


def totals(report: Mapping[str, Any]) -> dict[str, list[int]]:
    """``{"lines": [hit, total], "arcs": [hit, total]}`` over every function of every file of ``report``."""
    sums = {"lines": [0, 0], "arcs": [0, 0]}
    for entry in report["files"].values():
        for function in entry["functions"].values():
            for key in sums:
                sums[key] = [sums[key][0] + function[key][0], sums[key][1] + function[key][1]]
    return sums


def file_totals(entry: Mapping[str, Any]) -> dict[str, list[int]]:
    """One file's ``{"lines": [hit, total], "arcs": [hit, total]}``."""
    return totals({"files": {"f": entry}})


def scenario_arcs(scenario: Scenario, source: str, arcs: Iterable[Arc]) -> list[set[Arc]]:
    """For each (from text, to text) of ``scenario``, the possible arcs of its function whose lines read so."""
    text = [line.strip() for line in source.splitlines()]
    lines = function_lines(source).get(scenario.function, set())

    def reads(line: int, wanted: str) -> bool:
        return 0 < line <= len(text) and text[line - 1] == wanted

    mine = [arc for arc in arcs if arc[0] in lines]
    return [{arc for arc in mine if reads(arc[0], a) and reads(arc[1], b)} for a, b in scenario.arcs]


def scenario_count(wanted: list[set[Arc]], calls: Iterable[frozenset[Arc]]) -> int:
    """How many calls ran, for every wanted arc, one of its arcs (0 when a wanted arc matches no line)."""
    if not wanted or any(not w for w in wanted):
        return 0
    return sum(1 for ran in calls if all(w & ran for w in wanted))
