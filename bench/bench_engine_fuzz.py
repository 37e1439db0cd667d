"""Benchmark of ``asyncspec fuzz --target vllm-engine``: cases per second, and where the time goes.

Prints, from one run on this machine: start-up (engine construction, once
per campaign), cases/s after start-up (fixed work: N examples over depths
1, 2 and 3), and the shares of the loop's time spent inside vLLM and torch
(EngineCore, scheduler, model runner, the oracle model's forward), inside the
spec oracle (``spec/``), and in the rest of the harness (observations,
payload, comparison, Hypothesis), measured with cProfile by the file each
function lives in.  Nothing here is asserted; the goals (>= 30 cases/s per
core, harness < 50 %) are read off the output.

    python bench/bench_engine_fuzz.py [--examples N] [--seed S]
"""
from __future__ import annotations

import argparse
import cProfile
import pstats
import time

from asyncspec.statemachine_tests.vllm_engine.engine_campaign import EngineCampaign
from asyncspec.statemachine_tests.vllm_engine.engine_profile import DEFAULT_ENGINE_PROFILE


def _campaign(examples: int, seed: int) -> EngineCampaign:
    return EngineCampaign(seconds=float("inf"), seed=seed, profile=DEFAULT_ENGINE_PROFILE, batch=20,
                          max_batches=max(1, examples // 20))


def _category(filename: str) -> str:
    if "/vllm/" in filename or "/torch/" in filename or "/numpy/" in filename:
        return "vllm"
    if "/engine/vllm/" in filename:  # our oracle model and stubs run inside vLLM's step
        return "vllm"
    if "/spec/" in filename:
        return "spec"
    return "harness"


def shares(stats: pstats.Stats) -> dict[str, float]:
    """Seconds of own time (tottime) per category."""
    out = {"vllm": 0.0, "spec": 0.0, "harness": 0.0}
    for (filename, _, _), (_, _, tottime, _, _) in stats.stats.items():  # type: ignore[attr-defined]
        out[_category(filename)] += tottime
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--examples", type=int, default=400)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    warm = _campaign(20, args.seed + 1)  # imports, the CPU platform's first config inspection
    warm.run()
    plain = _campaign(args.examples, args.seed)
    t0 = time.perf_counter()
    plain.run()
    wall = time.perf_counter() - t0
    loop = wall - plain.targets.build_seconds
    print(f"start-up: {warm.targets.build_seconds:.2f} s for the first campaign's engines (imports done), "
          f"{plain.targets.build_seconds:.2f} s for {len(plain.profile.configs())} engine configurations after that")
    print(f"cases: {plain.stats.examples} in {loop:.2f} s after start-up = {plain.stats.examples / loop:.1f} cases/s "
          f"({plain.stats.steps} engine steps, {1000 * loop / max(1, plain.stats.steps):.2f} ms per step)")

    profiled = _campaign(args.examples // 2, args.seed)
    profiler = cProfile.Profile()
    profiler.enable()
    profiled.run()
    profiler.disable()
    spent = shares(pstats.Stats(profiler))
    total = sum(spent.values())
    print("time shares (cProfile, own time by file): " +
          ", ".join(f"{k} {100 * v / total:.0f}%" for k, v in spent.items()))
    print(f"harness / vLLM = {spent['harness'] / spent['vllm']:.2f}")


if __name__ == "__main__":
    main()
