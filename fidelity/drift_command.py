"""``asyncspec drift OTHER``: the installed vLLM against another release, as a checklist."""
from __future__ import annotations

import json
import sys
from pathlib import Path

from asyncspec.checker.schema import JSON_SCHEMA_VERSION

from asyncspec.fidelity.cited import all_dependents, static_references
from asyncspec.fidelity.drift import drift, render
from asyncspec.fidelity.source import SourceError, VllmSource


def drift_main(other: Path, as_json: bool) -> int:
    """0 nothing drifted, 1 drift found, 2 bad input (one line on stderr); static references never count."""
    try:
        base = VllmSource.installed()
        other_src = VllmSource.open(other)
    except SourceError as exc:
        print(f"asyncspec: error: {exc}", file=sys.stderr)
        return 2
    report = drift(base, other_src, all_dependents(base), tuple(static_references()))
    print(json.dumps({"schema_version": JSON_SCHEMA_VERSION, **report.to_json()}, indent=2) if as_json else render(report))
    return 1 if report.items else 0
