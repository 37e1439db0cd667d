"""``asyncspec prove``: run every obligation, print one line each (or JSON)."""
from __future__ import annotations

import json
import sys

import z3
from rich.console import Console

from asyncspec.checker import interrupt
from asyncspec.checker.progress import ProgressLine
from asyncspec.checker.schema import JSON_SCHEMA_VERSION

from asyncspec.proofs.prover import DEFAULT_TIMEOUT_MS, EncoderBug, Outcome, prove


def _line(o: Outcome) -> str:
    return f"[{o.variant}] {o.action} x {o.invariant} ... {o.result} ({o.seconds:.2f}s)"


def prove_main(json_out: bool, timeout_ms: int = DEFAULT_TIMEOUT_MS, only: str | None = None) -> int:
    """Prove every obligation; 0 when all are proved, 1 otherwise ("unknown" fails), 3 when
    Ctrl-C or SIGTERM stopped the run first (z3 is interrupted from a helper thread).

    An ``EncoderBug`` (a CTI that does not replay) is reported and exits 1.
    """
    console = Console(soft_wrap=True)
    done: list[Outcome] = []
    try:
        with interrupt.catching(), interrupt.waking(z3.main_ctx().interrupt), \
                ProgressLine("prove", quiet=json_out) as line:
            def on_outcome(o: Outcome) -> None:
                done.append(o)
                if not json_out:
                    line.clear()  # the obligation's line, then the progress line below it
                    print(_line(o), flush=True)
                line.update(f"{len(done)} obligations done, {sum(x.result == 'proved' for x in done)} proved")
            report = prove(timeout_ms=timeout_ms, only=only, on_outcome=on_outcome)
    except EncoderBug as exc:
        if json_out:
            print(json.dumps({"schema_version": JSON_SCHEMA_VERSION, "result": "failed", "error": f"encoder bug: {exc}", "obligations": []}))
        else:
            print(f"encoder bug: {exc}", file=sys.stderr)
        return 1
    report.interrupted = report.interrupted or interrupt.requested()  # a signal after the last obligation
    failed = [o for o in report.outcomes if o.result != "proved"]
    code = 1 if failed else 3 if report.interrupted else 0 if report.ok else 1
    if json_out:
        print(json.dumps({
            "schema_version": JSON_SCHEMA_VERSION,
            "result": {0: "ok", 3: "partial"}.get(code, "failed"),
            "interrupted": report.interrupted, "total": report.total, "done": len(report.outcomes),
            "obligations": [{"variant": o.variant, "action": o.action, "invariant": o.invariant,
                             "result": o.result, "seconds": round(o.seconds, 4)} for o in report.outcomes],
        }))
    else:
        for cti in report.ctis:
            console.print(cti.table())
        total = sum(o.seconds for o in report.outcomes)
        print(f"{len(report.outcomes) - len(failed)}/{len(report.outcomes)} obligations proved "
              f"in {total:.1f}s" + (f"; {len(failed)} not proved" if failed else ""))
        if report.interrupted:
            print(f"PARTIAL: interrupted; {report.total - len(report.outcomes)} of {report.total} obligations "
                  "not run")
    return code
