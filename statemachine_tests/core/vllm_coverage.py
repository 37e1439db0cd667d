"""``--vllm-coverage FILE``: line and arc coverage of vLLM's own files while a campaign runs.

``start`` (``cli/fuzz_command.py``, after any re-execution for Model Runner V2 or
``--vllm-path``, so it runs in the process that imports vLLM) writes a coverage.py
configuration into a private folder and starts coverage.py with it: arcs on,
only the files of ``coverage_reasons.MEASURED`` (in the ``vllm`` package this
process will import), and ``concurrency = multiprocessing``, so every ``--jobs``
worker (spawned by ``scheduler/shards.py``) measures itself into the same folder.
``into_summary`` (``core/fuzz_end.finish``, after the workers are gone) stops it,
combines every process's data, writes the report (``coverage_report.py``)
atomically and gives the run's JSON ``vllm_coverage``: its totals.  The report's
``counted`` holds the scenarios of ``coverage_reasons.COUNTED`` with their counts
(``coverage_counts.py``), measured on ``--target vllm-engine``.
"""
from __future__ import annotations

import json
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from asyncspec.checker.atomic import WriteError, note_unsaved, write_atomically
from asyncspec.engine.vllm.vllm_identity import package_dir
from asyncspec.statemachine_tests.core.coverage_reasons import COUNTED, MEASURED
from asyncspec.statemachine_tests.core.coverage_report import FileAnalysis

MISSING = ("--vllm-coverage needs coverage.py, which is not installed: "
           f"{sys.executable} -m pip install 'coverage==7.16.2' (or asyncspec's test extra)")
PLUGIN = "asyncspec.statemachine_tests.core.coverage_counts"
INTO = "ASYNCSPEC_VLLM_COVERAGE_INTO"
"""Set by a measured campaign for a part it runs in a process of its own (``engine_parts.start_mrv2_part``,
the Model Runner V2 part, which runs itself again in MRV2's environment): the measurement's folder, into
which that process writes its data for the campaign to combine."""


def coverage_problem() -> str | None:
    """Why ``--vllm-coverage`` cannot run (one line), or None."""
    try:
        import coverage  # noqa: F401  (present and importable)
    except ImportError:
        return MISSING
    return None


@dataclass
class _Measurement:
    report: Path | None  # None: a part's process, whose data the campaign combines (``start_into``)
    folder: Path
    root: Path  # the folder holding the measured ``vllm`` package
    cov: Any  # coverage.Coverage


_ACTIVE: list[_Measurement] = []


def measured_root() -> Path:
    """The folder holding the ``vllm`` package this process will import (not imported here)."""
    found = package_dir()
    if found is None:
        raise RuntimeError("no vllm package on sys.path")
    return found.parent


def rc_text(root: Path, data_file: Path, counting: bool) -> str:
    """The coverage.py configuration of a measurement."""
    include = "\n    ".join(str(root / f) for f in MEASURED)
    lines = ["[run]", "branch = True", "parallel = True", f"data_file = {data_file}",
             "concurrency = thread, multiprocessing", f"include =\n    {include}",
             "disable_warnings = no-data-collected, module-not-imported, module-not-measured, "
             "couldnt-parse, no-ctracer"]
    if counting:
        lines.append(f"plugins = {PLUGIN}")
    return "\n".join(lines) + "\n"


def start(report: Path, counting: bool) -> None:
    """Start measuring this process and every worker it spawns; ``into_summary`` ends it."""
    import coverage

    folder = Path(tempfile.mkdtemp(prefix="asyncspec-vllm-coverage-"))
    root = measured_root()
    rcfile = folder / "coveragerc"
    rcfile.write_text(rc_text(root, folder / "data", counting), encoding="utf-8")
    cov = coverage.Coverage(config_file=str(rcfile))
    cov.start()
    _ACTIVE.append(_Measurement(report, folder, root, cov))


def start_into(folder: Path, counting: bool) -> None:
    """Measure this process into a campaign's measurement ``folder`` (``INTO``): the data only;
    ``into_summary`` saves it there and writes no report."""
    import coverage

    own = Path(tempfile.mkdtemp(prefix="asyncspec-vllm-coverage-part-"))
    rcfile = own / "coveragerc"
    rcfile.write_text(rc_text(measured_root(), folder / "data", counting), encoding="utf-8")
    cov = coverage.Coverage(config_file=str(rcfile))
    cov.start()
    _ACTIVE.append(_Measurement(None, own, measured_root(), cov))


