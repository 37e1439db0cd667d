"""The progress line of a long command, on stderr.

On a terminal it is one line redrawn in place (rich's ``Live``, transient:
it disappears when the work is done); elsewhere (CI logs, pipes) a plain
line every ``ASYNCSPEC_PROGRESS_SECONDS`` seconds (default 10; the first
update is printed at once, so a log shows the run started); in ``--json``
mode nothing, so stdout and stderr stay machine-readable.

    with ProgressLine("check async-d2", quiet=as_json) as line:
        line.update("1,234 states (5,000/s), queue 80, depth 12")
"""
from __future__ import annotations

import math
import os
import sys
import time
from types import TracebackType
from typing import Literal, TextIO, cast

from rich.console import Console
from rich.live import Live
from rich.text import Text

Mode = Literal["tty", "plain", "off"]
DEFAULT_INTERVAL = 10.0
TTY_INTERVAL = 0.1  # redraws per second on a terminal, at most 10


def plain_interval() -> float:
    """Seconds between two plain lines (``ASYNCSPEC_PROGRESS_SECONDS``, default 10)."""
    try:
        value = float(os.environ.get("ASYNCSPEC_PROGRESS_SECONDS", DEFAULT_INTERVAL))
    except ValueError:
        return DEFAULT_INTERVAL
    return value if math.isfinite(value) and value >= 0 else DEFAULT_INTERVAL


def choose_mode(quiet: bool, stream: TextIO | None = None) -> Mode:
    """off in ``--json`` mode, tty on a terminal, else plain; ``ASYNCSPEC_PROGRESS`` (plain, tty
    or off) overrides that, e.g. a supervisor that reads stderr to know a run has started."""
    forced = os.environ.get("ASYNCSPEC_PROGRESS", "")
    if forced in ("plain", "tty", "off"):
        return cast(Mode, forced)
    if quiet:
        return "off"
    stream = sys.stderr if stream is None else stream
    return "tty" if stream.isatty() else "plain"


class ProgressLine:
    """One command's progress; ``update`` is cheap to call as often as wanted."""

    def __init__(self, label: str, quiet: bool = False, mode: Mode | None = None,
                 stream: TextIO | None = None) -> None:
        self.label = label
        self.stream = sys.stderr if stream is None else stream
        self.mode: Mode = choose_mode(quiet, self.stream) if mode is None else mode
        self.interval = TTY_INTERVAL if self.mode == "tty" else plain_interval()
        self._last = -math.inf
        self._live: Live | None = None
        self.lines = 0  # plain lines written (for tests)

    def __enter__(self) -> ProgressLine:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def due(self) -> bool:
        """Whether an ``update`` now would be shown (to skip building its text when not)."""
        return self.mode != "off" and time.monotonic() - self._last >= self.interval

    def update(self, text: str, force: bool = False) -> None:
        """Show ``text`` (throttled: at most one redraw per interval, unless ``force``)."""
        if self.mode == "off":
            return
        now = time.monotonic()
        if not force and now - self._last < self.interval:
            return
        self._last = now
        line = f"{self.label}: {text}"
        if self.mode == "plain":
            print(f"asyncspec: {line}", file=self.stream, flush=True)
            self.lines += 1
            return
        if self._live is None:
            console = Console(file=self.stream, highlight=False)
            self._live = Live(Text(line), console=console, auto_refresh=False, transient=True,
                              redirect_stdout=False, redirect_stderr=False)
            self._live.start()
        self._live.update(Text(line, overflow="ellipsis", no_wrap=True), refresh=True)

    def clear(self) -> None:
        """Take the line away before the command prints a line of its own (the next ``update``
        draws it again below)."""
        self.close()
        self._last = -math.inf

    def close(self) -> None:
        """Take the line away (terminal); nothing to do otherwise."""
        if self._live is not None:
            self._live.stop()
            self._live = None


def rate(count: int, seconds: float) -> str:
    """``count`` per second, for a progress line."""
    return f"{count / seconds:,.0f}/s" if seconds > 0 else "-/s"
