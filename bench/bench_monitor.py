"""Benchmark: the live monitor's overhead per engine step, as a ratio to the scheduler's own time.

Run: ``python bench/bench_monitor.py [--running 64] [--steps 200] [--check-every N] [--profile]``.

vLLM's production engine on the CPU (``EngineCoreDriver``, async scheduling,
depth 2) with ``MonitoredAsyncScheduler``: ``--running`` requests are added
at once (``ignore_eos``, long outputs, a pool large enough that none is
preempted), so that after their prefills every step decodes all of them.
The monitor times vLLM's own ``schedule()`` + ``update_from_output()`` and its
own hooks (``MonitorStats``); the ratio printed is monitor time / scheduler
time over the steady decode steps (the prefill steps excluded).
``--check-every N`` compares on every Nth scheduler call (the spec is stepped
on every call).  ``--profile``: where the monitor's time goes (cProfile).
Nothing is asserted: these machines are shared and noisy.
"""
from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import sys
from typing import Any


def build(running: int, check_every: int) -> Any:
    os.environ["ASYNCSPEC_MONITOR_CHECK_EVERY"] = str(check_every)
    os.environ.setdefault("ASYNCSPEC_MONITOR_DIR", "/tmp/asyncspec-bench-monitor")
    from asyncspec.engine.vllm.engine_config import EngineDriverConfig
    from asyncspec.engine.vllm.engine_core_driver import EngineCoreDriver
    from asyncspec.monitor.selftest import monitor_class

    config = EngineDriverConfig(depth=2, block_size=16, num_blocks=running * 8, max_num_seqs=running,
                                max_num_batched_tokens=max(512, running * 8), max_model_len=128)
    return EngineCoreDriver(config, scheduler_cls=monitor_class(2))


def measure(running: int, steps: int, check_every: int, profile: bool) -> dict[str, Any]:
    driver = build(running, check_every)
    for i in range(running):
        driver.add_request(f"b{i}", [3 + (i * 7 + k) % 900 for k in range(16)], max_tokens=100, ignore_eos=True)
    monitor = driver.scheduler.monitor
    while len(driver.scheduler.running) < running or any(r.is_prefill_chunk for r in driver.scheduler.running):
        driver.step()  # admission and prefills
    base_sched, base_mon = monitor.stats.scheduler_seconds, monitor.stats.monitor_seconds
    profiler = cProfile.Profile() if profile else None
    if profiler is not None:
        profiler.enable()
    for _ in range(steps):
        if not driver.has_work():
            break
        driver.step()
    if profiler is not None:
        profiler.disable()
        pstats.Stats(profiler, stream=sys.stderr).sort_stats("cumulative").print_stats("monitor|spec|checker", 25)
    sched = monitor.stats.scheduler_seconds - base_sched
    mon = monitor.stats.monitor_seconds - base_mon
    return {"running": running, "steps": steps, "check_every": check_every,
            "scheduler_ms_per_step": 1000 * sched / steps, "monitor_ms_per_step": 1000 * mon / steps,
            "overhead_ratio": mon / sched if sched else None, "divergences": monitor.stats.divergences,
            "checked_steps": monitor.stats.checked_steps}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--running", type=int, default=64)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--check-every", type=int, default=1)
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    if args.running < 1 or args.steps < 1 or args.check_every < 1:
        print("bench_monitor: --running, --steps and --check-every must be >= 1", file=sys.stderr)
        return 2
    result = measure(args.running, args.steps, args.check_every, args.profile)
    if args.json:
        print(json.dumps(result))
    else:
        print(f"{result['running']} running, {result['steps']} decode steps, compare every "
              f"{result['check_every']}: scheduler {result['scheduler_ms_per_step']:.3f} ms/step, monitor "
              f"{result['monitor_ms_per_step']:.3f} ms/step, overhead ratio {result['overhead_ratio']:.3f}, "
              f"divergences {result['divergences']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
