"""``asyncspec mutants``, ``worker`` and ``prove``: the spec's own self-tests and its proofs.

Listed by ``cli/main.py``; what a command needs beyond click is imported when it runs.
"""
from __future__ import annotations

import json
import sys
from typing import Any, NoReturn

import click

from asyncspec.cli.common import EXIT_OK, EXIT_PARTIAL, EXIT_VIOLATION, fail_usage, out
from asyncspec.cli.contract import Choice, ContractCommand


@click.command(cls=ContractCommand)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@click.option("--only", default=None, metavar="NAME", help="Check one mutant.")
@click.option("--explorer", type=Choice(["fast", "plain"]), default="fast", show_default=True,
              help="Which explorer checks the mutated spec (both report the same traces).")
def mutants(as_json: bool, only: str | None, explorer: str) -> None:
    """Check that every seeded spec bug is killed by the checker."""
    from asyncspec.checker import interrupt
    from asyncspec.checker.progress import ProgressLine
    from asyncspec.checker.schema import nearest
    from asyncspec.checker.spec_mutants import MUTANTS, MUTANTS_BY_NAME, MutantResult, run_mutant

    chosen = MUTANTS
    if only is not None:
        if only not in MUTANTS_BY_NAME:
            fail_usage(f"no mutant named '{only}'{nearest(only, MUTANTS_BY_NAME)}; 'asyncspec mutants' lists them")
        chosen = (MUTANTS_BY_NAME[only],)
    results: list[MutantResult] = []
    with ProgressLine("mutants", quiet=as_json) as line:
        for i, m in enumerate(chosen):
            line.update(f"{i}/{len(chosen)} checked, {sum(r.killed for r in results)} killed; now {m.name}")
            try:
                r = run_mutant(m, explorer)
            except KeyboardInterrupt:
                break
            if r.interrupted and not r.killed:
                break  # not checked to the end: neither killed nor survived
            results.append(r)
            if r.interrupted or interrupt.requested():
                break
            interrupt.pause_point("mid-run")  # a test signals here (checker/interrupt.py)
    with interrupt.catching():  # the report is printed whole whatever signal comes now
        _mutants_report(chosen, results, as_json)


def _mutants_report(chosen: tuple[Any, ...], results: list[Any], as_json: bool) -> NoReturn:
    """``mutants``' report and exit: a mutant checked to the end counts; any signal makes it partial."""
    from asyncspec.checker import interrupt
    from asyncspec.checker.schema import JSON_SCHEMA_VERSION

    stopped = len(results) < len(chosen) or interrupt.requested()
    killed = sum(r.killed for r in results)
    code = EXIT_VIOLATION if killed < len(results) else EXIT_PARTIAL if stopped else EXIT_OK
    if as_json:
        print(json.dumps({"schema_version": JSON_SCHEMA_VERSION,
                          "result": {EXIT_OK: "ok", EXIT_PARTIAL: "partial"}.get(code, "violation"),
                          "interrupted": stopped, "total": len(results), "killed": killed,
                          "not_checked": [m.name for m in chosen[len(results):]],
                          "mutants": [r.to_json() for r in results]}, indent=2))
    else:
        for m, r in zip(chosen, results):
            mark = "killed" if r.killed else "SURVIVED"
            out().print(f"{mark:8s} {r.name:40s} {r.property:34s} on {m.config}  ({m.description})")
        out().print(f"{killed}/{len(results)} mutants killed")
        if stopped:
            out().print(f"PARTIAL: interrupted; {len(chosen) - len(results)} of {len(chosen)} mutants not checked")
    sys.exit(code)


@click.command(cls=ContractCommand)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@click.option("--timeout-ms", type=click.IntRange(min=1), default=10_000, show_default=True,
              help="Per-obligation z3 timeout; a timeout is 'unknown', which fails.")
@click.option("--only", default=None, metavar="TEXT", help="Only obligations whose action or invariant contains TEXT.")
def prove(as_json: bool, timeout_ms: int, only: str | None) -> None:
    """Prove the counter invariants inductive for unbounded parameters (z3)."""
    from asyncspec.checker.schema import nearest
    from asyncspec.proofs.prove_command import prove_main
    from asyncspec.proofs.prover import obligations
    from asyncspec.proofs.request_abstraction import ACTIONS, VARIANTS

    if only is not None:
        labels = [f"{v.name} {name} x {inv.name}" for v in VARIANTS for name, inv in obligations(v, ACTIONS)]
        if not any(only in label for label in labels):
            words = {w for label in labels for w in label.split() if w != "x"}
            fail_usage(f"--only '{only}' matches no obligation{nearest(only, words)}; it selects by a part of "
                       f"'VARIANT ACTION x INVARIANT' (see docs/proofs.md)")
    sys.exit(prove_main(as_json, timeout_ms, only))


