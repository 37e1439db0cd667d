"""The monitor on vLLM's CPU engine (``EngineCoreDriver``): a seeded workload, run with or without it.

    python -m asyncspec.monitor.selftest --mutant ID --out DIR [--depth D] [--seed S]

runs the workload under a vLLM mutant (the overlay, ``engine/vllm/overlay.py``,
is installed before vLLM is imported) with ``MonitoredAsyncScheduler`` (depth
2) or ``MonitoredScheduler`` (depth 1) and prints one JSON object: the
monitor's counts and its replay files.  ``--mutant none``: unmutated.  Exit 0
with a result, 2 on bad input (one line).

The workload: requests drawn as the ``vllm-engine`` target draws them
(``statemachine_tests/vllm_engine/engine_case.draw_requests``: EOS, stop tokens, length
caps), arriving in waves between engine steps, some aborted between steps and
some inside a step (``aborts_queue``), on a pool small enough to preempt.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import sys
from dataclasses import dataclass, field
from typing import Any

from asyncspec.engine.vllm.engine_config import EngineDriverConfig
from asyncspec.statemachine_tests.vllm_engine.engine_case import CaseShape, draw_requests

SHAPE = CaseShape(max_requests=8, prompt_len=(1, 36), max_tokens=(4, 24), eos_share=0.3, structured_share=0.0)


@dataclass
class WorkloadResult:
    """What the engine returned to its client, and the monitor's stats (None without it)."""

    outputs: dict[str, list[Any]] = field(default_factory=dict)  # req id -> [tokens..., finish reason]
    stats: Any = None
    steps: int = 0


TIGHT_SHAPE = CaseShape(max_requests=8, structured_share=0.0)


def engine_config(depth: int, num_blocks: int = 20, max_num_seqs: int = 6) -> EngineDriverConfig:
    return EngineDriverConfig(depth=depth, num_blocks=num_blocks, max_num_seqs=max_num_seqs,
                              max_num_batched_tokens=16, max_model_len=64)


def tight_engine_config(depth: int) -> EngineDriverConfig:
    """The ``vllm-engine`` target's tight configuration: 8 blocks, prefix caching on."""
    return EngineDriverConfig(depth=depth, block_size=4, num_blocks=8, max_num_seqs=4, max_num_batched_tokens=16,
                              enable_chunked_prefill=True, enable_prefix_caching=True, max_model_len=32)


def monitor_class(depth: int) -> type:
    from asyncspec.engine.vllm.vllm_environment import load_vllm

    load_vllm()  # the CPU/offline environment, before vLLM is imported
    from asyncspec.monitor.monitor_scheduler import MonitoredAsyncScheduler, MonitoredScheduler

    return MonitoredAsyncScheduler if depth > 1 else MonitoredScheduler


def run_workload(driver: Any, seed: int, requests: int = 24, max_steps: int = 2000,
                 shape: CaseShape = SHAPE) -> WorkloadResult:
    """Drive ``driver`` (an ``EngineCoreDriver``) through one seeded workload."""
    rng = random.Random(seed)
    drawn = draw_requests(rng, requests, shape, driver.config.max_model_len)
    pending = [(f"m{seed}.{i}", r) for i, r in enumerate(drawn)]
    result = WorkloadResult()
    while (pending or driver.has_work() or driver.aborts_pending()) and result.steps < max_steps:
        for _ in range(rng.randint(0, 3) if pending else 0):
            rid, r = pending.pop(0)
            driver.add_request(rid, r.prompt, r.max_tokens, r.ignore_eos, r.stop_token_ids)
            result.outputs[rid] = []
            if not pending:
                break
        _maybe_abort(driver, rng, result)
        if driver.has_work() or driver.aborts_pending():
            _record(driver.step(), result)
            result.steps += 1
    result.stats = getattr(driver.scheduler, "monitor", None)
    return result


def _maybe_abort(driver: Any, rng: random.Random, result: WorkloadResult) -> None:
    live = [rid for rid in driver.scheduler.requests]
    if live and rng.random() < 0.08:
        rid = rng.choice(sorted(live))
        if rng.random() < 0.5:
            driver.abort([rid])
        else:
            driver.abort_in_step([rid])


def _record(step: Any, result: WorkloadResult) -> None:
    for phase in step.phases:
        for rid, out in phase.outputs.items():
            got = result.outputs.setdefault(rid, [])
            got.extend(int(t) for t in out.new_token_ids)
            if out.finish_reason is not None:
                got.append(str(out.finish_reason.name))


def run(depth: int, seed: int, monitored: bool, requests: int = 24) -> WorkloadResult:
    """One workload on a fresh CPU engine, with the monitor's class or vLLM's own."""
    from asyncspec.engine.vllm.engine_core_driver import EngineCoreDriver

    driver = EngineCoreDriver(engine_config(depth), scheduler_cls=monitor_class(depth) if monitored else None)
    result = run_workload(driver, seed, requests)
    if monitored:
        monitor = driver.scheduler.monitor
        monitor.flush()
        result.stats = monitor.stats
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="asyncspec.monitor.selftest")
    parser.add_argument("--mutant", default="none")
    parser.add_argument("--out", required=True)
    parser.add_argument("--depth", type=int, choices=(1, 2), default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--seeds", type=int, default=4, help="workloads, seeds SEED.. until a divergence")
    args = parser.parse_args(argv)
    if args.mutant != "none":
        from asyncspec.engine.vllm.vllm_mutants import MUTANTS_BY_ID
        from asyncspec.engine.vllm.overlay import MutantDoesNotApply, install

        if args.mutant not in MUTANTS_BY_ID:
            print(f"unknown mutant {args.mutant!r}: see engine/vllm/vllm_mutants.py", file=sys.stderr)
            return 2
        try:
            install(MUTANTS_BY_ID[args.mutant])
        except MutantDoesNotApply as exc:
            print(str(exc), file=sys.stderr)
            return 2
    os.environ["ASYNCSPEC_MONITOR_DIR"] = args.out
    summary: dict[str, Any] = {"mutant": args.mutant, "depth": args.depth, "workloads": 0}
    for seed in range(args.seed, args.seed + args.seeds):
        stats = run(args.depth, seed, monitored=True).stats
        summary["workloads"] += 1
        summary.update(stats.as_counts(), replay_files=stats.replay_files, summary=stats.summary())
        if stats.divergences:
            break
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
