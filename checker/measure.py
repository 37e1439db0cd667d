"""What an exploration costs: CPU seconds and memory held, measured in-process.

``measured(run)`` calls ``run`` and reports the CPU time it took (this
process's, plus that of worker processes it waited for) and the resident
memory it added at its peak, net of what the process held before: the
process's peak resident set if the run raised it, else what is resident
after the run while the explorer still holds its store (the plain explorer
peaks while it builds its networkx graph; the fast one holds its peak to the
end).  Both explorers are measured the same way, so
their ratio is fair; a config checked after another may reuse memory the
first one freed, which makes its figure an underestimate (the benchmark runs
each measurement in a fresh process).

Example:
    >>> parse_memory("1.5G"), parse_memory("512M"), parse_memory("4096")
    (1610612736, 536870912, 4096)
"""
from __future__ import annotations

import os
import resource
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

T = TypeVar("T")

_UNITS = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}


MAX_MEMORY = 2**50
"""The largest memory size accepted (1024T): more than any machine holds, and far within a float's range."""


def parse_memory(text: str) -> int:
    """Bytes in ``"800M"``, ``"2G"``, ``"1.5G"`` or a plain number; ``ValueError`` (one line) otherwise:
    ASCII digits only, positive, at most ``MAX_MEMORY`` (``inf``, ``nan`` and ``1e999`` are refused)."""
    shown = text if len(text) <= 40 else text[:37] + "..."
    t = text.strip().upper().removesuffix("B").removesuffix("I")
    unit = t[-1:] if t[-1:] in _UNITS else ""
    number = t[:len(t) - len(unit)]
    if not number or not number.isascii() or not all(c.isdigit() or c in ".eE+-" for c in number):
        raise ValueError(f"cannot read memory size {shown!r}: write e.g. 800M or 2G")
    try:
        value = float(number)
    except ValueError:
        raise ValueError(f"cannot read memory size {shown!r}: write e.g. 800M or 2G") from None
    if not value > 0:
        raise ValueError(f"memory size {shown!r} must be positive")
    if not value * _UNITS[unit] <= MAX_MEMORY:
        raise ValueError(f"memory size {shown!r} is over the largest accepted, {MAX_MEMORY // _UNITS['T']}T")
    return int(value * _UNITS[unit])


def peak_rss_bytes() -> int:
    """The largest resident set size this process has had."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def rss_bytes() -> int:
    """Resident set size of this process now (peak RSS where /proc is missing)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _cpu() -> float:
    own = time.process_time()
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own + children.ru_utime + children.ru_stime


@dataclass
class Measured(Generic[T]):
    """What ``measured`` returns: the run's value and its cost."""

    value: T
    cpu_seconds: float
    bytes_held: int


def measured(run: Callable[[], T], held: Callable[[T], object] = lambda v: v) -> Measured[T]:
    """Run ``run()`` and measure it; ``held`` keeps what must stay alive while memory is read."""
    before_rss, before_peak, before_cpu = rss_bytes(), peak_rss_bytes(), _cpu()
    value = run()
    cpu = _cpu() - before_cpu
    keep = held(value)
    peak = peak_rss_bytes()
    grown = (peak if peak > before_peak else rss_bytes()) - before_rss
    del keep
    return Measured(value, cpu, max(grown, 0))
