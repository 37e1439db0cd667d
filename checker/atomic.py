"""Atomic writes: the one way every file the tool writes reaches the disk.

``write_atomically`` writes a temporary file beside the target, flushes it to
the disk and renames it over the target, so a file is never half-written.  It
renames only over a regular file (or where nothing is yet): a symlink is
followed and its regular target replaced (the link stays), and a device, a
folder, a FIFO or a link to one is refused, so a device node or a link is never
replaced.  Every failure (a full disk, a read-only or pseudo file system, a
name too long) is a ``WriteError``: one line naming the path, and for a full
disk the space needed and the space free; the CLI answers it with exit 2.

``folder_problem`` checks before a run that a folder can hold the files the run
will write (it creates and removes a probe file, which ``os.access`` cannot
replace: root passes ``os.access`` on /proc).  ``signals_held`` keeps a pair of
files (a trace and its page) from being split by Ctrl-C or SIGTERM.  A command
that goes on after a failed write notes it with ``note_unsaved`` and answers it
at its end (``take_unsaved``).
"""
from __future__ import annotations

import errno
import os
import signal
import stat
import tempfile
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import Protocol

from asyncspec.checker import interrupt
from asyncspec.checker.interrupt import SIGNALS

FULL = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)
"""The errors of a full disk (or quota, or file size limit): the message gives the space needed."""


class WriteError(OSError):
    """A file that could not be written; the message is one line naming the path and what to change."""


class Sink(Protocol):
    """What a writer callback writes to (binary)."""

    def write(self, data: bytes) -> int:
        """Write all of ``data``; its length."""
        ...


def _write_all(fd: int, data: bytes) -> None:
    """Write all of ``data`` to ``fd`` (the one place bytes reach a file: tests make it fail)."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


class _FdSink:
    """A ``Sink`` over a file descriptor, counting the bytes it was given (written or being written)."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.written = 0

    def write(self, data: bytes) -> int:
        """Write all of ``data``."""
        self.written += len(data)
        _write_all(self.fd, bytes(data))
        return len(data)


