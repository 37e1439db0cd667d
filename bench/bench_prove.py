"""Benchmark of ``asyncspec prove``: total, per-variant and slowest obligation time
(printed, not asserted).

Target: the whole proof (all variants, the spec-decode ones with k unbounded
included) well under 60 s on a 2-core machine.
Run: ``python bench/bench_prove.py``.
"""
from __future__ import annotations

import time
from collections import defaultdict

from asyncspec.proofs.request_abstraction import VARIANTS
from asyncspec.proofs.prover import prove


def main() -> None:
    """Run every obligation once and print the timings."""
    per_variant: dict[str, float] = defaultdict(float)
    walls: dict[str, float] = {}
    outcomes = []
    start = time.perf_counter()
    for v in VARIANTS:
        t0 = time.perf_counter()
        report = prove(variants=(v,))
        walls[v.name] = time.perf_counter() - t0
        outcomes += report.outcomes
        for o in report.outcomes:
            per_variant[v.name] += o.seconds
    wall = time.perf_counter() - start
    ok = all(o.result == "proved" for o in outcomes)
    print(f"obligations: {len(outcomes)}  all proved: {ok}")
    print(f"wall time: {wall:.1f}s  (z3 time {sum(o.seconds for o in outcomes):.1f}s)")
    for name, seconds in walls.items():
        count = sum(1 for o in outcomes if o.variant == name)
        print(f"  [{name}] {count} obligations, wall {seconds:.1f}s, z3 {per_variant[name]:.1f}s")
    for o in sorted(outcomes, key=lambda o: o.seconds, reverse=True)[:5]:
        print(f"  slow: [{o.variant}] {o.action} x {o.invariant}  {o.seconds:.3f}s")


if __name__ == "__main__":
    main()
