"""Ctrl-C and SIGTERM while the ``asyncspec`` program starts: one line, exit 3, never a traceback.

``install()`` is the program's first act (``asyncspec/__main__.py``; ``cli/main.py``
when started as the ``asyncspec`` script), before click or anything heavy is
imported: a signal that arrives while Python imports ends the program with one
line on stderr and exit 3.  ``hand_over()``, called as the command group starts
(``cli/contract.py``), gives SIGINT back to Python's handler (a
``KeyboardInterrupt``, which every command turns into its partial report) and
routes SIGTERM to it (``checker/interrupt.py``).  A process that only imports
the command line (a test, the pytest plugin) keeps its own handlers.
"""
from __future__ import annotations

import os
import signal
import sys
import threading
from pathlib import Path
from types import FrameType

from asyncspec.checker import interrupt

from asyncspec.cli.common import EXIT_PARTIAL


def stopped_line() -> str:
    """The one line of a command stopped by a signal before it could report."""
    return f"asyncspec: {interrupt.reason()}; the command stopped before it could report"


def _stop(signum: int, frame: FrameType | None) -> None:
    """The start-up handler: the one line, exit 3 at once.  Nothing is written yet, so nothing is lost;
    an exception would not do (Python 3.11 wraps one raised while a class is made in a RuntimeError)."""
    interrupt.note(signum)
    print(stopped_line(), file=sys.stderr, flush=True)
    os._exit(EXIT_PARTIAL)


def started_as_the_asyncspec_script() -> bool:
    """This process is the ``asyncspec`` console script (``pyproject.toml``'s entry point)."""
    return Path(sys.argv[0]).stem == "asyncspec" if sys.argv and sys.argv[0] else False


def install() -> None:
    """From now on SIGINT and SIGTERM end the program at once: one line, exit 3."""
    if threading.current_thread() is threading.main_thread():
        for signum in interrupt.SIGNALS:
            signal.signal(signum, _stop)


def hand_over() -> None:
    """The command group runs: SIGINT raises ``KeyboardInterrupt`` again, SIGTERM does what SIGINT does."""
    if threading.current_thread() is not threading.main_thread():
        return
    if signal.getsignal(signal.SIGINT) is _stop:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    interrupt.sigterm_as_sigint()
