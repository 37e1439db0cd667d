"""A trace as a table of counters, one row per action.

Columns: the action and what it exercised, then per request its status and
``N`` (num_tokens), ``C`` (num_computed_tokens), ``H`` (placeholders), ``F``
(in-flight tokens), ``X`` (stale tokens), then the batch queue (oldest
first; ``r0:4`` = 4 tokens of r0, ``r0:1@2`` = one token sampling output
position 2, ``r0:2@2+1d`` = the same with one draft, ``∅`` = an empty step), the free queue and, when deferring,
``Q/R`` and the parked frees.  A value that changed in this row is bold.
Under the table, its caption: the legend of every short name it shows, in
vLLM's words (``checker/legend.py``).
"""
from __future__ import annotations

from rich.markup import escape
from rich.table import Table

from asyncspec.checker.legend import legend_text
from asyncspec.spec import request as rq
from asyncspec.spec.config import SpecConfig
from asyncspec.spec.engine import Action
from asyncspec.spec.state import EngineState, Step, request_name

Row = tuple[Action | None, EngineState, frozenset[str]]
COUNTERS = ("N", "C", "H", "F", "X")
REQUEST_PARAMS = ("P", "M", "eos")  # in each request's column head


def table_legend(cfg: SpecConfig) -> str:
    """The caption of ``trace_table``: every short name its columns use, with vLLM's name."""
    shorts = [*REQUEST_PARAMS, "status", "*", *COUNTERS, "batch queue", "free blocks"]
    if cfg.defer_block_free:
        shorts += ["Q/R", "parked"]
    return legend_text(shorts)


def _request_cells(s: EngineState, i: int) -> list[str]:
    p, c = s.params[i], s.counters[i]
    status = rq.STATUS_NAMES[c.status] + ("*" if c.drop_stale_output and c.num_stale_output_tokens else "")
    return [
        status,
        str(rq.num_tokens(p, c)),
        str(c.num_computed_tokens),
        str(c.num_output_placeholders),
        str(c.num_in_flight_tokens),
        str(c.num_stale_output_tokens),
    ]


def step_text(step: Step) -> str:
    """``[r0:4 r1:1@2]`` for a step; ``[∅]`` for an empty one."""
    if not step.entries:
        return "[∅]"
    parts = [
        f"{request_name(e.req)}:{e.num_tokens}" + (f"@{e.sampled_position}" if e.sampled_position else "")
        + (f"+{e.num_drafts}d" if e.num_drafts else "")
        for e in step.entries
    ]
    return "[" + " ".join(parts) + "]"


def _engine_cells(cfg: SpecConfig, s: EngineState) -> list[str]:
    queue = " ".join(step_text(st) for st in s.batch_queue) or "-"
    if s.deferred_step is not None:
        queue += " + sampling deferred: " + step_text(s.deferred_step)
    cells = [queue, " ".join(map(str, s.free_blocks)) or "-"]
    if cfg.defer_block_free:
        parked = " ".join(f"{e.fence}:{list(e.evict_first + e.evict_last)}" for e in s.deferred_frees)
        cells += [f"{s.sched_step_seq}/{s.processed_step_seq}", parked or "-"]
    return cells


def trace_table(cfg: SpecConfig, rows: list[Row], title: str = "") -> Table:
    """The rich table for a replayed trace (see ``Trace.states``)."""
    table = Table(title=title or None, show_lines=False, header_style="bold",
                  caption=escape(table_legend(cfg)), caption_justify="left")
    table.add_column("#", justify="right")
    table.add_column("action")
    table.add_column("events")
    n = len(rows[0][1].params)
    for i in range(n):
        p = rows[0][1].params[i]
        eos = p.eos_position or "never"
        table.add_column(f"{request_name(i)} (P={p.num_prompt_tokens} M={p.max_tokens} eos={eos})")
        for name in COUNTERS:
            table.add_column(name, justify="right")
    table.add_column("batch queue (oldest first)")
    table.add_column("free blocks")
    if cfg.defer_block_free:
        table.add_column("Q/R", justify="right")
        table.add_column("parked (fence:blocks)")
    previous: list[str] | None = None
    for k, (action, s, events) in enumerate(rows):
        cells = [escape(c) for i in range(n) for c in _request_cells(s, i)] + [
            escape(c) for c in _engine_cells(cfg, s)]
        shown = [f"[bold]{c}[/bold]" if previous is not None and c != previous[j] else c for j, c in enumerate(cells)]
        previous = cells
        table.add_row(str(k), str(action) if action else "init", " ".join(sorted(events)), *shown)
    return table
