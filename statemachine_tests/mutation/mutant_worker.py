"""One vLLM mutant, one fixed-work campaign, in a process of its own.

    python -m asyncspec.statemachine_tests.mutation.mutant_worker --mutant ID --target T \
        --examples N --seed S --json

The overlay (``engine/vllm/overlay.py``) is installed first, before anything
imports vLLM; then the target's campaign runs and one JSON object is printed
(``WorkerResult.to_json``).  ``--mutant none`` runs the unmutated baseline.
Exit 0 with a result (killed or not), 2 on bad input (unknown mutant, a mutant
that no longer applies, a target that cannot be loaded): one line on stderr.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from asyncspec.engine.vllm.vllm_mutants import MUTANTS_BY_ID
from asyncspec.engine.vllm.overlay import MutantDoesNotApply, MutantFinder, install

from asyncspec.statemachine_tests.scheduler.profiles import (
    BASE_PROFILE, CONNECTOR_PROFILE, DEPTH3_PROFILE, PREFIX_CACHING_PROFILE, Profile,
)
from asyncspec.statemachine_tests.scheduler.fuzz_example import RESET_HEAVY

TARGETS = ("vllm", "vllm-engine")
BATCH = 20  # examples per seeded Hypothesis batch of the scheduler campaign
RESET_PROFILE = Profile(depths=(2, 1), defer_block_free=(False,), resets=(2,), prefix_caching=(True, False))
"""Every example may call ``reset_prefix_cache`` twice, with prefix caching on half the time and
no deferred frees (which would turn resets off): a reset with several requests running, with
cached blocks in the pool, or twice before a step's output (docs/fuzzing.md)."""


SELF_HIT_PROFILE = Profile(depths=(2,), block_sizes=(4,), num_blocks=(4, 6, 8), prefix_caching=(True,),
                           defer_block_free=(False,), stale_modes=("drop",), resets=(0,))
"""Prefix caching on, small pools, drop-mode stale output: a request preempted by KV pressure while
a step is in flight drops that step's output, so the blocks it cached when scheduled still hold
every token it knows; re-admitted before they are evicted, its whole sequence is in the prefix
cache when that sequence fills whole blocks (the full hit ``KVCacheManager.get_computed_blocks``
caps at ``num_tokens - 1``).  The spec's block hashes are per request (``spec.state.BlockHash``),
so a request can only hit its own blocks: this is how a campaign reaches a full hit."""
RESET_HEAVY_PROFILE = Profile(block_sizes=(4,), num_blocks=(12, 16), token_budgets=(64, 32), max_num_seqs=(4,),
                              defer_block_free=(False,), resets=(RESET_HEAVY + 1,), prefix_caching=(True, False),
                              loops=("free", "exact"))
"""Reset-heavy (``run.reset_heavy``): every request arrives first, the choices draw up to four
``reset_prefix_cache`` calls from a fifth of their values, and the drain resets after each
``schedule()`` while resets are left (a reset storm); short prompts, budgets and
``max_num_seqs`` that let several requests run at once, the free loop drawn first.  A reset
with two requests running, and (free loop) two resets between a step and its output."""


class BadInput(Exception):
    """One line for stderr; exit 2."""


@dataclass
class WorkerResult:
    """What one mutant did under one target's fixed campaign."""

    mutant: str
    target: str
    killed: bool
    how: str  # "divergence", "crash" or "" (survived)
    examples: int  # examples run (shrinking not counted)
    first_divergence: int | None  # at most this many examples found it (None: not found)
    seconds: float
    loaded: bool  # the mutated vLLM module was imported by the target
    detail: str

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


EXTRA_SEED = 5_000  # the extra stream's batch seeds start here (after S*10000)


STREAMS = 3  # the self-test's streams, interleaved batch by batch (self_test_batch)
TARGETED_SEED = 7_500  # the targeted stream's batch seeds start here (after S*10000)
TARGETED = (SELF_HIT_PROFILE, RESET_HEAVY_PROFILE, DEPTH3_PROFILE)


def self_test_batch(position: int, seed: int) -> tuple[Profile, int]:
    """The profile and Hypothesis seed of batch ``position`` of the scheduler self-test.

    Three streams, interleaved batch by batch; ``k = position // 3``:

    * position ``3k``: the base profile's batch ``k`` (``base``, the default campaign's profile until
      it became the mix ``all``), seed ``S*10000 + k`` (the campaign the self-test always ran);
    * ``3k + 1``: extra batch ``k``, seed ``S*10000 + 5000 + k``, from a cycle of four:
      ``prefix-caching`` (prefix caching drawn on or off), ``RESET_PROFILE``, ``prefix-caching``
      again, ``connector`` (a KV connector's scheduler half);
    * ``3k + 2``: targeted batch ``k``, seed ``S*10000 + 7500 + k``, from a cycle of three:
      ``SELF_HIT_PROFILE`` (a whole sequence in the prefix cache), ``RESET_HEAVY_PROFILE``
      (resets with several requests running), ``depth3`` (pass 2's stale-resume skip).
    """
    k, stream = divmod(position, STREAMS)
    if stream == 0:
        return BASE_PROFILE, seed * 10_000 + k
    if stream == 1:
        extra = (PREFIX_CACHING_PROFILE, RESET_PROFILE, PREFIX_CACHING_PROFILE, CONNECTOR_PROFILE)[k % 4]
        return extra, seed * 10_000 + EXTRA_SEED + k
    return TARGETED[k % len(TARGETED)], seed * 10_000 + TARGETED_SEED + k


