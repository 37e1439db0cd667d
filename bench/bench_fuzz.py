"""Benchmark: differential-fuzz events per second per target, and where the time goes.

Run: ``python bench/bench_fuzz.py [--seconds 20] [--seed 0] [--profile base]``.
For each connected target (``vllm``, and ``reference``/``torch`` once
registered in ``statemachine_tests.scheduler.registry``) one fuzz campaign runs in this
process; the harness times every part of every event:

* engine: inside the target's event calls (vLLM's ``schedule``,
  ``update_from_output``, ``finish_requests``...) plus building its scheduler;
* spec: the oracle's action (``spec.engine.apply``);
* harness: reading and normalizing both observations, comparing them, and
  everything else (Hypothesis generation, picking events).

Prints events/s and the shares; the goal is harness < engine.  Nothing is
asserted: these machines are shared and noisy.
"""
from __future__ import annotations

import argparse
import time

from asyncspec.statemachine_tests.scheduler.campaign import Campaign
from asyncspec.statemachine_tests.scheduler.profiles import PROFILES
from asyncspec.statemachine_tests.scheduler.registry import (
    NOT_CONNECTED, TARGETS, TargetUnavailable, load_target,
)


def bench(target: str, seconds: float, seed: int, profile: str) -> None:
    """One campaign on ``target``; prints one line of throughput and one of shares."""
    try:
        load_target(target, allow_version=False)
    except TargetUnavailable as exc:
        print(f"{target:9} skipped: {exc}")
        return
    c = Campaign(target, seconds, seed, PROFILES[profile])
    start = time.perf_counter()
    c.run()
    wall = time.perf_counter() - start
    t = c.stats.timing
    engine = t.get("target", 0.0) + t.get("target_build", 0.0)
    spec = t.get("oracle", 0.0)
    harness = wall - engine - spec
    found = " (stopped at a divergence)" if c.found else ""
    print(f"{target:9} {c.stats.events / wall:8.0f} events/s  {c.stats.examples} examples, "
          f"{c.stats.events} events in {wall:.1f} s{found}")
    print(f"{'':9} engine {engine / wall:5.1%}  spec {spec / wall:5.1%}  harness {harness / wall:5.1%} "
          f"(observe {(t.get('target_observe', 0) + t.get('oracle_observe', 0)) / wall:.1%}, "
          f"compare {t.get('compare', 0) / wall:.1%}, Hypothesis and the rest "
          f"{(harness - t.get('target_observe', 0) - t.get('oracle_observe', 0) - t.get('compare', 0)) / wall:.1%})"
          f"  harness/engine = {harness / engine:.2f}" if engine else "")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--profile", choices=sorted(PROFILES), default="base")
    args = ap.parse_args()
    for name in TARGETS:
        if name == "spec" or name in NOT_CONNECTED:
            continue
        bench(name, args.seconds, args.seed, args.profile)
    for name, why in NOT_CONNECTED.items():
        print(f"{name:9} not connected: {why}")


if __name__ == "__main__":
    main()
