"""The explorer in a real headless browser, used as a person would: open, look, click.

Playwright drives the system's Chromium (Debian's ``chromium`` package, which
``.ci/run`` installs; Playwright never downloads a browser here).  Without
them the tests skip on a developer's machine and fail in CI (``CI`` set):
they never skip there.  Each view is saved as a screenshot for review under
``build/screenshots/`` (or ``$ASYNCSPEC_SCREENSHOTS``).
"""
from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from asyncspec.explorer.load import html_for
from asyncspec.explorer.page import write_page

from tests.explorer import fixtures

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = os.environ.get("ASYNCSPEC_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
SHOTS = Path(os.environ.get("ASYNCSPEC_SCREENSHOTS", ROOT / "build" / "screenshots"))


def _unavailable(reason: str) -> None:
    if os.environ.get("CI"):
        pytest.fail(f"browser tests cannot run in CI: {reason} (.ci/run installs both)")
    pytest.skip(reason)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _unavailable("playwright is not installed (pip install -e '.[docs]')")
    if not Path(CHROMIUM).exists():
        _unavailable(f"no Chromium at {CHROMIUM} (apt-get install chromium)")
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield b
        b.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    pg = browser.new_page(viewport={"width": 1400, "height": 900})
    errors: list[str] = []
    pg.on("pageerror", lambda e: errors.append(str(e)))
    pg.on("request", lambda r: errors.append(f"network request: {r.url}") if not r.url.startswith("file:") else None)
    yield pg
    pg.close()
    assert errors == []  # no script error, nothing fetched from anywhere


def open_page(page: Any, html: Path) -> None:
    page.goto(html.as_uri())
    page.wait_for_selector("body[data-ready]")


def shot(page: Any, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True)


def cell_text(page: Any, request: str, column: str) -> str:
    """The counter table's cell for ``request`` in ``column`` (after a click)."""
    headers = page.locator("#counters tr").first.locator("th").all_inner_texts()
    row = page.locator(f'#counters tr[data-row="{request}"]')
    return str(row.locator("th, td").nth(headers.index(column)).inner_text())


def test_counterexample_lanes_click_and_violation(page: Any, tmp_path: Path) -> None:
    trace = fixtures.save_counterexample(tmp_path)
    html = tmp_path / "cex.html"
    view = html_for(trace, html)
    open_page(page, html)
    steps = len(view["steps"])
    for r in ("r0", "r1"):  # one lane element per request, a cell per step, built by the script
        assert page.locator(f'[data-request="{r}"]').count() == 1
        assert page.locator(f'[data-request="{r}"] .cell').count() == steps
    assert page.locator('[data-engine="batch queue"] .cell').count() == steps
    banner = page.locator("#violation")
    assert banner.get_attribute("data-property") == "no_wasted_step_on_max_tokens"
    assert "Scheduler.schedule" in banner.inner_text() and "#27922" in banner.inner_text()
    assert page.locator(f'[data-request="r0"] .cell.step-{steps - 1}.violated').count() == 1
    assert page.locator("#detail").get_attribute("data-step") == str(steps - 1)  # opens at the violation
    shot(page, "checker-counterexample")

    page.locator('.step-head[data-step="1"]').click()
    assert page.locator("#detail").get_attribute("data-step") == "1"
    assert "step #1: schedule" in page.locator("#detail h2").inner_text()
    first = view["steps"][1]["lanes"]
    assert cell_text(page, "r0", "C") == str(first["r0"]["C"])
    assert cell_text(page, "r0", "status") == "RUNNING"
    heads = page.locator("#counters tr").first.locator("th")  # each head titled with vLLM's name
    assert heads.nth(3).inner_text() == "C" and heads.nth(3).get_attribute("title") == "Request.num_computed_tokens"
    shown = page.locator("#legend")
    assert shown.is_visible() and "Request.num_output_placeholders" in shown.inner_text()
    spec = page.locator("#spec-action").inner_text()
    assert "spec/scheduler.py:" in spec and "vllm.v1.core.sched.scheduler.Scheduler.schedule" in spec
    assert page.locator("#detail-scheduled tr").count() >= 2
    assert page.locator("#counters td.changed").count() > 0
    page.keyboard.press("ArrowRight")
    assert page.locator("#detail").get_attribute("data-step") == "2"
    shot(page, "checker-step-clicked")
    assert page.locator("#graph svg").count() == 1


def test_lasso_marks_the_loop(page: Any, tmp_path: Path) -> None:
    view = fixtures.lasso_view()
    html = tmp_path / "lasso.html"
    write_page(view, html)
    open_page(page, html)
    k, last = view["loop_start"], len(view["steps"]) - 1
    assert f"returns to the state of step {k}" in page.locator("#lasso").inner_text()
    assert page.locator('[data-request="r0"] .cell.loop').count() == last - k + 1
    assert page.locator("#violation").get_attribute("data-property") == "no_livelock"
    page.locator(f'.step-head[data-step="{k}"]').click()
    at_k = page.locator("#counters").inner_text()
    page.locator(f'.step-head[data-step="{last}"]').click()
    assert page.locator("#counters").inner_text().replace("\n", " ").split() == at_k.replace("\n", " ").split()
    shot(page, "lasso-livelock")


def test_fuzz_divergence_side_by_side(page: Any, tmp_path: Path) -> None:
    html = tmp_path / "fuzz.html"
    view = html_for(fixtures.save_engine_divergence(tmp_path), html)
    open_page(page, html)
    last = len(view["steps"]) - 1
    assert page.locator("[data-request]").count() == 2
    assert page.locator("#violation").get_attribute("data-property") == "spec = vllm-engine"
    differs = page.locator("#side tr.differs")
    assert differs.count() == 1
    cells = differs.first.locator("td").all_inner_texts()
    assert cells[0] == "r0.num_computed_tokens" and int(cells[1]) == int(cells[2]) + 1
    assert "they differ" in page.locator("#detail").inner_text()
    assert page.locator('[data-request="r0"] .cell.differs').count() == 1  # the lane whose counter differs
    assert page.locator('[data-request="r1"] .cell.differs').count() == 0
    assert page.locator("#detail-worker").count() == 1  # the engine target's worker column, at its event
    shot(page, "fuzz-divergence")
    page.locator('.step-head[data-step="0"]').click()
    assert page.locator("#side tr.differs").count() == 0 and "equal" in page.locator("#detail").inner_text()
    assert "add_request" in page.locator("#spec-action").inner_text()
    assert page.locator("#extra").inner_text().count("engine_events") == 1
    assert last == 7


def test_witness_sample_run(page: Any, tmp_path: Path) -> None:
    from asyncspec.checker.configs import named_configs
    from asyncspec.explorer.samples import witness_view

    view = witness_view(named_configs()["async-d2"], "preemption_in_flight_deliver")
    assert view is not None
    html = tmp_path / "sample.html"
    write_page(view, html)
    open_page(page, html)
    banner = page.locator("#violation.witness")
    assert banner.count() == 1 and "reached: preemption_in_flight_deliver" in banner.inner_text()
    assert page.locator('[data-request="r1"] .cell.st-PREEMPTED').count() == 1  # preempted at the last step
    assert "preemption_in_flight_deliver" in page.locator("#detail .events").inner_text()
    shot(page, "witness-sample")
