"""``asyncspec mutate-vllm``: the fuzzers' self-test against one-line vLLM bugs.

For each mutant of the corpus (``engine/vllm/vllm_mutants.py``) and each target, a
fresh process installs the mutant's import overlay and runs a fixed-work
campaign (``mutant_worker.py``); the kill table says which target found each
mutant and after how many examples.  Before the mutants, each target runs the
same campaign without a mutant: it must be clean, or no kill would mean
anything.

A mutant is killed when some target of this run diverges from the spec (or
vLLM fails) under it; a survivor fails the run unless the corpus argues it
equivalent.  Exit 0 all killed, 1 a survivor, 2 bad input (one line).
"""
from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from asyncspec.checker.schema import JSON_SCHEMA_VERSION, nearest
from asyncspec.engine.vllm.vllm_mutants import MUTANTS, MUTANTS_BY_ID, VllmMutant
from asyncspec.engine.vllm.overlay import MutantDoesNotApply, mutated_code

from asyncspec.statemachine_tests.mutation.mutant_worker import DEFAULT_EXAMPLES, TARGETS, WorkerResult

EXIT_OK, EXIT_SURVIVOR, EXIT_USAGE = 0, 1, 2
MIN_TIMEOUT_S = 300.0  # a worker may take this long, or 10x its target's clean run, before it counts as hung


class MutateError(Exception):
    """Bad input or an unusable target: one line, exit 2."""


def list_json() -> dict[str, list[dict[str, str]]]:
    """``--list --json``: exactly ``{"mutants": [{"id", "file", "function", "reference"}, ...]}``."""
    return {"mutants": [{"id": m.id, "file": m.file, "function": m.function, "reference": m.reference}
                        for m in MUTANTS]}


def choose(only: str | None) -> tuple[VllmMutant, ...]:
    """The corpus, or the one mutant ``--only`` names; every one must still apply."""
    if only is not None and only not in MUTANTS_BY_ID:
        raise MutateError(f"unknown mutant {only!r}{nearest(only, MUTANTS_BY_ID)}; "
                          "`asyncspec mutate-vllm --list` names them")
    chosen = (MUTANTS_BY_ID[only],) if only else MUTANTS
    for m in chosen:
        try:
            mutated_code(m)
        except MutantDoesNotApply as exc:
            raise MutateError(str(exc)) from exc
    return chosen


def check_targets(targets: Sequence[str]) -> None:
    """Fail fast, before any campaign, on a target this checkout cannot build."""
    import importlib.util

    if "vllm-engine" in targets and importlib.util.find_spec(
            "asyncspec.statemachine_tests.vllm_engine.engine_campaign") is None:
        raise MutateError("target vllm-engine is not available: "
                          "asyncspec.statemachine_tests.vllm_engine.engine_campaign is not in this checkout")


def run_worker(mutant: str, target: str, examples: int, seed: int, timeout: float) -> WorkerResult:
    """One worker process; its one-line error becomes ``MutateError``; a hang is a kill."""
    cmd = [sys.executable, "-m", "asyncspec.statemachine_tests.mutation.mutant_worker", "--mutant", mutant,
           "--target", target, "--examples", str(examples), "--seed", str(seed), "--json"]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return WorkerResult(mutant, target, True, "hang", 0, None, timeout, True,
                            f"no result within {timeout:.0f} s")
    if proc.returncode == EXIT_USAGE:
        lines = proc.stderr.strip().splitlines()
        raise MutateError((lines[-1] if lines else "worker failed").removeprefix("mutate-vllm: "))
    last = proc.stdout.strip().splitlines()[-1:] if proc.returncode == 0 else []
    if not last:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return WorkerResult(mutant, target, True, "crash", 0, None, 0.0, True,
                            f"worker exited {proc.returncode}: {tail}")
    fields = json.loads(last[0])
    fields.pop("died_at_example", None)  # a property of the result, not a field
    return WorkerResult(**fields)


@dataclass
class MutantRow:
    """One mutant's results, one per target."""

    mutant: VllmMutant
    results: dict[str, WorkerResult] = field(default_factory=dict)

    @property
    def killed(self) -> bool:
        return any(r.killed for r in self.results.values())

    def to_json(self) -> dict[str, Any]:
        m = self.mutant
        return {"id": m.id, "file": m.file, "function": m.function, "reference": m.reference,
                "description": m.description, "killed": self.killed, "equivalent": m.equivalent,
                "results": {t: r.to_json() for t, r in self.results.items()}}