def scheduler_campaign(examples: int, seed: int,
                       unreached: Callable[[], bool] = lambda: False) -> tuple[int, int | None, str]:
    """``--target vllm``: seeded batches of 20 examples until a divergence, ``examples`` from the
    base profile and as many from each of the other two streams (``self_test_batch``).

    It stops after the first batch when ``unreached()``: the mutated module was not imported,
    and this target imports the same vLLM modules in every example, so no later example
    could run the mutant.
    Returns (examples run, examples by which the divergence was found, its first line).
    """
    from asyncspec.statemachine_tests.scheduler.campaign import Campaign
    from asyncspec.statemachine_tests.scheduler.registry import TargetUnavailable, load_target

    try:
        load_target("vllm", allow_version=False)
    except TargetUnavailable as exc:
        raise BadInput(f"target vllm is not available: {exc}") from exc
    run = 0
    for position in range(STREAMS * math.ceil(examples / BATCH)):
        profile, batch_seed = self_test_batch(position, seed)
        c = Campaign("vllm", seconds=3600, seed=batch_seed, profile=profile, batch=BATCH, max_batches=1)
        found = c.run()
        run += c.stats.examples
        if found is not None:
            row = found.rows[-1]
            first = row.differences[0]
            return run, BATCH * (position + 1), (f"event {row.index} '{row.event}': {first.field}: "
                                                 f"spec={first.expected!r} vllm={first.actual!r}")
        if unreached():
            break
    return run, None, ""


def engine_campaign(examples: int, seed: int) -> tuple[int, int | None, str]:
    """``--target vllm-engine``: ``engine_campaign.run_for_mutants`` (the default profile, then spec-decode)."""
    try:
        from asyncspec.statemachine_tests.vllm_engine import engine_campaign as ec  # type: ignore[attr-defined,unused-ignore]
    except ImportError as exc:
        raise BadInput(f"target vllm-engine is not available: {exc}") from exc
    result: dict[str, Any] = ec.run_for_mutants(examples, seed)
    run = int(result["examples"])
    if int(result["divergences"]) == 0:
        return run, None, ""
    first = result.get("first_divergence_example", run)
    detail = str(result.get("first_divergence", result.get("divergence", "")))
    return run, int(first) if first is not None else run, detail.splitlines()[0] if detail else ""


def raised_in_vllm(exc: BaseException) -> bool:
    """Whether the exception's traceback passes through the installed vLLM package."""
    vllm = sys.modules.get("vllm")
    root = os.path.dirname(vllm.__file__) if vllm is not None and vllm.__file__ else ""
    frames = traceback.extract_tb(exc.__traceback__)
    return bool(root) and any(f.filename.startswith(root + os.sep) for f in frames)


def run(mutant_id: str, target: str, examples: int, seed: int) -> WorkerResult:
    """Install the mutant (unless ``none``), run the campaign, classify the outcome."""
    finder: MutantFinder | None = None
    if mutant_id != "none":
        if mutant_id not in MUTANTS_BY_ID:
            raise BadInput(f"unknown mutant {mutant_id!r} (asyncspec mutate-vllm --list)")
        try:
            finder = install(MUTANTS_BY_ID[mutant_id])
        except MutantDoesNotApply as exc:
            raise BadInput(str(exc)) from exc
    start = time.monotonic()
    how, first, detail, count = "", None, "", 0
    try:
        if target == "vllm":
            count, first, detail = scheduler_campaign(examples, seed,
                                                      lambda: finder is not None and not finder.loaded)
        else:
            count, first, detail = engine_campaign(examples, seed)
        how = "divergence" if first is not None else ""
    except BadInput:
        raise
    except Exception as exc:  # noqa: BLE001 - vLLM failing under a mutant is a kill; our own failure is not
        text = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
        if not raised_in_vllm(exc):
            raise BadInput(f"{mutant_id} under {target}: the campaign failed outside vLLM ({text})") from exc
        how, detail = "crash", text
    return WorkerResult(mutant_id, target, bool(how), how, count, first,
                        round(time.monotonic() - start, 2), finder.loaded if finder else True, detail)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="mutant_worker")
    parser.add_argument("--mutant", required=True)
    parser.add_argument("--target", choices=TARGETS, required=True)
    parser.add_argument("--examples", type=int, default=300)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    try:
        result = run(args.mutant, args.target, args.examples, args.seed)
    except BadInput as exc:
        print(f"mutate-vllm: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(result.to_json()) if args.json else result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
