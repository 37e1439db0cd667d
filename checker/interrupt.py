"""Ctrl-C and SIGTERM: one path, and nothing lost.

Every long command (``check``, ``fuzz``, ``prove``, ``sweep``, ``mutants``)
ends an interrupted run with a partial report (exit 3) instead of click's
"Aborted!".  Three pieces:

* ``install()`` (called as the command group starts): one handler for SIGINT
  and SIGTERM.  While a command's body runs (``armed()``), the first signal
  outside ``catching()`` raises a ``KeyboardInterrupt``, which every command
  catches; a repeated one (a second Ctrl-C, SIGTERM then SIGINT, a storm)
  changes nothing more, so the report the first one started is printed whole
  and the exit is still 3.  In the ``asyncspec`` program, before the body
  runs (click reads the command line, the command is imported) a signal ends
  the program at once with one line and exit 3, as the start-up handler does
  (``cli/early_signals.py``): nothing is written yet, and an exception raised
  there could escape every ``except``; after the body, a signal only sets the
  flag (a command run inside another program, e.g. a test, gets the
  ``KeyboardInterrupt`` in every phase).  A
  ``KeyboardInterrupt`` that Python swallows where it lands (a weakref callback
  or a finaliser, e.g. inside the import machinery) is not printed: the flag
  keeps it, and the next ``catching()`` block, or the exit code, answers it.
  A SIGINT inherited as ignored (``cmd &``, ``nohup``) stays ignored: that is
  the shell's choice; SIGTERM acts everywhere.
* ``catching()``: while inside, SIGINT and SIGTERM only set a flag
  (``requested()``) and call ``on_signal``; a loop polls the flag between two
  units of work (a parent state, an example, an obligation), so what it
  holds stays whole.  Under the command line the flag is kept to the end of
  the command, so a signal that lands after a loop's last poll is still seen.
* ``pause_point(name)``: with ``ASYNCSPEC_PAUSE_AT=name``, the tool stops
  there, writes ``ASYNCSPEC_PAUSE_FILE`` and waits for a signal, so a test
  sends it at an exact moment (``start-up``, ``mid-run``, ``writing``, ``reported``:
  the report is out, the exit code decided; ``engine-build``: vLLM's engine is
  about to be built).
* ``waking(callback)``: a helper thread woken by the signal itself (through
  ``signal.set_wakeup_fd``), for code that sits in C for seconds, e.g. z3:
  the callback interrupts it (``z3.Context.interrupt``) from that thread.
"""
from __future__ import annotations

import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import Any

_received: list[int] = []  # the signals received since reset(), in order
_callbacks: list[Callable[[], None] | None] = []  # the on_signal of each open catching() block
_installed = [False]  # install() put the handler in place (the command line runs)
_phase = ["start-up"]  # under the command line: "start-up", "armed" (a command's body runs), "done"
_program = [False]  # install(program=True): this process is the asyncspec program (phases apply)
_first_at = [0.0]  # when the first signal since reset() arrived (time.monotonic)
PARTIAL_EXIT = 3  # the contract's exit code of a partial run (cli/common.py EXIT_PARTIAL)
STUCK_SECONDS = 5.0  # a repeated signal this long after an unanswered first one stops the program
_paused: set[str] = set()  # the pause points already passed
_deliveries = [0]  # signals delivered to any handler of this module or ``atomic.signals_held``
SIGNALS = (signal.SIGINT, signal.SIGTERM)
PAUSE_AT = "ASYNCSPEC_PAUSE_AT"
PAUSE_FILE = "ASYNCSPEC_PAUSE_FILE"
PAUSE_POINTS = ("start-up", "mid-run", "writing", "reported", "engine-build")
_WANTED = frozenset(os.environ.get(PAUSE_AT, "").split(",")) - {""}  # read once: a test sets it per process
Handler = Callable[[int, FrameType | None], Any] | int | None


def requested() -> bool:
    """Whether SIGINT or SIGTERM arrived (since the last ``reset``)."""
    return bool(_received)


def reason() -> str:
    """The partial reason of an interrupted run: ``interrupted`` (plus the signal if not SIGINT)."""
    if _received and _received[0] != signal.SIGINT:
        return f"interrupted ({signal.Signals(_received[0]).name})"
    return "interrupted"


def reset() -> None:
    """Forget the signals received so far."""
    _received.clear()


def note(signum: int) -> None:
    """Record that ``signum`` arrived (a handler's first act)."""
    if not _received:
        _first_at[0] = time.monotonic()
    _received.append(signum)
    delivered()


def delivered() -> None:
    """A signal reached a handler (noted, or held for later): a paused test point goes on."""
    _deliveries[0] += 1


def _stuck() -> None:
    """A signal repeated long after a first one the program has not answered (a library swallowed the
    ``KeyboardInterrupt``): one line, exit 3 now; every file written so far is whole (atomic writes)."""
    try:
        sys.stdout.flush()
    except (OSError, ValueError):
        pass
    print(f"asyncspec: {reason()}; the command stopped before it could report", file=sys.stderr, flush=True)
    os._exit(PARTIAL_EXIT)


def _in_main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


def stopped_line() -> str:
    """The one line of a command stopped by a signal before it could report."""
    return f"asyncspec: {reason()}; the command stopped before it could report"


def stop_now() -> None:
    """A signal before the command could write anything: the one line, exit 3 at once (``os._exit``:
    an exception raised here could land where no ``except`` sees it, e.g. in the import machinery)."""
    print(stopped_line(), file=sys.stderr, flush=True)
    os._exit(PARTIAL_EXIT)


