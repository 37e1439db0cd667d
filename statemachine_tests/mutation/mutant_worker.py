"""One vLLM mutant, one fixed-work campaign, in a process of its own.

    python -m asyncspec.statemachine_tests.mutation.mutant_worker --mutant ID --target T \
        --examples N --seed S --json

The overlay (``engine/vllm/overlay.py``) is installed first, before anything
imports vLLM; then the target's campaign runs and one JSON object is printed
(``WorkerResult.to_json``).  ``--mutant none`` runs the unmutated baseline.  On
``vllm-engine`` a clean campaign ends with the ``mrv2-encoder`` stage: this worker
again with ``--stage mrv2-encoder`` in Model Runner V2's environment
(``mrv2_encoder_stage``), its examples counted after the in-process ones.
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

from asyncspec.statemachine_tests.scheduler.profiles import DEFAULT_EXAMPLES as USER_EXAMPLES

TARGETS = ("vllm", "vllm-engine")
DEFAULT_EXAMPLES = {"vllm": USER_EXAMPLES, "vllm-engine": 300}
"""``--examples`` left out: on ``vllm`` the size of the default campaign a user runs (``fuzz --target vllm``:
``profiles.DEFAULT_EXAMPLES``), on ``vllm-engine`` the self-test's own (``engine_campaign.run_for_mutants``)."""


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
    first_divergence: int | None  # the example (1-based, campaign order) that diverged (None: none did)
    seconds: float
    loaded: bool  # the mutated vLLM module was imported by the target
    detail: str

    @property
    def died_at_example(self) -> int | None:
        """The example of the target's campaign at which the mutant died (None: it did not, or crashed
        outside an example)."""
        return self.first_divergence if self.how == "divergence" else None

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "died_at_example": self.died_at_example}


def scheduler_campaign(examples: int, seed: int,
                       unreached: Callable[[], bool] = lambda: False) -> tuple[int, int | None, str]:
    """``--target vllm``: the campaign ``asyncspec fuzz --target vllm --examples N --seed S`` runs (the default
    mix ``all``, shards of 20 in order, ``shards.Plan``), here one shard after another until the first
    divergent example, whose place in the campaign (1-based) is returned.

    It stops once every part of the mix has run a shard if ``unreached()``: the mutated module was not
    imported by any part, so no later shard (the parts again, other seeds) could run the mutant.
    Returns (examples run, the example at which it died or None, the difference's first line).
    """
    from asyncspec.statemachine_tests.scheduler.profiles import ALL_PROFILE
    from asyncspec.statemachine_tests.scheduler.registry import TargetUnavailable, load_target
    from asyncspec.statemachine_tests.scheduler.shards import SHARD, Plan, run_shard, skipped_for

    try:
        load_target("vllm", allow_version=False)
    except TargetUnavailable as exc:
        raise BadInput(f"target vllm is not available: {exc}") from exc
    plan = Plan("vllm", ALL_PROFILE, seed, examples, math.inf, skipped=skipped_for("vllm", ALL_PROFILE))
    run, parts = 0, len(ALL_PROFILE.mix)
    for index, left in plan.shards():
        shard = run_shard("vllm", ALL_PROFILE, seed, index, left, math.inf)
        if shard.sightings:
            example, key = shard.sightings[0]
            run += example + 1
            return run, index * SHARD + example + 1, first_line(shard.firsts.get(key), key)
        run += shard.examples
        if index + 1 >= parts and unreached():
            break
    return run, None, ""


def first_line(found: Any, key: str) -> str:
    """The first difference of a divergent example, as the kill table shows it (else its bucket key)."""
    if found is None or not found.rows or not found.rows[-1].differences:
        return key
    row = found.rows[-1]
    first = row.differences[0]
    return f"event {row.index} '{row.event}': {first.field}: spec={first.expected!r} vllm={first.actual!r}"


def engine_campaign(examples: int, seed: int) -> tuple[int, int | None, str]:
    """``--target vllm-engine``: ``engine_campaign.run_for_mutants`` (the default profile, then spec-decode, pause, streaming, kv-recovery,
    encoder, mamba, dp; ``run`` adds the mrv2-encoder stage in a process of its own)."""
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


MRV2_ENCODER_STAGE = "mrv2-encoder"
MRV2_ENCODER_KILL_EXAMPLES = 100
"""The MRV2 encoder cases the engine target adds last (the default campaign's ``mrv2-encoder`` part)."""


