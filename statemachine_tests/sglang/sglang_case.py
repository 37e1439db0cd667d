"""Cases for ``--target sglang``: drawn from (seed, example index) alone, and shrunk.

A case is a few requests (prompts that may share a prefix with an earlier request of the
case, so the radix cache hits), ``max_new_tokens``, an EOS position, an arrival iteration,
perhaps an abort, perhaps the forced-retraction test switch, on one of three engine
configurations: overlap with a roomy pool, overlap under KV pressure (low
``schedule_conservativeness``, small pool and chunks: real retraction), and the
non-overlap loop under the same pressure (the depth-1 control); under pressure requests decode
longer (``max_new_tokens`` up to 30) from shorter prompts, so decoding overruns the admission.  Examples come in blocks of
``BLOCK`` per configuration so each driver is started once per campaign.
"""
from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from dataclasses import replace

from asyncspec.engine.sglang import case as cs

BLOCK = 10
CONFIGS: dict[str, cs.EngineConfig] = {
    "overlap": cs.EngineConfig(overlap=True, max_total_tokens=128, chunked_prefill_size=16),
    "overlap-pressure": cs.EngineConfig(overlap=True, max_total_tokens=64, chunked_prefill_size=8,
                                        schedule_conservativeness=0.05),
    "normal-pressure": cs.EngineConfig(overlap=False, max_total_tokens=64, chunked_prefill_size=8,
                                       schedule_conservativeness=0.05),
}


def config_name(engine: cs.EngineConfig) -> str:
    """The menu name of an engine configuration (``custom`` if it is not on the menu)."""
    return next((k for k, v in CONFIGS.items() if v == engine), "custom")


def draw_case(seed: int, index: int, configs: tuple[str, ...] = tuple(CONFIGS)) -> cs.Case:
    """Example ``index`` of campaign ``seed`` (the same pair always gives the same case)."""
    rng = random.Random(seed * 1_000_003 + index)
    engine = CONFIGS[configs[(index // BLOCK) % len(configs)]]
    pool = engine.max_total_tokens
    requests: list[cs.Request] = []
    pressure = engine.schedule_conservativeness < 1.0  # long decodes overrun an optimistic admission
    for _ in range(rng.randint(2 if pressure else 1, 5)):
        max_new = rng.randint(8 if pressure else 1, 30 if pressure else 12)
        prompt = _prompt(rng, requests, min(12 if pressure else 24, pool // 2 - max_new))
        eos_at = rng.randint(1, max_new) if rng.random() < (0.15 if pressure else 0.4) else 0
        arrive_at = 0 if not requests or rng.random() < (0.85 if pressure else 0.6) else rng.randint(1, 8)
        requests.append(cs.Request(prompt, max_new, eos_at, arrive_at))
    aborts: tuple[cs.Abort, ...] = ()
    if rng.random() < 0.25:
        aborts = (cs.Abort(rng.randrange(len(requests)), rng.randint(1, 12)),)
    return cs.Case(tuple(requests), aborts, engine, test_retract=rng.random() < 0.2)


def _prompt(rng: random.Random, earlier: list[cs.Request], longest: int) -> tuple[int, ...]:
    length = rng.randint(2, max(2, longest))
    fresh = tuple(rng.randrange(10, 500) for _ in range(length))
    if earlier and rng.random() < 0.35:
        shared = rng.choice(earlier).prompt
        keep = rng.randint(1, len(shared))
        return (shared[:keep] + fresh)[:max(length, keep + 1)]
    return fresh


# ---- shrinking ---------------------------------------------------------------------------


def candidates(case: cs.Case) -> Iterator[cs.Case]:
    """Smaller cases, most aggressive first."""
    n = len(case.requests)
    for i in range(n):
        if n > 1:
            yield _without_request(case, i)
    if case.aborts:
        yield replace(case, aborts=())
    if case.test_retract:
        yield replace(case, test_retract=False)
    for i, r in enumerate(case.requests):
        if r.arrive_at:
            yield _with_request(case, i, replace(r, arrive_at=0))
        if r.eos_at:
            yield _with_request(case, i, replace(r, eos_at=0))
        if r.max_new_tokens > 1:
            smaller = max(1, r.max_new_tokens // 2), r.max_new_tokens - 1
            for m in sorted(set(smaller)):
                yield _with_request(case, i, replace(r, max_new_tokens=m, eos_at=min(r.eos_at, m)))
        if len(r.prompt) > 2:
            yield _with_request(case, i, replace(r, prompt=r.prompt[: max(2, len(r.prompt) // 2)]))


def _with_request(case: cs.Case, i: int, r: cs.Request) -> cs.Case:
    return replace(case, requests=case.requests[:i] + (r,) + case.requests[i + 1:])


def _without_request(case: cs.Case, i: int) -> cs.Case:
    requests = case.requests[:i] + case.requests[i + 1:]
    aborts = tuple(cs.Abort(a.req - (a.req > i), a.at) for a in case.aborts if a.req != i)
    return replace(case, requests=requests, aborts=aborts)


def shrink(case: cs.Case, fails: Callable[[cs.Case], bool], budget: int = 80) -> cs.Case:
    """Greedy: take the first smaller case that still fails, until none does or ``budget`` runs."""
    runs = 0
    improved = True
    while improved and runs < budget:
        improved = False
        for smaller in candidates(case):
            runs += 1
            if fails(smaller):
                case, improved = smaller, True
                break
            if runs >= budget:
                break
    return case
