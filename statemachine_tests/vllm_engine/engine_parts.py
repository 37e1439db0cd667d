"""The default campaign of ``asyncspec fuzz --target vllm-engine``: named parts, each a fixed amount of work.

``asyncspec fuzz --target vllm-engine`` with neither ``--examples``, ``--seconds``,
``--depth``, ``--runner`` nor ``--profile`` (or ``--profile all``) runs every part of
``ENGINE_PARTS`` in order, each ``examples`` cases from the campaign seed, and prints
one summary whose ``parts`` says what each part ran and found:

* ``v1`` — the V1 runner at depths 1, 2 and 3 (``DEFAULT_ENGINE_PROFILE``);
* ``structured+spec-decode`` — grammars and n-gram drafts in the same engine
  (``STRUCTURED_SPEC_ENGINE_PROFILE``), preemptions, resets and aborts landing
  while both are in flight (``combo_coverage.py``);
* ``pause`` — ``EngineCore.pause_scheduler`` (abort, keep; ``clear_cache`` drawn) and
  ``resume_scheduler`` with steps in the batch queue (``PAUSE_ENGINE_PROFILE``);
* ``streaming`` — streaming-input sessions whose later inputs and ends come between steps
  (``STREAMING_ENGINE_PROFILE``): each turn's prompt reaches the runner;
* ``mrv2-pp2`` — Model Runner V2 at depth 3 with pipeline parallelism 2's decode
  stagger (``MRV2_ENGINE_PROFILE``).  MRV2 needs its environment before vLLM is
  imported (``engine/vllm/mrv2_runner.py``), so this part is ``asyncspec fuzz
  --target vllm-engine --runner mrv2 --depth 3`` in a process of its own (which runs
  itself again in that environment, ``cli/mrv2_reexec.py``), started first so it
  runs beside the V1 parts; its ``--json`` is merged in;
* ``sync+mrv2+spec-decode`` — the synchronous scheduler (depth 1) with MRV2 and the GPU
  n-gram drafter, drafts through ``EngineCore.post_step``: ``--runner mrv2 --profile
  spec-decode`` in a process of its own as above.  Its finalize kernel is a stand-in
  (``mrv2_stubs.NgramFinalizeKernel``: the interpreter refuses vLLM's);
* ``sync-pp2`` — pipeline parallelism 2 without async scheduling (``SYNC_PP_ENGINE_PROFILE``);
* ``kv-recovery`` — KV-load failure recovery with the toy connector's both halves
  (``KV_RECOVERY_ENGINE_PROFILE``): loads reported done, failed or with invalid blocks from
  block j on, the valid prefix kept and the rest recomputed (or the request failed);
* ``encoder`` — requests with images (``ENCODER_ENGINE_PROFILE``): the scheduler's encoder inputs and
  encoder cache manager, the runner's encoder path over a stand-in encoder whose embeddings name
  their item and index (``engine/vllm/oracle_encoder.py``), so what reached each placeholder shows
  in the sampled tokens;
* ``mrv2-encoder`` — the same requests with images over Model Runner V2 (``MRV2_ENCODER_ENGINE_PROFILE``,
  depths 2 and 1): the scheduler's ``encoder_input_updates`` (sent to MRV2 only) drop and re-send payloads in
  MRV2's ``EncoderCache`` (compared with the spec's ``encoder.payload_updates``: ``encoder.updates``,
  ``encoder.held``), its ``EncoderRunner`` encodes and gathers over the same stand-in encoder:
  ``--runner mrv2 --profile encoder`` in a process of its own as ``mrv2-pp2``;
* ``mamba`` — a Mamba state group beside attention in ``mamba_cache_mode`` ``none`` (``MAMBA_ENGINE_PROFILE``):
  the runner reports a ``MambaSpec`` layer, vLLM's hybrid KV manager gives each request one state block of
  256 tokens from the shared pool, compared per request with the spec's (``spec/mamba.py``), and the
  oracle model carries each request's state through the runner's second block table
  (``mamba_coverage.py``); ``align`` stops at the runner on a CPU (docs/fuzzing.md);
* ``dp`` — data parallelism's waves (``dp_part.py``): vLLM's own ``DPEngineCoreProc.run_busy_loop`` on two
  or three ranks, one thread each, every iteration against the DP spec (``spec/dp.py``): dummy batches,
  the sync at step 1 and every ``dp_sync_interval``, wave ends, ``START_DP_WAVE`` and ``add_request``
  waves; its scheduler, model and all-reduce are stand-ins (``engine/vllm/dp_driver.py``).
* ``logprobs`` — logprobs and prompt logprobs (``LOGPROBS_ENGINE_PROFILE``, depths 2, 3 and 1): about half
  the requests ask for them and so skip the prefix cache (the spec's ``skip_reading``), every row vLLM returns
  is held to the oracle model's one-hot logits, and the prompt's come once, with the first output
  (``logprobs_check.py``); stale outputs are delivered (finding V12: a dropped one loses them).

A part whose surfaces this vLLM lacks is skipped as in any engine campaign
(``skipped_parts``, exit 3); so is an MRV2 part where its process cannot start
(no private Triton: its one line).  A part of ``CPU_LIMITS`` (none today) would be a
fact of the pinned release on any CPU, not of this machine: reported in ``parts`` and
on stderr, it leaves the run complete.
"""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from rich.console import Console

