"""Benchmark: reference engine actions per second vs the spec's, on the same workload.

Run: ``python bench/bench_reference.py [--requests 64] [--seed 0]``.  One
workload (up to 2,000-token prompts, block size 16, D = 2, a pool tight enough
to preempt) is run to completion three times in this process: by the
reference alone, by the spec alone (``spec.engine.apply`` on the same action
sequence), and in lockstep with the abstraction check (what the Hypothesis
machine pays).  Prints actions/s for each and the reference/spec ratio.
Nothing is asserted: these machines are shared and noisy.
"""
from __future__ import annotations

import argparse
import random
import time

from asyncspec.reference.abstraction import abstract
from asyncspec.reference.reference_harness import ReferenceHarness, spec_config
from asyncspec.spec import engine
from asyncspec.spec.config import SpecConfig
from asyncspec.spec.engine import Action
from asyncspec.spec.state import initial_state


def workload(num_requests: int, seed: int, max_prompt: int = 2000) -> tuple[SpecConfig, tuple[int, ...]]:
    """A seeded workload and its EOS positions."""
    rnd = random.Random(seed)
    requests = tuple((rnd.randint(1, max_prompt), rnd.randint(1, 64)) for _ in range(num_requests))
    eos = tuple(rnd.choice([0, rnd.randint(1, m)]) for _, m in requests)
    need = max(-(-(p + m) // 16) for p, m in requests)
    cfg = spec_config(name="bench", requests=requests, block_size=16, num_blocks=need * 3,
                      token_budget=2048, max_num_seqs=64, batch_queue_depth=2)
    return cfg, eos


def run_reference(cfg: SpecConfig, eos: tuple[int, ...]) -> tuple[list[Action], float]:
    """The reference alone: the actions it ran and the seconds it took."""
    h = ReferenceHarness.from_spec(cfg, eos)
    actions: list[Action] = []
    t0 = time.perf_counter()
    while (a := h.engine_action()) is not None:
        h.apply(a)
        actions.append(a)
    return actions, time.perf_counter() - t0


def run_spec(cfg: SpecConfig, eos: tuple[int, ...], actions: list[Action]) -> float:
    """The spec alone on the same actions."""
    s = initial_state(cfg, eos)
    t0 = time.perf_counter()
    for a in actions:
        s, _ = engine.apply(cfg, s, a)
    return time.perf_counter() - t0


def run_lockstep(cfg: SpecConfig, eos: tuple[int, ...], actions: list[Action]) -> float:
    """Both, with the abstraction compared after every action."""
    h = ReferenceHarness.from_spec(cfg, eos)
    s = initial_state(cfg, eos)
    t0 = time.perf_counter()
    for a in actions:
        h.apply(a)
        s, _ = engine.apply(cfg, s, a)
        assert abstract(h) == s
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--requests", type=int, default=64)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    for label, max_prompt in (("prefill-heavy (prompts <= 2000)", 2000), ("decode-heavy (prompts <= 100)", 100)):
        cfg, eos = workload(args.requests, args.seed, max_prompt)
        actions, t_ref = run_reference(cfg, eos)
        t_spec = run_spec(cfg, eos, actions)
        t_lock = run_lockstep(cfg, eos, actions)
        n = len(actions)
        print(f"{label}: {args.requests} requests, {sum(p for p, _ in cfg.requests)} prompt tokens, "
              f"{cfg.num_blocks} blocks of 16, D=2; {n} engine actions")
        print(f"  {'reference':10s} {n / t_ref:12,.0f} actions/s")
        print(f"  {'spec':10s} {n / t_spec:12,.0f} actions/s")
        print(f"  {'lockstep':10s} {n / t_lock:12,.0f} actions/s (reference + spec + abstraction check)")
        print(f"  reference / spec speed: {t_spec / t_ref:.1f}x")


if __name__ == "__main__":
    main()
