"""The explorer page written beside each trace file ``check`` and ``fuzz`` save.

``install_html_hooks()`` (called by the CLI) registers ``html_beside`` in
``checker.trace.SAVE_HOOKS``: after ``x.trace.json`` is written, ``x.trace.html``
follows.  A trace the explorer cannot show, or a page that cannot be written
(a full disk: ``checker/atomic.py``), costs one warning line on stderr, never
the trace file itself (which is already written).
"""
from __future__ import annotations

import sys
from pathlib import Path

from asyncspec.checker.atomic import WriteError
from asyncspec.checker.trace import SAVE_HOOKS


def html_beside(path: Path) -> None:
    """Write the explorer page of trace file ``path`` next to it (``.html``)."""
    from asyncspec.explorer.load import ExplorerError, html_for, html_path

    try:
        html_for(path, html_path(path))
    except (ExplorerError, WriteError) as exc:
        print(f"asyncspec: warning: no explorer page for {path}: {exc}", file=sys.stderr)


def install_html_hooks() -> None:
    """Register ``html_beside`` once."""
    if html_beside not in SAVE_HOOKS:
        SAVE_HOOKS.append(html_beside)


def html_main(trace_file: Path, out: Path) -> int:
    """``asyncspec replay FILE --html OUT``: 0 page written, 2 file not shown (one line)."""
    from asyncspec.explorer.load import ExplorerError, html_for

    try:
        view = html_for(trace_file, out)
    except (ExplorerError, WriteError) as exc:
        print(f"asyncspec: error: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {out} ({view['kind']} trace, {len(view['steps'])} steps)")
    return 0
