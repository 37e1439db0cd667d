"""The driver's side of the pipe: one JSON request per stdin line, one JSON reply per line.

Requests: ``{"mutant": NAME}`` applies a one-line mutant of SGLang (``mutants.py``) for the
rest of the process; ``{"config": <EngineConfig>}`` builds the Scheduler; ``{"case":
<Case.to_json()>}`` runs a case; ``{"quit": true}``.  Replies:
``{"trace": ...}`` or ``{"error": "one line"}``.  SGLang's own logging goes to stderr; the
real stdout is kept for replies only (anything SGLang prints goes to stderr too).
"""
from __future__ import annotations

import json
import sys
import traceback
from typing import Any, TextIO


def _reply(out: TextIO, payload: dict[str, Any]) -> None:
    out.write(json.dumps(payload) + "\n")
    out.flush()


def main(argv: list[str]) -> int:
    """Serve requests until stdin closes or ``quit``."""
    out = sys.stdout
    sys.stdout = sys.stderr  # SGLang's prints must not corrupt the reply stream
    from asyncspec.engine.sglang import case as cs
    from asyncspec.engine.sglang import sglang_mutants as mutants
    from asyncspec.engine.sglang.driver import SGLangDriver

    driver = SGLangDriver()
    _reply(out, {"ready": True})
    for line in sys.stdin:
        request = json.loads(line)
        if request.get("quit"):
            break
        try:
            if "mutant" in request:
                mutants.apply(request["mutant"])
                _reply(out, {"ok": True})
            elif "config" in request:
                driver.prepare(cs.EngineConfig(**request["config"]))
                _reply(out, {"ok": True})
            else:
                _reply(out, {"trace": driver.run(cs.Case.from_json(request["case"]))})
        except Exception as exc:  # noqa: BLE001 -- a crash of SGLang is an observation
            detail = traceback.format_exc().strip().splitlines()
            _reply(out, {"error": f"{type(exc).__name__}: {exc}", "where": detail[-3:]})
            return 1  # a crashed loop leaves the Scheduler mid-iteration: the client starts a new driver
    return 0