def baseline(target: str, examples: int, seed: int) -> WorkerResult:
    """The target's campaign without a mutant; it must neither diverge nor fail."""
    clean = run_worker("none", target, examples, seed, timeout=3600.0)
    if clean.killed:
        raise MutateError(f"target {target} is not clean without a mutant ({clean.how}: {clean.detail}); "
                          "fix that first, the kill table would mean nothing")
    return clean


def examples_for(target: str, examples: int | None) -> int:
    """The work of ``target``'s campaign: ``--examples``, else what a user's default campaign runs
    (``--target vllm``: 1,800, ``fuzz --target vllm``'s default; ``mutant_worker.DEFAULT_EXAMPLES``)."""
    return DEFAULT_EXAMPLES[target] if examples is None else examples


def run_table(mutants: Sequence[VllmMutant], targets: Sequence[str], examples: int | None, seed: int,
              progress: Any = None) -> tuple[list[MutantRow], dict[str, WorkerResult]]:
    """Baselines, then every mutant under every target."""
    clean = {t: baseline(t, examples_for(t, examples), seed) for t in targets}
    rows = []
    for m in mutants:
        row = MutantRow(m)
        for t in targets:
            timeout = max(MIN_TIMEOUT_S, 10 * clean[t].seconds)
            row.results[t] = run_worker(m.id, t, examples_for(t, examples), seed, timeout)
        if progress is not None:
            progress(row)
        rows.append(row)
    return rows, clean


def cell(r: WorkerResult) -> str:
    """One kill-table cell."""
    if r.how == "divergence":  # the example of the campaign (1-based) that diverged
        return f"killed at ex {r.died_at_example} ({r.seconds:.0f} s)"
    if r.how:
        return f"killed: {r.how} ({r.seconds:.0f} s)"
    return "survived" if r.loaded else "survived (module not loaded)"


def print_row(row: MutantRow) -> None:
    m = row.mutant
    cells = " | ".join(cell(r) for r in row.results.values())
    note = " (argued equivalent)" if not row.killed and m.equivalent else ""
    ref = m.reference.split(":")[0]
    print(f"{m.id:36s} {m.file}:{m.function}  {ref}  | {cells}{note}", flush=True)


def mutate_main(target: str | None, only: str | None, list_only: bool, as_json: bool,
                examples: int | None, seed: int) -> int:
    """The command; returns its exit code."""
    if list_only:
        if as_json:
            print(json.dumps({"schema_version": JSON_SCHEMA_VERSION, **list_json()}))
        else:
            for m in MUTANTS:
                print(f"{m.id:36s} {m.file}:{m.function}  {m.reference}")
        return EXIT_OK
    targets = (target,) if target else TARGETS
    try:
        if examples is not None and examples < 1:
            raise MutateError("--examples must be at least 1")
        if target is not None and target not in TARGETS:
            raise MutateError(f"unknown target {target!r} (one of {', '.join(TARGETS)}){nearest(target, TARGETS)}")
        chosen = choose(only)
        check_targets(targets)
        if not as_json:
            work = ", ".join(f"{t} {examples_for(t, examples)}" for t in targets)
            print(f"mutate-vllm: {len(chosen)} mutants x {', '.join(targets)}, examples {work}, "
                  f"seed {seed}\nmutant  file:function  reference  | " + " | ".join(targets), flush=True)
        rows, clean = run_table(chosen, targets, examples, seed, None if as_json else print_row)
    except MutateError as exc:
        print(f"asyncspec: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    survivors = [r.mutant.id for r in rows if not r.killed and not r.mutant.equivalent]
    if as_json:
        print(json.dumps({"schema_version": JSON_SCHEMA_VERSION, "targets": list(targets),
                          "examples": examples_for(targets[0], examples),
                          "examples_per_target": {t: examples_for(t, examples) for t in targets}, "seed": seed,
                          "baseline": {t: r.to_json() for t, r in clean.items()},
                          "total": len(rows), "killed": sum(r.killed for r in rows),
                          "survivors": survivors, "mutants": [r.to_json() for r in rows]}))
    else:
        print(f"{sum(r.killed for r in rows)}/{len(rows)} mutants killed"
              + (f"; surviving: {', '.join(survivors)}" if survivors else ""))
    return EXIT_SURVIVOR if survivors else EXIT_OK
