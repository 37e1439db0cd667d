"""``asyncspec prove``: run every obligation, print one line each (or JSON)."""
from __future__ import annotations

import json
import sys

from rich.console import Console

from asyncspec.checker.schema import JSON_SCHEMA_VERSION

from .prover import DEFAULT_TIMEOUT_MS, EncoderBug, Outcome, prove


def _line(o: Outcome) -> str:
    return f"[{o.variant}] {o.action} x {o.invariant} ... {o.result} ({o.seconds:.2f}s)"


def prove_main(json_out: bool, timeout_ms: int = DEFAULT_TIMEOUT_MS, only: str | None = None) -> int:
    """Prove every obligation; 0 when all are proved, 1 otherwise ("unknown" fails).

    An ``EncoderBug`` (a CTI that does not replay) is reported and exits 1.
    """
    console = Console(soft_wrap=True)
    try:
        report = prove(timeout_ms=timeout_ms, only=only,
                       on_outcome=None if json_out else (lambda o: print(_line(o), flush=True)))
    except EncoderBug as exc:
        if json_out:
            print(json.dumps({"schema_version": JSON_SCHEMA_VERSION, "result": "failed", "error": f"encoder bug: {exc}", "obligations": []}))
        else:
            print(f"encoder bug: {exc}", file=sys.stderr)
        return 1
    if json_out:
        print(json.dumps({
            "schema_version": JSON_SCHEMA_VERSION,
            "result": "ok" if report.ok else "failed",
            "obligations": [{"variant": o.variant, "action": o.action, "invariant": o.invariant,
                             "result": o.result, "seconds": round(o.seconds, 4)} for o in report.outcomes],
        }))
    else:
        for cti in report.ctis:
            console.print(cti.table())
        failed = [o for o in report.outcomes if o.result != "proved"]
        total = sum(o.seconds for o in report.outcomes)
        print(f"{len(report.outcomes) - len(failed)}/{len(report.outcomes)} obligations proved "
              f"in {total:.1f}s" + (f"; {len(failed)} not proved" if failed else ""))
    return 0 if report.ok else 1