def child_environment() -> dict[str, str]:
    """What a part's process needs to be measured into this process's measurement (``INTO``);
    empty when nothing is measured."""
    return {INTO: str(_ACTIVE[-1].folder)} if _ACTIVE and _ACTIVE[-1].report is not None else {}


def _analysis(cov: Any, path: Path) -> FileAnalysis:
    found = cov._analyze(str(path))  # coverage.py's Analysis of one file (arcs as it counts them)
    return FileAnalysis(frozenset(found.statements), frozenset(found.executed),
                        frozenset(p for p in found.arc_possibilities_set
                                  if p[0] not in found.no_branch and p[1] not in found.excluded),
                        frozenset(found.arcs_executed_set))


def _call_arcs(data: Any, path: Path, function: str) -> list[frozenset[tuple[int, int]]]:
    """The arcs each counted call of ``function`` ran (one context per call, ``coverage_counts.py``)."""
    from asyncspec.statemachine_tests.core.coverage_counts import SEPARATOR

    calls = []
    for context in sorted(c for c in data.measured_contexts() if c.startswith(function + SEPARATOR)):
        data.set_query_context(context)
        calls.append(frozenset(data.arcs(str(path)) or ()))
    data.set_query_contexts(None)
    return calls


def _counted(data: Any, root: Path, possible: dict[str, frozenset[tuple[int, int]]]) -> dict[str, Any]:
    from asyncspec.statemachine_tests.core.coverage_report import scenario_arcs, scenario_count

    out: dict[str, Any] = {}
    for scenario in COUNTED:
        path = root / scenario.file
        if scenario.file not in possible:
            continue
        source = path.read_text(encoding="utf-8")
        calls = _call_arcs(data, path, scenario.function)
        wanted = scenario_arcs(scenario, source, possible[scenario.file])
        out[scenario.name] = {"file": scenario.file, "function": scenario.function,
                              "arcs": sorted([a, b] for w in wanted for a, b in w),
                              "calls": len(calls), "count": scenario_count(wanted, calls)}
    return out


def build_report(cov: Any, root: Path) -> dict[str, Any]:
    """The report of the data ``cov`` holds (combined), over the files of ``MEASURED`` under ``root``."""
    from asyncspec.statemachine_tests.core.coverage_report import file_report

    files, possible = {}, {}
    for key, scope in MEASURED.items():
        path = root / key
        if path.is_file():
            analysis = _analysis(cov, path)
            possible[key] = analysis.arcs
            files[key] = file_report(key, path.read_text(encoding="utf-8"), analysis, scope)
    return {"files": files, "counted": _counted(cov.get_data(), root, possible)}


def into_summary(summary: dict[str, Any]) -> dict[str, Any]:
    """``summary`` with ``vllm_coverage`` (the totals) when a measurement runs: it is ended, its report written."""
    if not _ACTIVE:
        return summary
    from asyncspec.statemachine_tests.core.coverage_report import totals

    measurement = _ACTIVE.pop()
    cov = measurement.cov
    cov.stop()
    cov.save()
    if measurement.report is None:  # a part's process: its data stays for the campaign to combine
        shutil.rmtree(measurement.folder, ignore_errors=True)
        return summary
    cov.combine(data_paths=[str(measurement.folder)])
    report = build_report(cov, measurement.root)
    shutil.rmtree(measurement.folder, ignore_errors=True)
    try:
        write_atomically(measurement.report, json.dumps(report, indent=1, sort_keys=True) + "\n")
    except WriteError as exc:
        note_unsaved(exc)
    figures = totals(report)
    print(f"vllm coverage: lines {figures['lines'][0]}/{figures['lines'][1]}, arcs {figures['arcs'][0]}/"
          f"{figures['arcs'][1]} of {len(report['files'])} vLLM files -> {measurement.report}", file=sys.stderr)
    return {**summary, "vllm_coverage": figures}