@click.command(cls=ContractCommand)
@click.option("--strategy", type=Choice(["v1", "v2", "neuron", "all"]), default="all", show_default=True,
              help="Worker strategy: V1 GPU runner, Model Runner V2, or the Neuron runner.")
@click.option("--mutants", "with_mutants", is_flag=True, help="Also check that every worker mutant is killed.")
@click.option("--json", "as_json", is_flag=True)
def worker(strategy: str, with_mutants: bool, as_json: bool) -> None:
    """Check the worker side (token feedback) composed with the scheduler spec."""
    from asyncspec.checker import interrupt, joint, worker_mutants

    rows = [e for e in joint.EXPECTATIONS if strategy in ("all", e.strategy)]
    chosen = [m for m in worker_mutants.MUTANTS if strategy in ("all", m.strategy)] if with_mutants else []
    results: list[tuple[Any, Any]] = []
    mutants: list[Any] = []
    try:  # each search lets Ctrl-C go on: what ran to its end is reported, the rest listed as not checked
        for e in rows:
            results.append((e, joint.run_expectation(e)))
            if interrupt.requested():
                break
            interrupt.pause_point("mid-run")  # a test signals here (checker/interrupt.py)
        for m in chosen if len(results) == len(rows) and not interrupt.requested() else []:
            mutants.append(worker_mutants.run_worker_mutant(m))
            if interrupt.requested():
                break
    except KeyboardInterrupt:
        pass
    not_checked = [f"{e.config}/{e.strategy}" for e in rows[len(results):]] + [m.name for m in chosen[len(mutants):]]
    with interrupt.catching():  # the report is printed whole whatever signal comes now
        _worker_report(results, mutants, not_checked, as_json)


def _worker_report(results: list[tuple[Any, Any]], mutants: list[Any], not_checked: list[str],
                   as_json: bool) -> NoReturn:
    """``worker``'s report and exit, as ``check`` reports it: a run cut short is ``partial``, exit 3,
    ``interrupted`` true, with what ran to its end (a finding among it: exit 1)."""
    from asyncspec.checker import interrupt
    from asyncspec.checker.schema import JSON_SCHEMA_VERSION

    from asyncspec.cli.check_extras import result_json

    ok = all(r.ok for _, r in results) and all(m.killed for m in mutants)
    stopped = bool(not_checked) or interrupt.requested() or any(r.partial for _, r in results)
    code = EXIT_VIOLATION if not ok else EXIT_PARTIAL if stopped else EXIT_OK
    if as_json:
        print(json.dumps({"schema_version": JSON_SCHEMA_VERSION,
                          "result": {EXIT_OK: "ok", EXIT_PARTIAL: "partial"}.get(code, "violation"),
                          "interrupted": stopped, "not_checked": not_checked,
                          "configs": [result_json(r) for _, r in results],
                          "mutants": [m.to_json() for m in mutants]}, indent=2))
        sys.exit(code)
    for e, r in results:
        note = f" (expected finding: {e.expect_violation})" if e.expect_violation else ""
        out().print(f"{r.name:32s} {'ok' if r.ok else 'FAIL':4s} {r.distinct_states:6d} states "
                    f"depth {r.depth:3d}{note}", markup=False)
        for v in r.violations:
            if v.property != e.expect_violation:
                out().print(f"  VIOLATION: {v.property}: {v.message}", markup=False)
        for w in r.vacuous:
            out().print(f"  vacuous: witness '{w}' never reached", markup=False)
    for m in mutants:
        out().print(f"{'killed' if m.killed else 'SURVIVED':8s} {m.name:40s} {m.property}", markup=False)
    if stopped:
        out().print(f"PARTIAL: interrupted; {len(not_checked)} worker checks not run: "
                    f"{', '.join(not_checked[:5])}{' ...' if len(not_checked) > 5 else ''}", markup=False)
    sys.exit(code)
