"""The documentation site: a strict mkdocs build whose tables are generated from the code.

The build runs on a temporary copy of the site's sources with one pinned count
changed, so the test sees the page follow the code (and the real tree is not
written).  mkdocs comes with the ``docs`` extra, which ``.ci/run`` installs:
without it the test skips on a developer's machine and fails in CI.
"""
from __future__ import annotations

import doctest
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from asyncspec.explorer import site

ROOT = Path(__file__).resolve().parent.parent
PINNED = "async-d2"


def copy_site_sources(dest: Path, pinned: int) -> Path:
    """mkdocs.yml, docs/, configs/ and the hook into ``dest``; ``PINNED``'s count set to ``pinned``."""
    dest.mkdir(parents=True, exist_ok=True)
    shutil.copy(ROOT / "mkdocs.yml", dest / "mkdocs.yml")
    shutil.copytree(ROOT / "docs", dest / "docs")
    shutil.copytree(ROOT / "configs", dest / "configs", ignore=shutil.ignore_patterns("__pycache__"))
    (dest / "explorer").mkdir()
    shutil.copy(ROOT / "explorer" / "mkdocs_hooks.py", dest / "explorer" / "mkdocs_hooks.py")
    manifest = dest / "configs" / "manifest.json"
    data = json.loads(manifest.read_text())
    data[PINNED]["distinct_states"] = pinned
    manifest.write_text(json.dumps(data))
    return dest


def test_doctest() -> None:
    assert doctest.testmod(site).failed == 0


def test_configs_table_reads_the_manifest_it_is_given(tmp_path: Path) -> None:
    real = json.loads((ROOT / "configs" / "manifest.json").read_text())[PINNED]["distinct_states"]
    copy = copy_site_sources(tmp_path, 987654)
    row = next(r for r in site.configs_table(copy).splitlines() if r.startswith(f"| `{PINNED}` |"))
    assert "| 987654 |" in row and f"| {real} |" not in row
    assert f"| {real} |" in next(r for r in site.configs_table(ROOT).splitlines() if r.startswith(f"| `{PINNED}` |"))


def test_every_marker_is_known_and_an_unknown_one_fails() -> None:
    assert "asyncspec:table" not in site.fill_tables("<!-- asyncspec:table mutants -->", ROOT)
    with pytest.raises(KeyError, match="unknown table 'nope'"):
        site.fill_tables("<!-- asyncspec:table nope -->", ROOT)


def test_strict_build_shows_the_changed_count(tmp_path: Path) -> None:
    try:
        import mkdocs  # noqa: F401
        import material  # noqa: F401
    except ImportError:
        if os.environ.get("CI"):
            pytest.fail("mkdocs is not installed in CI (.ci/run installs the docs extra)")
        pytest.skip("mkdocs not installed (pip install -e '.[docs]')")
    copy = copy_site_sources(tmp_path / "src", 987654)
    (copy / "docs" / "new-page.md").write_text("# A page no one listed yet\n")
    out = tmp_path / "site"
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-f", str(copy / "mkdocs.yml"),
                           "-d", str(out)], capture_output=True, text=True, timeout=300,
                          env=os.environ | {"NO_MKDOCS_2_WARNING": "1"})
    assert done.returncode == 0, done.stderr[-3000:]
    assert "A page no one listed yet" in (out / "index.html").read_text()  # in the nav, under "More"
    configs = (out / "configs" / "index.html").read_text()
    assert "987654" in configs
    pages = list(out.rglob("*.html"))
    assert not [p for p in pages if "asyncspec:table" in p.read_text()]
    assert "__codelineno-0-" in (out / "source" / "properties" / "index.html").read_text()
    traces = sorted((out / "traces").glob("*.html"))
    findings = sum(1 for c in site.configs_of(ROOT).values() if c.expect_violation)
    witnesses = len(site.configs_of(ROOT)[site.SAMPLE_CONFIG].extra["witnesses"])
    assert findings > 0 and witnesses > 0 and len(traces) == findings + witnesses
    assert all('id="trace-data"' in t.read_text() for t in traces)
    assert 'href="../traces/finding-d3-no-stagger.html"' in (out / "trace-explorer" / "index.html").read_text()
