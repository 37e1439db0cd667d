"""GPU check of the torch engine: the CUDA path's tests plus the async/sync timing, < 5 min.

Run on a CUDA machine: ``python bench/gpu_check.py`` (``--quick`` for a shorter run).
Without CUDA (or with ``--device cpu``) it runs the same checks on the CPU (the fallback the
fast tests run).  It prints one summary line and exits 0 when every check passed:

1. the oracle on fixed and random workloads at D = 1, 2, 3 on the device (token streams
   equal D = 1; wasted forward passes equal the spec's prediction), and the device's D = 1
   tokens equal the CPU engine's;
2. the seeded ``feed_by_row`` bug is caught on the device;
3. the CUDA path is used: a separate copy stream, events, pinned host buffers;
4. the async/sync benchmark at 1, 8 and 64 concurrent requests.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_engine import ratios, run_bench  # noqa: E402

from asyncspec.engine.torch.torch_engine import EngineConfig, Workload, run_workload  # noqa: E402
from asyncspec.engine.torch.model import TinyTransformer  # noqa: E402
from asyncspec.engine.torch.torch_oracle import FUZZ_MODEL, build_workload, check_workload, strategy_for

FIXED = Workload(prompts=((24,), (33, 13, 23)), max_tokens=(2, 5), token_budget=5,
                 max_num_seqs=3, block_size=4, num_blocks=2, stale_mode="drop")


def oracle_checks(model: TinyTransformer, cpu: TinyTransformer, examples: int) -> list[str]:
    """Oracle on the device for ``examples`` workloads; device D=1 tokens == CPU D=1 tokens."""
    problems: list[str] = []
    rng = random.Random(0)
    for i in range(examples):
        w = FIXED if i == 0 else build_workload(rng.randint)
        strategy, depths = strategy_for(i)
        report = check_workload(w, strategy=strategy, depths=depths, model=model)
        problems += [f"example {i} ({strategy}): {p}" for p in report.problems]
        if report.results:
            on_cpu = run_workload(w, EngineConfig(depth=1, strategy=strategy), cpu)
            if on_cpu.outputs != report.results[depths[0]].outputs:
                problems.append(f"example {i}: device tokens differ from the CPU engine's")
    return problems


def bug_check(model: TinyTransformer) -> list[str]:
    """The seeded feed-by-row bug must change tokens on the device too."""
    report = check_workload(FIXED, depths=(1, 2), bug="feed_by_row", model=model, check_spec=False)
    return [] if any("produced" in p for p in report.problems) else ["feed_by_row not caught"]


def cuda_path_check(model: TinyTransformer) -> list[str]:
    """On CUDA: the worker has a compute and a copy stream and hands back pinned buffers."""
    if model.device.type != "cuda":
        return []
    from asyncspec.engine.torch.torch_worker import TorchWorker

    worker = TorchWorker(model, num_blocks=4, block_size=4)
    try:
        stream = worker.stream
        result = stream.submit(lambda: stream.copy_to_host(torch.ones(3, dtype=torch.int64,
                                                                      device=model.device)))
        got = result.result()
        ok = (stream.compute is not None and stream.copy is not None and got.host is not None
              and got.host.is_pinned() and got.copied is not None and got.to_host() == [1, 1, 1])
    finally:
        worker.close()
    return [] if ok else ["CUDA path: streams, events or pinned copies missing"]


def main(argv: Sequence[str] | None = None) -> int:
    """Run the checks; print one summary line; 0 if all passed."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default=None, help="cuda (default when available) or cpu")
    ap.add_argument("--quick", action="store_true", help="fewer examples and steps")
    args = ap.parse_args(argv)
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cpu":
        torch.set_num_threads(1)
    start = time.monotonic()
    model = TinyTransformer(FUZZ_MODEL, device)
    cpu = model if device == "cpu" else TinyTransformer(FUZZ_MODEL, "cpu")
    examples = 4 if args.quick else 30
    problems = oracle_checks(model, cpu, examples) + bug_check(model) + cuda_path_check(model)
    steps = 8 if args.quick else 64
    conc = (1, 8) if args.quick else (1, 8, 64)
    rows = run_bench(concurrency=conc, steps=steps, device=device)
    timing = " ".join(
        f"@{c}:{q['speedup']:.2f}x idle {q['idle_ms_sync']:.2f}->{q['idle_ms_async']:.2f}ms"
        for c, q in ratios(rows).items()
    )
    verdict = "OK" if not problems else "FAIL"
    print(f"gpu_check: {verdict} device={device} examples={examples} "
          f"problems={len(problems)} async/sync {timing} ({time.monotonic() - start:.0f} s)")
    for p in problems[:10]:
        print(f"  {p}", file=sys.stderr)
    return 0 if not problems else 1


if __name__ == "__main__":
    raise SystemExit(main())
