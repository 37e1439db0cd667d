"""Benchmark of ``asyncspec prove``: total and slowest obligation time (printed, not asserted).

Target: the whole proof under 60 s on a 2-core machine.
Run: ``python bench/bench_prove.py``.
"""
from __future__ import annotations

import time

from asyncspec.proofs.prover import prove


def main() -> None:
    """Run every obligation once and print the timings."""
    start = time.perf_counter()
    report = prove()
    wall = time.perf_counter() - start
    slowest = sorted(report.outcomes, key=lambda o: o.seconds, reverse=True)[:5]
    print(f"obligations: {len(report.outcomes)}  all proved: {report.ok}")
    print(f"wall time: {wall:.1f}s  (z3 time {sum(o.seconds for o in report.outcomes):.1f}s)")
    for o in slowest:
        print(f"  slow: [{o.variant}] {o.action} x {o.invariant}  {o.seconds:.3f}s")


if __name__ == "__main__":
    main()
