"""Benchmark: steps per second and device idle time of the torch engine, async vs sync.

Run: ``python bench/bench_engine.py [--steps 64] [--device cpu|cuda] [--json]``.

For 1, 8 and 64 concurrent requests (8-token prompts, pure decode to ``--steps`` output
tokens: the model's EOS is biased away), the engine runs synchronously (D = 1) and with
async scheduling (D = 2), and reports forward passes per second of wall time and the time
the "device" sat idle between two steps (CPU: the device thread; CUDA: events on the compute
stream).  The ratios compare the two modes measured in the same run.  Nothing is asserted:
the machines are shared and noisy.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass

import torch

from asyncspec.engine.torch.torch_engine import EngineConfig, SchedulerKind, Workload, run_workload
from asyncspec.engine.torch.model import TinyTransformer
from asyncspec.engine.torch.weights import TinyConfig

#: The benchmark model: the default model, EOS never wins (steady decode).
BENCH_MODEL = TinyConfig(eos_logit_bias=-1e4)
PROMPT_LEN = 8


@dataclass(frozen=True)
class BenchRow:
    """One measured run."""

    concurrency: int
    depth: int
    forward_passes: int
    wall_s: float
    steps_per_s: float
    device_busy_s: float
    device_idle_s: float

    @property
    def idle_ms_per_step(self) -> float:
        """Mean device idle time between two steps, in milliseconds."""
        return 1000.0 * self.device_idle_s / max(self.forward_passes - 1, 1)


def bench_workload(concurrency: int, steps: int) -> Workload:
    """``concurrency`` requests arriving together, room for all of them, no preemption."""
    prompts = tuple(
        tuple(2 + (i * 7 + j) % 62 for j in range(PROMPT_LEN)) for i in range(concurrency)
    )
    block_size = 16
    blocks_each = -(-(PROMPT_LEN + steps) // block_size)
    return Workload(
        prompts=prompts,
        max_tokens=(steps,) * concurrency,
        token_budget=max(PROMPT_LEN * concurrency, 64),
        max_num_seqs=concurrency,
        block_size=block_size,
        num_blocks=blocks_each * concurrency,
        enable_prefix_caching=False,
    )


def measure(
    model: TinyTransformer, concurrency: int, depth: int, steps: int, scheduler: SchedulerKind
) -> BenchRow:
    """Run one workload at one depth."""
    result = run_workload(
        bench_workload(concurrency, steps),
        EngineConfig(depth=depth, scheduler=scheduler),
        model,
    )
    return BenchRow(
        concurrency, depth, result.forward_passes, result.wall_s, result.steps_per_s,
        result.device_busy_s, result.device_idle_s,
    )


def run_bench(
    concurrency: Sequence[int] = (1, 8, 64),
    steps: int = 64,
    device: str = "cpu",
    depths: Sequence[int] = (1, 2),
    scheduler: SchedulerKind = "reference",
) -> list[BenchRow]:
    """Measure every (concurrency, depth) pair after one warm-up run."""
    model = TinyTransformer(BENCH_MODEL, device)
    measure(model, 2, 1, 4, scheduler)  # warm-up (allocator, kernels)
    return [measure(model, c, d, steps, scheduler) for c in concurrency for d in depths]


def ratios(rows: Sequence[BenchRow]) -> dict[int, dict[str, float]]:
    """Per concurrency: async/sync steps per second and idle time per step (D=2 vs D=1)."""
    out: dict[int, dict[str, float]] = {}
    by = {(r.concurrency, r.depth): r for r in rows}
    for c in sorted({r.concurrency for r in rows}):
        sync, asyn = by.get((c, 1)), by.get((c, 2))
        if sync is None or asyn is None:
            continue
        out[c] = {
            "speedup": asyn.steps_per_s / sync.steps_per_s if sync.steps_per_s else 0.0,
            "idle_ms_sync": sync.idle_ms_per_step,
            "idle_ms_async": asyn.idle_ms_per_step,
        }
    return out


def print_table(rows: Sequence[BenchRow], device: str) -> None:
    """The human-readable report."""
    print(f"torch engine on {device}: forward passes per second and device idle time")
    print(f"{'reqs':>5s} {'D':>2s} {'steps':>6s} {'wall s':>8s} {'steps/s':>9s} "
          f"{'busy s':>8s} {'idle s':>8s} {'idle ms/step':>13s}")
    for r in rows:
        print(f"{r.concurrency:5d} {r.depth:2d} {r.forward_passes:6d} {r.wall_s:8.3f} "
              f"{r.steps_per_s:9.1f} {r.device_busy_s:8.3f} {r.device_idle_s:8.3f} "
              f"{r.idle_ms_per_step:13.3f}")
    for c, q in ratios(rows).items():
        print(f"{c:5d} requests: async/sync steps/s = {q['speedup']:.2f}x, idle per step "
              f"{q['idle_ms_sync']:.3f} ms (sync) -> {q['idle_ms_async']:.3f} ms (async)")


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=64, help="output tokens per request")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--threads", type=int, default=1, help="torch intra-op threads (CPU)")
    ap.add_argument("--scheduler", default="reference", choices=("reference", "spec"))
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    rows = run_bench(steps=args.steps, device=args.device, scheduler=args.scheduler)
    if args.json:
        print(json.dumps({"device": args.device, "rows": [asdict(r) for r in rows],
                          "ratios": ratios(rows)}))
    else:
        print_table(rows, args.device)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
