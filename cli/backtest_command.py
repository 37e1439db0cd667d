"""``asyncspec backtest``: the fixed-work campaigns of several vLLM releases, their buckets classified.

Listed by ``cli/main.py``; the work is ``fidelity/backtest.py``.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from asyncspec.cli.common import fail_usage
from asyncspec.cli.contract import Choice, ContractCommand


@click.command(cls=ContractCommand)
@click.argument("pythons", nargs=-1, required=True)
@click.option("--target", "targets", type=Choice(["vllm", "vllm-engine"]), multiple=True,
              help="The targets to run (repeatable; default: both).")
@click.option("--examples", type=click.IntRange(min=1), default=None,
              help="Examples per campaign (default: each target's default fixed-work campaign).")
@click.option("--seed", type=click.IntRange(min=0, max=2**32 - 1), default=0, show_default=True)
@click.option("--raw", is_flag=True,
              help="Turn the release settings off (ASYNCSPEC_RELEASE_SETTINGS=none): the older behaviour they "
                   "cover shows as buckets.")
@click.option("--out-dir", type=click.Path(path_type=Path), default=Path("backtest"), show_default=True,
              help="Where each release's replay files go (<out-dir>/<version>/<target>/).")
@click.option("--markdown", "markdown_path", type=click.Path(path_type=Path), default=None,
              help="Also write the docs table (markdown) here.")
@click.option("--json", "as_json", is_flag=True,
              help='Print {"releases": [{"version", "parts_run", "parts_skipped", "buckets": [... "classification"]}]}.')
def backtest(pythons: tuple[str, ...], targets: tuple[str, ...], examples: int | None, seed: int, raw: bool,
             out_dir: Path, markdown_path: Path | None, as_json: bool) -> None:
    """Run every target's fixed-work campaign on each vLLM release in PYTHONS (venv folders or Python
    executables, one release each), classify each divergence bucket from the hand-kept table, and
    replay it on the next newer release given.  Exit 0 every bucket classified, 1 a bucket
    unclassified or a campaign that could not run, 2 bad input."""
    from asyncspec.checker.atomic import WriteError, write_atomically
    from asyncspec.checker.schema import JSON_SCHEMA_VERSION
    from asyncspec.fidelity import backtest as bt

    try:
        rels = bt.releases(pythons)
    except bt.BacktestError as exc:
        fail_usage(str(exc))
    extra = ["--seed", str(seed), *(["--examples", str(examples)] if examples else [])]
    report = bt.backtest(rels, targets or bt.TARGETS, out_dir.resolve(), extra, raw,
                         progress=lambda line: print(line, file=sys.stderr))
    if markdown_path is not None:
        try:
            write_atomically(markdown_path, bt.markdown(report))
        except WriteError as exc:
            fail_usage(str(exc))
    print(json.dumps({"schema_version": JSON_SCHEMA_VERSION, **report}, indent=2) if as_json else bt.render(report))
    sys.exit(bt.exit_code(report))