def _kind(mode: int) -> str:
    """What a file of ``mode`` is, in words."""
    kinds = ((stat.S_ISDIR, "a folder"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
             (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"))
    return next((word for test, word in kinds if test(mode)), "not a regular file")


def regular_target(path: Path) -> Path:
    """Where a write to ``path`` lands: ``path``, or the end of its symlinks; ``WriteError`` unless that
    is a regular file or nothing yet."""
    try:
        target = Path(os.path.realpath(path)) if path.is_symlink() else path
        mode = os.stat(target).st_mode
    except FileNotFoundError:
        return Path(os.path.realpath(path))  # nothing there yet (a dangling link: where it points)
    except OSError as exc:
        raise WriteError(f"cannot write {path}: {exc.strerror}; choose another path") from None
    if stat.S_ISREG(mode):
        return target
    via = f"it links to {target}, " if target != path else "it is "
    raise WriteError(f"cannot write {path}: {via}{_kind(mode)}, not a regular file; give the path of a "
                     f"regular file (or of none yet)")


def _size(n: int) -> str:
    """``n`` bytes in words (B, KiB, MiB, GiB)."""
    if n < 1024:
        return f"{n} B"
    value = float(n)
    for unit in ("KiB", "MiB", "GiB"):
        value /= 1024
        if value < 1024 or unit == "GiB":
            break
    return f"{value:.1f} {unit}"


def free_bytes(folder: Path) -> int | None:
    """The bytes an unprivileged writer may still use in ``folder``'s file system, if known."""
    try:
        st = os.statvfs(folder)
    except OSError:
        return None
    return st.f_bavail * st.f_frsize


def _failure(path: Path, exc: OSError, needed: int, exact: bool) -> WriteError:
    """The one-line ``WriteError`` of ``exc`` while writing ``needed`` bytes to ``path``."""
    if exc.errno in FULL:
        free = free_bytes(path.parent)
        have = f", {_size(free)} free" if free is not None else ""
        need = _size(needed) if exact else f"at least {_size(needed)}"
        return WriteError(f"cannot write {path}: no space left on its file system ({need} needed{have}); "
                          f"free some space there or write elsewhere")
    reason = exc.strerror or type(exc).__name__
    return WriteError(f"cannot write {path}: {reason}; choose a writable place")


def _mode_for(path: Path) -> int:
    """The mode of the file being replaced, else what ``open()`` would give a new one (0666 less the umask)."""
    try:
        return path.stat().st_mode & 0o777
    except OSError:
        return 0o666 & ~_umask()


def _umask() -> int:
    """The process umask, read without setting it where the system allows (no window in which another
    thread's new file would get mode 0666)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    umask = os.umask(0o022)
    os.umask(umask)
    return umask


def write_with(path: Path, writer: Callable[[Sink], None], size: int | None = None) -> None:
    """Write what ``writer`` writes to its ``Sink`` to ``path`` atomically (``size``: the bytes it will write,
    if known, for the message of a full disk); ``WriteError`` on any failure, the target left as it was."""
    target = regular_target(path)
    tmp: str | None = None
    sink: _FdSink | None = None
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name[:80]}.", suffix=".tmp")
        sink = _FdSink(fd)
        try:
            writer(sink)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.chmod(tmp, _mode_for(target))  # mkstemp's 0600 would make a rewritten manifest private
        regular_target(target)  # still a regular file (or none) at the moment of the rename
        interrupt.pause_point("writing")  # a test signals here (checker/interrupt.py)
        os.replace(tmp, target)
        tmp = None
    except WriteError:
        raise
    except OSError as exc:
        written = sink.written if sink is not None else 0
        raise _failure(path, exc, size if size is not None else written, size is not None) from None
    finally:
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)


def write_atomically(path: Path, text: str | bytes) -> None:
    """Write ``text`` (UTF-8) to ``path`` via a temporary file and a rename: never half-written, never over
    anything but a regular file; ``WriteError`` (one line) on failure."""
    data = text.encode() if isinstance(text, str) else text

    def write(sink: Sink) -> None:
        sink.write(data)
    write_with(path, write, len(data))


def folder_problem(folder: Path, option: str) -> str | None:
    """Why files could not be written into ``folder`` (one line naming ``option``), or None.

    Checked before a run, so that a trace found after an hour is never lost to the folder: a probe file is
    created (and removed) in ``folder``, or in its nearest existing parent when it is not there yet."""
    probe = folder
    while not probe.exists() and probe.parent != probe:
        probe = probe.parent
    if not probe.is_dir():
        return f"{option} {folder}: {probe} is not a folder (choose a writable folder)"
    try:
        fd, name = tempfile.mkstemp(dir=probe, prefix=".asyncspec-probe-")
    except OSError as exc:
        return f"{option} {folder}: cannot create files in {probe} ({exc.strerror}); choose a writable folder"
    os.close(fd)
    os.unlink(name)
    return None


_UNSAVED: list[WriteError] = []


def note_unsaved(exc: WriteError) -> None:
    """Record a failed write that the command goes on after (answered at its end)."""
    _UNSAVED.append(exc)


def take_unsaved() -> list[WriteError]:
    """The failed writes noted since the last call (cleared)."""
    taken = list(_UNSAVED)
    _UNSAVED.clear()
    return taken


def unsaved_line(failures: list[WriteError]) -> str:
    """The one stderr line of a run whose files were not all written."""
    more = f" (and {len(failures) - 1} more files not written)" if len(failures) > 1 else ""
    return f"asyncspec: error: {failures[0]}{more}"


@contextmanager
def signals_held() -> Iterator[None]:
    """Ctrl-C and SIGTERM wait until the block ends (then act as they would have): files written together
    are all written.  Outside the main thread, where no handler can be installed, nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    got: list[int] = []

    def hold(signum: int, frame: FrameType | None) -> None:
        got.append(signum)
        interrupt.delivered()
    previous = [(s, signal.signal(s, hold)) for s in SIGNALS
                if not (s == signal.SIGINT and signal.getsignal(s) == signal.SIG_IGN)]  # an ignored SIGINT stays so
    try:
        yield
    finally:
        for s, old in previous:
            signal.signal(s, old if old is not None else signal.SIG_DFL)
        for signum in got:
            signal.raise_signal(signum)  # the restored handler acts (the first that raises ends the block)