def mrv2_encoder_campaign(examples: int, seed: int) -> tuple[int, int | None, str]:
    """``--stage mrv2-encoder``, in MRV2's environment: ``examples`` cases of the ``mrv2-encoder`` profile."""
    from asyncspec.engine.vllm.mrv2_runner import mrv2_problem

    if (problem := mrv2_problem()) is not None:
        raise BadInput(problem)
    from asyncspec.statemachine_tests.vllm_engine.engine_campaign import run_fixed
    from asyncspec.statemachine_tests.vllm_engine.engine_profile import MRV2_ENCODER_ENGINE_PROFILE as profile

    result = run_fixed(examples, seed, profile.depths, profile)
    first = result["first_divergence_example"] if result["divergences"] else None
    detail = str(result.get("first_divergence") or "")
    return int(result["examples"]), first, f"{detail.splitlines()[0]} (mrv2-encoder profile)" if detail else ""


def mrv2_encoder_stage(mutant_id: str, seed: int) -> WorkerResult | None:
    """The engine target's last stage: this worker again with ``--stage mrv2-encoder`` in MRV2's environment
    (Model Runner V2 needs it before vLLM is imported, ``mrv2_runner.py``), the mutant installed there too;
    None where the private Triton is missing (the stage cannot run here: a mutant only it kills survives)."""
    import subprocess

    from asyncspec.engine.vllm.mrv2_runner import mrv2_environment, triton_dir

    if not (triton_dir() / "triton").is_dir():
        return None
    cmd = [sys.executable, "-m", "asyncspec.statemachine_tests.mutation.mutant_worker", "--mutant", mutant_id,
           "--target", "vllm-engine", "--stage", MRV2_ENCODER_STAGE, "--examples", str(MRV2_ENCODER_KILL_EXAMPLES),
           "--seed", str(seed), "--json"]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=mrv2_environment(dict(os.environ), triton_dir()),
                          check=False)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not lines:
        tail = [line for line in proc.stderr.splitlines() if line.strip()]
        raise BadInput(f"{mutant_id}: the mrv2-encoder stage failed ({tail[-1] if tail else proc.returncode})")
    return WorkerResult(**{k: v for k, v in json.loads(lines[-1]).items() if k != "died_at_example"})


def raised_in_vllm(exc: BaseException) -> bool:
    """Whether the exception's traceback passes through the installed vLLM package."""
    vllm = sys.modules.get("vllm")
    root = os.path.dirname(vllm.__file__) if vllm is not None and vllm.__file__ else ""
    frames = traceback.extract_tb(exc.__traceback__)
    return bool(root) and any(f.filename.startswith(root + os.sep) for f in frames)


def run(mutant_id: str, target: str, examples: int, seed: int, stage: str = "") -> WorkerResult:
    """Install the mutant (unless ``none``), run the campaign (``stage`` ``mrv2-encoder``: that stage only),
    classify the outcome; on ``vllm-engine`` a clean campaign goes on to ``mrv2_encoder_stage``."""
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
        elif stage == MRV2_ENCODER_STAGE:
            count, first, detail = mrv2_encoder_campaign(examples, seed)
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
    loaded = finder.loaded if finder else True
    if target == "vllm-engine" and not stage and not how and (more := mrv2_encoder_stage(mutant_id, seed)):
        how, detail, loaded = more.how, more.detail, loaded or more.loaded
        first = None if more.first_divergence is None else count + more.first_divergence
        count += more.examples
    return WorkerResult(mutant_id, target, bool(how), how, count, first,
                        round(time.monotonic() - start, 2), loaded, detail)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="mutant_worker")
    parser.add_argument("--mutant", required=True)
    parser.add_argument("--target", choices=TARGETS, required=True)
    parser.add_argument("--examples", type=int, default=None, help="default: DEFAULT_EXAMPLES of the target")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--stage", choices=(MRV2_ENCODER_STAGE,), default="",
                        help="vllm-engine's MRV2 stage only (run by the worker itself, in MRV2's environment)")
    args = parser.parse_args(argv)
    try:
        examples = DEFAULT_EXAMPLES[args.target] if args.examples is None else args.examples
        result = run(args.mutant, args.target, examples, args.seed, args.stage)
    except BadInput as exc:
        print(f"mutate-vllm: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(result.to_json()) if args.json else result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