from asyncspec.checker import interrupt
from asyncspec.checker.progress import ProgressLine
from asyncspec.checker.schema import JSON_SCHEMA_VERSION

from asyncspec.statemachine_tests.core.buckets import DEFAULT_MAX_DIVERGENCES, Bucket, replay_path
from asyncspec.statemachine_tests.core.fuzz_end import finish, fixed_work, result_word, saved
from asyncspec.statemachine_tests.core.report import WIDTH, print_buckets, print_coverage
from asyncspec.statemachine_tests.core.skipped_parts import SkippedPart, engine_capabilities, vllm_json
from asyncspec.statemachine_tests.vllm_engine.engine_campaign import EngineCampaign
from asyncspec.statemachine_tests.vllm_engine.engine_fuzz import (
    TARGET, engine_skipped, first_bucket, save_engine_replay, skipped_engine_parts, usage_error,
    check_engine_available,
)
from asyncspec.statemachine_tests.vllm_engine.engine_profile import (
    DEFAULT_ENGINE_PROFILE, ENCODER_ENGINE_PROFILE, KV_RECOVERY_ENGINE_PROFILE, LOGPROBS_ENGINE_PROFILE, MAMBA_ENGINE_PROFILE, MRV2_ENCODER_ENGINE_PROFILE, MRV2_ENGINE_PROFILE, MRV2_SPEC_DECODE_ENGINE_PROFILE, PAUSE_ENGINE_PROFILE, STREAMING_ENGINE_PROFILE,
    STRUCTURED_SPEC_ENGINE_PROFILE, SYNC_PP_ENGINE_PROFILE, EngineProfile,
)
from asyncspec.statemachine_tests.vllm_engine.engine_run import EngineRunResult
from asyncspec.statemachine_tests.core.replay_file import out_dir_problem

BATCH = 20  # cases per seeded Hypothesis batch, as in every engine campaign


@dataclass(frozen=True)
class EnginePart:
    """One part of the default campaign: a profile, its fixed work, the runner's process."""

    name: str
    profile: EngineProfile
    examples: int
    runner: str = "v1"  # "mrv2": a process of its own in Model Runner V2's environment; "dp": dp_part.py


SYNC_MRV2_DRAFTS = "sync+mrv2+spec-decode"
MRV2_ENCODER = "mrv2-encoder"
ENGINE_PARTS = (
    EnginePart("v1", DEFAULT_ENGINE_PROFILE, 600),
    EnginePart("structured+spec-decode", STRUCTURED_SPEC_ENGINE_PROFILE, 200),
    EnginePart("pause", PAUSE_ENGINE_PROFILE, 300),
    EnginePart("streaming", STREAMING_ENGINE_PROFILE, 200),
    EnginePart("mrv2-pp2", replace(MRV2_ENGINE_PROFILE, depths=(3,)), 20, runner="mrv2"),
    EnginePart(SYNC_MRV2_DRAFTS, MRV2_SPEC_DECODE_ENGINE_PROFILE, 40, runner="mrv2"),
    EnginePart("sync-pp2", SYNC_PP_ENGINE_PROFILE, 100),
    EnginePart("kv-recovery", KV_RECOVERY_ENGINE_PROFILE, 100),
    EnginePart("encoder", ENCODER_ENGINE_PROFILE, 100),
    EnginePart(MRV2_ENCODER, MRV2_ENCODER_ENGINE_PROFILE, 100, runner="mrv2"),
    EnginePart("mamba", MAMBA_ENGINE_PROFILE, 1000),
    EnginePart("dp", DEFAULT_ENGINE_PROFILE, 300, runner="dp"),  # its own cases: the profile is not read
    EnginePart("logprobs", LOGPROBS_ENGINE_PROFILE, 300),
)
"""The default campaign, in order (``fuzz --help`` lists the names)."""
CPU_LIMITS: dict[str, str] = {}
"""Parts vLLM 0.33.0 cannot run on a CPU: part -> the one line of a real attempt (docs/fuzzing.md)."""
ENGINE_PART_NAMES = tuple(p.name for p in ENGINE_PARTS)


