"""Ctrl-C and SIGTERM while the ``asyncspec`` program starts: one line, exit 3, never a traceback.

``install()`` is the program's first act (``asyncspec/__main__.py``; ``cli/main.py``
when started as the ``asyncspec`` script), before click or anything heavy is
imported: a signal that arrives while Python imports ends the program with one
line on stderr and exit 3.  ``hand_over()``, called as the command group starts
(``cli/contract.py``), puts the one interrupt handler in place for both
(``checker/interrupt.py``: a ``KeyboardInterrupt``, which every command turns
into its partial report).  A SIGINT inherited as ignored stays ignored.  A process that only imports
the command line (a test, the pytest plugin) keeps its own handlers.
"""
from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from types import FrameType

from asyncspec.checker import interrupt



stopped_line = interrupt.stopped_line  # the one line of a command stopped before it could report


def _stop(signum: int, frame: FrameType | None) -> None:
    """The start-up handler: the one line, exit 3 at once.  Nothing is written yet, so nothing is lost;
    an exception would not do (Python 3.11 wraps one raised while a class is made in a RuntimeError)."""
    interrupt.note(signum)
    interrupt.stop_now()


def started_as_the_asyncspec_script() -> bool:
    """This process is the ``asyncspec`` console script (``pyproject.toml``'s entry point)."""
    return Path(sys.argv[0]).stem == "asyncspec" if sys.argv and sys.argv[0] else False


_installed = [False]  # install() ran: this process is the asyncspec program


def started_here() -> bool:
    """This process is the ``asyncspec`` program (``install`` ran), not a program that imports the CLI."""
    return _installed[0]


def install() -> None:
    """From now on SIGINT (unless inherited as ignored) and SIGTERM end the program at once: one line, exit 3."""
    if threading.current_thread() is threading.main_thread():
        _installed[0] = True
        for signum in interrupt.SIGNALS:
            if signum == signal.SIGINT and signal.getsignal(signum) == signal.SIG_IGN:
                continue  # started in the background with SIGINT ignored: the shell's choice, kept
            signal.signal(signum, _stop)


def hand_over() -> Callable[[], None]:
    """The command group runs: SIGINT (unless ignored) and SIGTERM take the one interrupt path
    (``checker/interrupt.py``: a ``KeyboardInterrupt``, or the flag inside a loop); returns what
    puts the earlier handlers back (a command run inside another program, e.g. a test)."""
    return interrupt.install(program=started_here())
