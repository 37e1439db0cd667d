"""One self-contained HTML page for a trace view: data, script and style inline.

>>> html = render_page({"title": "t</script>", "steps": []})
>>> html.count("</script>") == 2 and "t<\\\\/script>" in html
True
"""
from __future__ import annotations

import html as html_lib
import json
from importlib.resources import files
from pathlib import Path
from typing import Any

from asyncspec.checker.legend import LEGEND_HEAD, legend_entries
from asyncspec.checker.atomic import write_atomically

_ASSETS = files("asyncspec.explorer")


def _asset(name: str) -> str:
    return _ASSETS.joinpath(name).read_text(encoding="utf-8")


def embed_json(data: Any) -> str:
    """JSON safe inside ``<script type="application/json">`` (no ``</`` can close it)."""
    return json.dumps(data, default=str).replace("</", "<\\/")


def page_shorts(view: dict[str, Any]) -> list[str]:
    """Every short name the page shows: the lanes' parameters and counters, the counter
    table's columns, and the engine rows of any step."""
    engine = {key for step in view.get("steps", []) for key in (step.get("engine") or {})}
    return ["P", "M", "eos", "status", *view.get("counters", []), "blocks", *sorted(engine)]


def legend_html(view: dict[str, Any]) -> str:
    """The page's legend: each short name it shows with vLLM's name (``checker/legend.py``);
    the script titles the counter table's heads from it."""
    rows = "".join(f'<tr data-short="{html_lib.escape(e.short)}" data-vllm="{html_lib.escape(e.vllm)}">'
                   f"<th>{html_lib.escape(e.short)}</th><td>{html_lib.escape(e.vllm)}</td></tr>"
                   for e in legend_entries(page_shorts(view)))
    return f'<details id="legend" open><summary>{LEGEND_HEAD}</summary><table>{rows}</table></details>'


def render_page(view: dict[str, Any]) -> str:
    """The page for ``view`` (see ``checker_view`` and ``fuzz_view``)."""
    title = html_lib.escape(str(view.get("title", "trace")))
    graph = view.get("graph_svg")
    graph_html = f'<details id="graph" open><summary>state space</summary>{graph}</details>' if graph else ""
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:">
<title>{title}</title>
<style>{_asset("explorer.css")}</style>
</head><body>
<div id="header"></div>
<p class="help">One lane per request (status N/C, then H F X when non-zero), steps across; click a step
(or use ← →) for its counters, the spec action and what was scheduled.</p>
<div id="lanes"></div>
{legend_html(view)}
<div id="detail"></div>
{graph_html}
<div id="extra"></div>
<script type="application/json" id="trace-data">{embed_json(view)}</script>
<script>{_asset("explorer.js")}</script>
</body></html>
"""


def write_page(view: dict[str, Any], out: Path) -> None:
    """Write the page for ``view`` to ``out`` atomically (``WriteError``, one line, if it cannot be)."""
    write_atomically(out, render_page(view))