@dataclass
class PartResult:
    """What one part ran and found (``parts`` of ``--json``), and what the merged summary adds up."""

    name: str
    runner: str
    examples: int = 0
    skipped: str | None = None  # one line: the part did not run
    partial: bool = False  # skipped here (a surface, Triton, an interrupt), not for a CPU limit
    buckets: list[dict[str, Any]] = field(default_factory=list)
    coverage: dict[str, int] = field(default_factory=dict)
    zero_coverage: list[str] = field(default_factory=list)
    summary: dict[str, Any] = field(default_factory=dict)  # the part's own --json (timing, depths, ...)
    shown: list[Bucket] = field(default_factory=list)  # in-process buckets, for the text report

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "runner": self.runner, "examples": self.examples,
                "divergences": sum(int(b.get("count", 1)) for b in self.buckets), "skipped": self.skipped,
                "zero_coverage": self.zero_coverage}


def run_v1_part(part: EnginePart, seed: int, out_dir: Path, max_divergences: int, stop_at_first: bool) -> PartResult:
    """An in-process part: a fixed-work ``EngineCampaign`` of ``part.examples`` cases, its buckets saved."""
    skipped = skipped_engine_parts(part.profile)
    campaign = EngineCampaign(seconds=math.inf, seed=seed, profile=part.profile, batch=BATCH,
                              max_batches=-(-part.examples // BATCH), max_examples=part.examples,
                              keep_going=not stop_at_first, max_divergences=max_divergences, skipped=dict(skipped))
    found = campaign.run()
    buckets = campaign.shrink_buckets() if found is None else [first_bucket(campaign, found)]
    for number, bucket in enumerate(buckets, 1):
        representative = bucket.representative
        if isinstance(representative, EngineRunResult):
            path = replay_path(out_dir / part.name.replace("+", "-"), TARGET, seed, number)
            if saved(lambda: save_engine_replay(representative, path)):
                bucket.replay_file = path
    coverage = campaign.coverage()
    missing = engine_skipped(campaign)
    summary = {"skipped_parts": [p.to_json() for p in missing], "depths": sorted(campaign.stats.depths),
               "runner_class": campaign.targets.runner_class(), "explained": dict(campaign.stats.explained),
               "timing": {"engine_build_seconds": campaign.targets.build_seconds,
                          "engine_events": campaign.stats.engine_events, "engine_steps": campaign.stats.steps}}
    reason = "; ".join(p.line() for p in missing) or None
    return PartResult(part.name, part.runner, campaign.stats.examples, reason, reason is not None or
                      interrupt.requested(), [b.to_json() for b in buckets], coverage,
                      [k for k in part.profile.categories() if coverage.get(k, 0) == 0], summary, buckets)


def run_dp_part(part: EnginePart, seed: int, out_dir: Path, max_divergences: int, stop_at_first: bool) -> PartResult:
    """The ``dp`` part (``dp_part.py``): ``part.examples`` cases, each rank's iterations against the DP spec."""
    from asyncspec.engine.vllm.surfaces import ENGINE_DP_WAVES
    from asyncspec.statemachine_tests.core.skipped_parts import first_missing
    from asyncspec.statemachine_tests.vllm_engine.dp_part import DP_COVERAGE, run_dp_cases

    missing = first_missing((ENGINE_DP_WAVES,))
    if missing is not None:  # a release without the surfaces: skipped here, as any part
        return PartResult(part.name, part.runner, skipped=missing, partial=True)
    run, seconds = run_dp_cases(seed, part.examples, out_dir / part.name, max_divergences, stop_at_first)
    coverage = dict(run.coverage)
    summary = {"skipped_parts": [], "depths": [], "runner_class": "", "explained": {},
               "timing": {"engine_build_seconds": 0.0, "engine_events": 0, "engine_steps": run.iterations,
                          "seconds": round(seconds, 2)}}
    for line in run.messages:
        print(f"asyncspec: {line}", file=sys.stderr)
    return PartResult(part.name, part.runner, run.ran, None, interrupt.requested(), list(run.buckets.values()),
                      coverage, [k for k in DP_COVERAGE if coverage.get(k, 0) == 0], summary)


def start_mrv2_part(part: EnginePart, seed: int, out_dir: Path, max_divergences: int, stop_at_first: bool,
                    allow_version: bool) -> subprocess.Popen[str]:
    """``asyncspec fuzz --target vllm-engine --runner mrv2 [--profile spec-decode|encoder] [--depth D]`` for
    ``part`` (``--depth`` when the part runs one depth), started now."""
    depth = ["--depth", str(part.profile.depths[0])] if len(part.profile.depths) == 1 else []
    profile = "spec-decode" if any(part.profile.spec_tokens) else "encoder" if part.profile.images else None
    chosen = ["--profile", profile] if profile else []
    cmd = [sys.executable, "-m", "asyncspec", "fuzz", "--target", TARGET, "--runner", "mrv2", *chosen, *depth,
           "--examples", str(part.examples), "--seed", str(seed), "--json", "--out-dir", str(out_dir / part.name),
           "--max-divergences", str(max_divergences), *(["--stop-at-first"] if stop_at_first else []),
           *(["--allow-version"] if allow_version else [])]
    from asyncspec.statemachine_tests.core.vllm_coverage import child_environment

    env = dict(os.environ, VLLM_LOGGING_STREAM="ext://sys.stderr", **child_environment())
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def finish_mrv2_part(part: EnginePart, proc: subprocess.Popen[str]) -> PartResult:
    """The MRV2 process's ``--json`` as a part; its one line when it ran nothing (exit 2: no Triton)."""
    out, err = proc.communicate()
    lines = [line for line in out.splitlines() if line.startswith("{")]
    if proc.returncode not in (0, 1, 3) or not lines:
        tail = [line for line in err.splitlines() if line.strip()]
        reason = (tail[-1] if tail else f"exited {proc.returncode}").removeprefix("asyncspec: error: ")
        return PartResult(part.name, part.runner, skipped=reason, partial=True)
    data: dict[str, Any] = json.loads(lines[-1])
    if proc.returncode == 1:  # its tables went to its stderr: pass them on
        sys.stderr.write(err)
    missing = [SkippedPart(p["part"], p["reason"], p["examples"]).line() for p in data["skipped_parts"]]
    return PartResult(part.name, part.runner, int(data["examples"]), "; ".join(missing) or None,
                      bool(data["partial"]), list(data["buckets"]), dict(data["coverage"]),
                      list(data["zero_coverage"]), data)


def cpu_limited(part: EnginePart) -> PartResult:
    """A part this release cannot run on a CPU: its one line (``CPU_LIMITS``), nothing run."""
    return PartResult(part.name, part.runner, skipped=CPU_LIMITS[part.name])


def run_parts(seed: int, out_dir: Path, max_divergences: int, stop_at_first: bool, allow_version: bool,
              parts: tuple[EnginePart, ...] = ENGINE_PARTS) -> list[PartResult]:
    """Every part, in order: the MRV2 processes started first, the in-process parts meanwhile."""
    children = {p.name: start_mrv2_part(p, seed, out_dir, max_divergences, stop_at_first, allow_version)
                for p in parts if p.runner == "mrv2" and p.name not in CPU_LIMITS}
    results: dict[str, PartResult] = {}
    for p in parts:
        if p.name in CPU_LIMITS:
            results[p.name] = cpu_limited(p)
        elif p.runner == "dp":
            results[p.name] = run_dp_part(p, seed, out_dir, max_divergences, stop_at_first)
        elif p.runner == "v1":
            results[p.name] = (run_v1_part(p, seed, out_dir, max_divergences, stop_at_first)
                               if not interrupt.requested() else PartResult(p.name, p.runner, skipped="interrupted",
                                                                            partial=True))
    for p in parts:
        if p.name in children:
            results[p.name] = finish_mrv2_part(p, children[p.name])
    return [results[p.name] for p in parts]


def merged_coverage(results: list[PartResult]) -> dict[str, int]:
    """Every part's categories, summed over the parts that report them."""
    out: dict[str, int] = {}
    for r in results:
        for name, n in r.coverage.items():
            out[name] = out.get(name, 0) + n
    return out


def parts_summary(results: list[PartResult], seed: int, elapsed: float, interrupted: bool) -> dict[str, Any]:
    """The ``--json`` of the default campaign: the engine target's contract, added up over the parts,
    with ``parts`` (each part's name, runner, examples, divergences, one line if skipped)."""
    ran = [r for r in results if r.summary]
    coverage = merged_coverage(results)
    buckets = [b for r in results for b in r.buckets]
    skipped = tuple(r.name for r in results if r.partial)
    examples = sum(r.examples for r in results)
    work = fixed_work(examples, None, math.inf, interrupted, skipped)
    timing = [r.summary.get("timing", {}) for r in ran]
    build = sum(float(t.get("engine_build_seconds", 0.0)) for t in timing)
    explained: dict[str, int] = {}
    for r in ran:
        for name, n in r.summary.get("explained", {}).items():
            explained[name] = explained.get(name, 0) + int(n)
    vllm = vllm_json(engine_capabilities())
    return {
        "schema_version": JSON_SCHEMA_VERSION,
        "target": TARGET,
        "vllm_version": vllm["version"],
        "vllm": vllm,
        "skipped_parts": [p for r in ran for p in r.summary.get("skipped_parts", [])]
                         + [{"part": r.name, "reason": r.skipped, "examples": 0}
                            for r in results if r.partial and not r.summary],
        "runner_class": next((str(r.summary["runner_class"]) for r in ran if r.summary.get("runner_class")), ""),
        "runner": "v1",  # the first part's; each part's runner is in parts
        "depths": sorted({int(d) for r in ran for d in r.summary.get("depths", [])}),
        "seed": seed,
        "examples": examples,
        "divergences": sum(int(b.get("count", 1)) for b in buckets),
        "buckets": buckets,
        "explained": explained,
        "coverage": coverage,
        "zero_coverage": [k for k in dict.fromkeys(c for r in ran for c in r.coverage) if coverage.get(k, 0) == 0],
        "result": result_word(bool(buckets), work),
        "interrupted": interrupted,
        "partial": not work.complete,
        "replay_file": next((str(b["replay_file"]) for b in buckets if b.get("replay_file")), None),
        "parts": [r.to_json() for r in results],
        "timing": {"seconds": round(elapsed, 2), "engine_build_seconds": round(build, 2),
                   "cases_per_second": round(examples / elapsed, 1) if elapsed > 0 else 0.0,
                   "engine_events": sum(int(t.get("engine_events", 0)) for t in timing),
                   "engine_steps": sum(int(t.get("engine_steps", 0)) for t in timing)},
    }


def engine_parts_main(seed: int, json_out: bool, allow_version: bool, out_dir: Path,
                      max_divergences: int = DEFAULT_MAX_DIVERGENCES, stop_at_first: bool = False) -> int:
    """``asyncspec fuzz --target vllm-engine`` (no budget, runner, depth or profile): every part; exit codes
    as any engine campaign (0 clean, 1 a divergence, 2 usage, 3 a part skipped here or interrupted)."""
    problem = out_dir_problem(out_dir) or check_engine_available(allow_version)
    if problem:
        return usage_error("fuzz", problem)
    start = time.monotonic()
    with interrupt.catching(), ProgressLine(f"fuzz {TARGET}", quiet=json_out) as line:
        line.update(f"{len(ENGINE_PARTS)} parts: {', '.join(ENGINE_PART_NAMES)}")
        results = run_parts(seed, out_dir, max_divergences, stop_at_first, allow_version)
    for r in results:
        if r.skipped is not None:
            print(SkippedPart(r.name, r.skipped).line(), file=sys.stderr)
    summary = parts_summary(results, seed, time.monotonic() - start, interrupt.requested())
    work = fixed_work(summary["examples"], None, math.inf, summary["interrupted"],
                      tuple(r.name for r in results if r.partial))
    out = Console(stderr=json_out, highlight=False, width=WIDTH)
    shown = [b for r in results for b in r.shown]
    return finish(summary, bool(summary["buckets"]), work, json_out, lambda: print_buckets(shown, TARGET, out),
                  lambda: print_parts_summary(summary, out))


def print_parts_summary(s: dict[str, Any], out: Console) -> None:
    t = s["timing"]
    out.print(f"fuzz {s['target']} (vLLM {s['vllm_version']}, the default campaign, {len(s['parts'])} parts): "
              f"{s['examples']} examples, {t['engine_steps']} engine steps in {t['seconds']} s, "
              f"{s['divergences']} divergences in {len(s['buckets'])} buckets")
    for p in s["parts"]:
        state = f"skipped: {p['skipped']}" if p["skipped"] else f"{p['examples']} examples, {p['divergences']} divergences"
        out.print(f"  part {p['name']} ({p['runner']}): {state}")
    print_coverage(s["coverage"], s["zero_coverage"], out)
    out.print(f"reproduce with: asyncspec fuzz --target {TARGET} --seed {s['seed']}")
