"""How a divergence is shown: the side-by-side table (spec | target) of the last events, one per bucket."""
from __future__ import annotations

import json
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from asyncspec.checker.legend import SHORT_OF_FIELD, legend_text
from asyncspec.statemachine_tests.core.buckets import Bucket
from asyncspec.statemachine_tests.core.harness import Row, RunResult, Workload

WIDTH = 160  # wide enough for four events side by side, also in CI logs
SHOWN_EVENTS = 4  # events in the side-by-side table: the diverging one and those before it
_REQUEST_FIELDS = ("status", "num_tokens", "num_computed_tokens", "num_output_placeholders",
                   "num_in_flight_tokens", "num_stale_output_tokens", "drop_stale_output")


def table_fields(row: Row, w: Workload) -> list[str]:
    """The differing fields first, then the counters of the requests they name."""
    fields = [d.field for d in row.differences]
    reqs = sorted({f.split(".")[0] for f in fields if f.startswith("r") and "." in f})
    for r in reqs:
        fields += [f"{r}.{k}" for k in _REQUEST_FIELDS]
    fields += ["scheduled", "delivered", "preempted", "num_free_blocks"]
    if w.defer_block_free:
        fields += ["sched_step_seq", "processed_step_seq", "deferred_frees"]
    return list(dict.fromkeys(fields))


_SHORT = SHORT_OF_FIELD  # num_computed_tokens -> C: the letters of docs/spec.md, from the one legend


def short_name(name: str) -> str:
    """``r1.num_computed_tokens`` -> ``r1.C`` (the letters of docs/spec.md)."""
    head, _, tail = name.partition(".")
    return f"{head}.{_SHORT.get(tail, tail)}" if tail else name


def divergence_legend(fields: list[str]) -> str:
    """The caption of ``divergence_table``: vLLM's name of every request field its rows show."""
    return legend_text(short_name(f).partition(".")[2] for f in fields)


def divergence_table(result: RunResult, target: str) -> Table:
    """Spec vs target, field by field, for the diverging event and the ones before it.

    Rows are fields (request counters with the letters of docs/spec.md), two
    columns per event (spec, target); a cell where they differ is red.  The
    caption is the legend of the letters, in vLLM's names.
    """
    rows = result.rows[-SHOWN_EVENTS:]
    fields = table_fields(result.rows[-1], result.workload)
    table = Table(title=f"first divergence: spec vs {target}", header_style="bold",
                  caption=escape(divergence_legend(fields)), caption_justify="left")
    table.add_column("field", no_wrap=True)
    for row in rows:
        table.add_column(f"#{row.index} {row.event}\nspec", overflow="fold")
        table.add_column(f"\n{target}", overflow="fold")
    for name in fields:
        cells: list[str] = []
        for row in rows:
            e, a = row.expected.flat().get(name, "-"), row.actual.flat().get(name, "-")
            style = "bold red" if e != a else ""
            cells += [_cell(e, style), _cell(a, style)]
        table.add_row(short_name(name), *cells)
    fed: dict[int, tuple[str, ...]] = getattr(result, "fed", {})
    if fed:  # the engine target: what vLLM's runner fed each request (req@position:tokens)
        table.add_row("worker fed", *[c for row in rows for c in ("", escape(" ".join(fed.get(row.index, ()))))])
    return table


def _cell(value: Any, style: str) -> str:
    text = escape(str(value))
    return f"[{style}]{text}[/{style}]" if style else text


def event_list(result: RunResult) -> str:
    """``1 add_request r0, 2 schedule, ...`` on one line."""
    return ", ".join(f"{r.index} {r.event}" for r in result.rows)


def print_divergence(result: RunResult, target: str, console: Console) -> None:
    """The workload, the events, the differences and the side-by-side table."""
    row = result.rows[-1]
    console.print(f"[bold red]DIVERGENCE[/bold red] at event {row.index} '{row.event}' "
                  f"(spec vs {target})")
    console.print(f"workload: {escape(json.dumps(result.workload.to_json()))}")
    console.print(f"events: {escape(event_list(result))}")
    engine_events = getattr(result, "engine_events", None)
    if engine_events:
        console.print(f"engine events: {escape(', '.join(str(e) for e in engine_events))}")
    for d in row.differences:
        console.print(f"  {d.field}: spec={escape(repr(d.expected))} {target}={escape(repr(d.actual))}")
    console.print(divergence_table(result, target))


def print_buckets(buckets: list[Bucket], target: str, console: Console) -> None:
    """Every bucket in order of first sighting: its signature and count, then its representative's
    divergence and table and how to replay it (an interrupted campaign may leave one unshrunk)."""
    for number, b in enumerate(buckets, 1):
        console.print(f"[bold]bucket {number} of {len(buckets)}[/bold]: {escape(b.signature)}: {b.count} "
                      f"divergent example(s), the first is example {b.first_example}")
        if b.representative is None:
            console.print("  not shrunk (interrupted); rerun with --examples "
                          f"{b.first_example + 1} to get its replay file")
            continue
        print_divergence(b.representative, target, console)
        if b.replay_file is not None:
            console.print(f"replay with: asyncspec replay {b.replay_file} --target {target}")


def print_coverage(coverage: dict[str, int], zero: list[str], out: Console) -> None:
    """The coverage table of a campaign, and the categories it enabled but never reached."""
    for name, count in coverage.items():
        out.print(f"  {name:34} {count}")
    if zero:
        out.print(f"[bold yellow]VACUOUS[/bold yellow]: no coverage of {', '.join(zero)} "
                  "although the configuration enables it; this run is not a pass for those")
