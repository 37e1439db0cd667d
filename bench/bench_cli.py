"""Benchmark: how long the command line takes to start, in CPU seconds of the child process.

Run: ``python bench/bench_cli.py [--runs N] [--target SECONDS]``.  Each command
(``asyncspec --help``, ``asyncspec configs`` and the bad-usage error
``asyncspec check --max-states 0``) runs ``--runs`` times (default 5) as
``python -m asyncspec ...`` in a fresh process; the figure is the median of
user + system CPU seconds of that process (``os.wait4``), so other load on
the machine slows it less than it slows wall time.  Printed beside it: the
ratio to the target (default 0.5 s; below 1 is within it) and, for scale,
a bare ``python -c pass``.

Nothing is asserted: these machines are shared and noisy.
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys

COMMANDS: tuple[tuple[str, ...], ...] = (("--help",), ("configs",), ("check", "--max-states", "0"))
"""The commands measured: the group's listing, a quick command, a bad-usage error."""


def cpu_seconds(argv: list[str]) -> float:
    """User + system CPU seconds of one run of ``argv`` (its output discarded)."""
    p = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, _, usage = os.wait4(p.pid, 0)
    p.returncode = 0  # reaped here; keep Popen from waiting again
    return usage.ru_utime + usage.ru_stime


def median_cpu(argv: list[str], runs: int) -> float:
    """The median of ``runs`` measurements of ``argv``."""
    return statistics.median(cpu_seconds(argv) for _ in range(runs))


def main() -> None:
    """Print one line per command: median CPU seconds and the ratio to the target."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--target", type=float, default=0.5, help="CPU seconds a command may take")
    args = parser.parse_args()
    bare = median_cpu([sys.executable, "-c", "pass"], args.runs)
    print(f"python -c pass: {bare:.3f} CPU-s (median of {args.runs}; the interpreter's own start-up)")
    for command in COMMANDS:
        seconds = median_cpu([sys.executable, "-m", "asyncspec", *command], args.runs)
        print(f"asyncspec {' '.join(command):24s} {seconds:.3f} CPU-s (median of {args.runs})  "
              f"{seconds / args.target:.2f} x the {args.target} s target")


if __name__ == "__main__":
    main()
