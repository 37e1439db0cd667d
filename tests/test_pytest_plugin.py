"""``pytest --asyncspec`` (issue 15, item 7): asyncspec's checks as pytest items in any
directory, with pytest's own JUnit XML; nothing at all without the flag."""
from __future__ import annotations

import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

MUTANT_CONFTEST = '''
import contextlib
from asyncspec.checker.spec_mutants import MUTANTS_BY_NAME, applied

_stack = contextlib.ExitStack()


def pytest_configure(config):
    _stack.enter_context(applied(MUTANTS_BY_NAME["stale_delivery_decrements_placeholders"].patches))
'''


def pytest_in(folder: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], ET.Element | None]:
    """``python -m pytest ARGS --junitxml=out.xml`` in ``folder``; the result and the XML root."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    p = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args,
                        "--junitxml=out.xml"], cwd=folder, env=env, capture_output=True, text=True, timeout=600)
    xml = folder / "out.xml"
    return p, ET.parse(xml).getroot() if xml.exists() else None


def _cases(root: ET.Element) -> list[ET.Element]:
    return list(root.iter("testcase"))


def test_one_selected_check_in_an_empty_folder_gives_valid_junit_xml(tmp_path: Path) -> None:
    p, root = pytest_in(tmp_path, "--asyncspec", "-k", "async-d2-drop")
    assert p.returncode == 0, p.stdout + p.stderr
    assert root is not None
    suite = root if root.tag == "testsuite" else root.find("testsuite")
    assert suite is not None and suite.get("tests") == "1" and suite.get("failures") == "0"
    (case,) = _cases(root)
    assert case.get("classname") == "asyncspec" and case.get("name") == "check[async-d2-drop]"


def test_without_the_flag_the_plugin_adds_nothing(tmp_path: Path) -> None:
    p, root = pytest_in(tmp_path)
    assert p.returncode == 5, p.stdout  # pytest's "no tests collected"
    assert root is not None and _cases(root) == []


def test_a_failing_check_reports_the_counter_table(tmp_path: Path) -> None:
    (tmp_path / "conftest.py").write_text(MUTANT_CONFTEST)  # a spec bug, as an engine change might add
    p, root = pytest_in(tmp_path, "--asyncspec", "--asyncspec-configs", "async-d2", "-k", "check",
                        "--asyncspec-trace-dir", str(tmp_path / "traces"))
    assert p.returncode == 1, p.stdout + p.stderr
    assert root is not None
    (case,) = _cases(root)
    failure = case.find("failure")
    assert failure is not None and case.get("name") == "check[async-d2]"
    report = (failure.text or "") + (failure.get("message") or "")
    assert "VIOLATION: placeholders_nonnegative" in report
    assert "action" in report and "│" in report  # the counter table, one row per step
    assert "replay with: asyncspec replay" in report and "Traceback" not in report
    assert list((tmp_path / "traces").glob("async-d2.placeholders_nonnegative.trace.json"))


@pytest.mark.slow  # every default config, every proof variant and 100 fuzz examples: about 40 s
def test_the_whole_plugin_run_passes_with_junit_xml(tmp_path: Path) -> None:
    p, root = pytest_in(tmp_path, "--asyncspec")
    assert p.returncode == 0, p.stdout[-3000:]
    assert root is not None
    names = {c.get("name") for c in _cases(root)}
    assert "fuzz[reference]" in names and "prove[async]" in names and "check[async-d2]" in names
    assert all(c.find("failure") is None and c.find("error") is None for c in _cases(root))
