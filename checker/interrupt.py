"""Ctrl-C and SIGTERM: one path, and nothing lost.

Every long command (``check``, ``fuzz``, ``prove``, ``sweep``, ``mutants``)
ends an interrupted run with a partial report (exit 3) instead of click's
"Aborted!".  Three pieces:

* ``sigterm_as_sigint()`` (installed by the CLI group): SIGTERM runs
  whatever SIGINT handler is installed, so a CI runner's ``kill`` takes the
  same path as Ctrl-C.  With Python's default SIGINT handler that is a
  ``KeyboardInterrupt``, which every command catches.
* ``catching()``: while inside, SIGINT and SIGTERM only set a flag
  (``requested()``) and call ``on_signal``; a loop polls the flag between two
  units of work (a parent state, an example, an obligation), so what it
  holds stays whole.
* ``waking(callback)``: a helper thread woken by the signal itself (through
  ``signal.set_wakeup_fd``), for code that sits in C for seconds, e.g. z3:
  the callback interrupts it (``z3.Context.interrupt``) from that thread.
"""
from __future__ import annotations

import os
import signal
import socket
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType

_received: list[int] = []  # the signals received since reset(), in order
_depth = [0]  # nested catching() blocks
SIGNALS = (signal.SIGINT, signal.SIGTERM)


def requested() -> bool:
    """Whether SIGINT or SIGTERM arrived (since the last ``reset``)."""
    return bool(_received)


def reason() -> str:
    """The partial reason of an interrupted run: ``interrupted`` (plus the signal if not SIGINT)."""
    if _received and _received[0] != signal.SIGINT:
        return f"interrupted ({signal.Signals(_received[0]).name})"
    return "interrupted"


def reset() -> None:
    _received.clear()


def note(signum: int) -> None:
    """Record that ``signum`` arrived (a handler's first act)."""
    _received.append(signum)


def _in_main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


def sigterm_as_sigint() -> None:
    """From now on SIGTERM runs the SIGINT handler installed at that moment."""
    reset()
    if not _in_main_thread():
        return

    def on_term(signum: int, frame: FrameType | None) -> None:
        handler = signal.getsignal(signal.SIGINT)
        if callable(handler):
            if handler is signal.default_int_handler:
                note(signum)
            handler(signum, frame)
        elif handler == signal.SIG_DFL:
            note(signum)
            raise KeyboardInterrupt
    signal.signal(signal.SIGTERM, on_term)


@contextmanager
def catching(on_signal: Callable[[], None] | None = None) -> Iterator[None]:
    """SIGINT and SIGTERM set the flag (and call ``on_signal``) instead of raising.

    The outermost block starts and ends with the flag cleared, so a signal is
    seen by the run it interrupted and by no later one in the same process.
    Outside the main thread, where no handler can be installed, nothing changes.
    """
    if not _in_main_thread():
        yield
        return
    if _depth[0] == 0:
        reset()

    def handler(signum: int, frame: FrameType | None) -> None:
        note(signum)
        if on_signal is not None:
            on_signal()
    previous = [(s, signal.signal(s, handler)) for s in SIGNALS]
    _depth[0] += 1
    try:
        yield
    finally:
        _depth[0] -= 1
        for s, old in previous:
            signal.signal(s, old)
        if _depth[0] == 0:
            reset()


@contextmanager
def waking(callback: Callable[[], None]) -> Iterator[None]:
    """Within ``catching()``: call ``callback`` from a helper thread as soon as a signal
    arrives, even while the main thread is inside C code (which delays Python handlers)."""
    if not _in_main_thread():
        yield
        return
    reader, writer = socket.socketpair()
    writer.setblocking(False)
    done = threading.Event()

    def watch() -> None:
        while not done.is_set():
            try:
                data = reader.recv(16)
            except OSError:
                return
            if done.is_set() or not data:
                return
            callback()
    previous = signal.set_wakeup_fd(writer.fileno(), warn_on_full_buffer=False)
    thread = threading.Thread(target=watch, name="asyncspec-interrupt", daemon=True)
    thread.start()
    try:
        yield
    finally:
        signal.set_wakeup_fd(previous)
        done.set()
        try:
            os.write(writer.fileno(), b"\0")
        except OSError:
            pass
        thread.join(timeout=1.0)
        reader.close()
        writer.close()
