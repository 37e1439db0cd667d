"""Benchmark: distinct states per second and peak memory of the explicit checker.

Run: ``python bench/bench_check.py [--set default|slow]``.  Prints, per config
of the set, states, seconds and states/s; then, measured in the same run, the
ratio of the symmetry-reduced to the concrete exploration (states and time)
and the memory per stored state (tracemalloc) on the largest config, and the
process's peak RSS.  Nothing is asserted: these machines are shared and noisy.
"""
from __future__ import annotations

import argparse
import resource
import time
import tracemalloc

from asyncspec.checker import configs as cfgs
from asyncspec.checker.bfs import explore


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--set", default="default", choices=cfgs.SETS)
    args = ap.parse_args()
    configs = cfgs.config_set(args.set)
    total_states, total_time = 0, 0.0
    print(f"{'config':26s} {'states':>9s} {'seconds':>8s} {'states/s':>10s}")
    for cfg in configs:
        r = explore(cfg)
        total_states += r.distinct_states
        total_time += r.seconds
        print(f"{cfg.name:26s} {r.distinct_states:9d} {r.seconds:8.2f} {r.distinct_states / r.seconds:10,.0f}")
    print(f"{'total':26s} {total_states:9d} {total_time:8.2f} {total_states / total_time:10,.0f}")

    largest = max(configs, key=lambda c: cfgs.load_manifest().get(c.name, {}).get("distinct_states", 0))
    t0 = time.perf_counter()
    reduced = explore(largest)
    t1 = time.perf_counter()
    concrete = explore(largest, symmetry=False)
    t2 = time.perf_counter()
    print(f"\nsymmetry on {largest.name}: {concrete.distinct_states / reduced.distinct_states:.2f}x fewer states, "
          f"{(t2 - t1) / (t1 - t0):.2f}x less time than concrete exploration")

    tracemalloc.start()
    r = explore(largest)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    print(f"memory on {largest.name}: {peak / r.distinct_states:,.0f} bytes per stored state "
          f"(tracemalloc peak {peak / 2**20:.1f} MiB for {r.distinct_states} states)")
    print(f"peak RSS of this process: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")


if __name__ == "__main__":
    main()