def handle(signum: int, frame: FrameType | None) -> None:
    """The one handler: note the signal; inside ``catching()`` call its callbacks; under the command
    line before the command's body runs, stop at once (after it, the flag only); else raise a
    ``KeyboardInterrupt`` for the first signal only (a repeated one must not break the report)."""
    first = not _received
    note(signum)
    if _callbacks:
        for callback in list(_callbacks):
            if callback is not None:
                callback()
        return
    if _program[0] and _phase[0] != "armed":
        if _phase[0] == "start-up":
            stop_now()
        return
    if first:
        raise KeyboardInterrupt
    if _installed[0] and time.monotonic() - _first_at[0] > STUCK_SECONDS:
        _stuck()


def _put(handler: Handler) -> list[tuple[int, Handler]]:
    """``handler`` for SIGTERM, and for SIGINT unless SIGINT is ignored; the handlers it replaced."""
    previous: list[tuple[int, Handler]] = []
    for s in SIGNALS:
        if s == signal.SIGINT and signal.getsignal(s) == signal.SIG_IGN:
            continue  # inherited as ignored (started in the background): the shell's choice
        previous.append((s, signal.signal(s, handler)))
    return previous


def _restore(previous: list[tuple[int, Handler]]) -> None:
    for s, old in previous:
        signal.signal(s, old if old is not None else signal.SIG_DFL)


def install(program: bool = False) -> Callable[[], None]:
    """The command line runs: ``handle`` for SIGINT (unless ignored) and SIGTERM, the flag cleared;
    returns what puts the earlier handlers back (for a command run inside another program).  With
    ``program`` (this process is the ``asyncspec`` program) a signal before the command's body stops
    it at once and one after it sets the flag only; a command run inside another program (a test)
    gets the ``KeyboardInterrupt`` in every phase, the program around it being its owner."""
    reset()
    if not _in_main_thread():
        return lambda: None
    previous = _put(handle)
    _installed[0] = True
    _program[0] = program
    _phase[0] = "start-up"
    earlier_hook = sys.unraisablehook

    def swallowed(info: Any) -> None:
        """Python could not raise our ``KeyboardInterrupt`` where it landed: the flag keeps it, quietly."""
        if not (isinstance(info.exc_value, KeyboardInterrupt) and _received):
            earlier_hook(info)
    sys.unraisablehook = swallowed

    def uninstall() -> None:
        _installed[0] = False
        _program[0] = False
        _phase[0] = "start-up"
        sys.unraisablehook = earlier_hook
        _restore(previous)
    return uninstall


@contextmanager
def armed() -> Iterator[None]:
    """A command's body runs: under the command line, the first signal outside ``catching()`` raises
    a ``KeyboardInterrupt`` (which the command turns into its partial report); after the block, a
    signal only sets the flag (the command has reported or is about to)."""
    _phase[0] = "armed"
    try:
        yield
    finally:
        _phase[0] = "done"


def ignore_from_now() -> None:
    """The program is ending (its report out, its exit code decided): SIGINT and SIGTERM are ignored, so
    a late one does not kill it by the signal while Python shuts down (which puts back SIG_DFL handlers)."""
    if _in_main_thread():
        for s in SIGNALS:
            signal.signal(s, signal.SIG_IGN)


def sigterm_as_sigint() -> None:
    """Kept for callers of the earlier name: ``install()``."""
    install()


@contextmanager
def catching(on_signal: Callable[[], None] | None = None) -> Iterator[None]:
    """SIGINT and SIGTERM set the flag (and call ``on_signal``) instead of raising.

    Under the command line (``install``) the flag is kept past the block: the
    command sees a signal that came after the loop's last poll.  Elsewhere (a
    test, a library caller) the block installs the handler itself, and the
    outermost block starts and ends with the flag cleared, so a signal is seen by
    the run it interrupted and by no later one in the same process.  Outside the
    main thread, where no handler can be installed, nothing changes.
    """
    if not _in_main_thread():
        yield
        return
    own = not _installed[0] and not _callbacks
    previous = _put(handle) if own else []
    if own:
        reset()
    _callbacks.append(on_signal)
    if requested() and on_signal is not None:
        on_signal()  # a signal before the block (swallowed where it landed): this loop stops at its first poll
    try:
        yield
    finally:
        _callbacks.pop()
        if own:
            _restore(previous)
            reset()


def pause_point(name: str) -> None:
    """With ``ASYNCSPEC_PAUSE_AT`` naming ``name`` (comma-separated names), the first time here: write the
    process id to ``ASYNCSPEC_PAUSE_FILE`` and wait (60 s at most) until a signal arrives, so a test
    signals this exact moment.  Inside ``catching()`` the wait ends with the flag set; outside, the
    signal raises here as it would have at this point."""
    if name not in _WANTED or name in _paused:  # the common case: one set lookup
        return
    _paused.add(name)
    marker = os.environ.get(PAUSE_FILE)
    if marker:
        Path(marker).write_text(f"{os.getpid()} {name}\n")
    else:
        print(f"asyncspec: paused at {name} (pid {os.getpid()})", file=sys.stderr, flush=True)
    seen = _deliveries[0]
    deadline = time.monotonic() + 60
    while _deliveries[0] == seen and time.monotonic() < deadline:
        time.sleep(0.005)


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
