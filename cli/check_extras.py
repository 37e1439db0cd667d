"""``asyncspec check``'s outputs beside the report: trace files, the manifest, ``--show-witness``, the
exit code and JSON of a list of results (``check``, ``sweep``, ``worker``), the grid of ``sweep``."""
from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from asyncspec.checker import configs as cfgs
from asyncspec.checker.result import CheckResult
from asyncspec.checker.schema import JSON_SCHEMA_VERSION, nearest
from asyncspec.checker.table import trace_table
from asyncspec.checker.atomic import WriteError, note_unsaved, take_unsaved, unsaved_line, write_atomically
from asyncspec.checker.trace import Trace, save_trace
from asyncspec.checker.witness import witness_trace
from asyncspec.spec.config import ConfigError, SpecConfig
from asyncspec.spec.events import ALL_EVENTS

from asyncspec.cli.common import EXIT_OK, EXIT_PARTIAL, EXIT_USAGE, EXIT_VIOLATION, fail_usage, out


def result_json(r: CheckResult) -> dict[str, Any]:
    """One config's entry in a ``--json`` report: its result, a vacuous witness counted as a violation."""
    data: dict[str, Any] = r.to_json()  # (a partial run has no vacuous witnesses: it did not finish)
    data["violations"] += [
        {"property": f"witness:{w}", "message": "never reached: the config is vacuous for it"}
        for w in r.vacuous
    ]
    return data


def exit_code(results: list[CheckResult]) -> int:
    """1 on a violation (a finding config's expected one is none when partial), else 3 if partial, else 0."""
    if any(not r.ok and not r.partial for r in results):
        return EXIT_VIOLATION
    if any(r.partial for r in results):  # a finding config's expected violation is no finding
        unexpected = any(v.property != r.expect_violation for r in results for v in r.violations)
        return EXIT_VIOLATION if unexpected else EXIT_PARTIAL
    return EXIT_OK


def as_plain(r: CheckResult) -> CheckResult:
    """``r`` with no witness required: a sweep reports violations, never a vacuous config."""
    r.required_witnesses = ()
    return r


def trace_path(trace_dir: Path, config: str, what: str) -> Path:
    """Where a config's trace for a property (or ``witness-EVENT``) is saved."""
    return trace_dir / f"{config}.{what}.trace.json"


def saved_traces(r: CheckResult, trace_dir: Path) -> list[str]:
    """Save every violation trace of ``r`` (and its page) as soon as its config ends, in both modes; the
    paths written.  A trace that cannot be written is noted and the run goes on (``saved``)."""
    paths = []
    for v in r.violations:
        path = trace_path(trace_dir, r.name, v.property)
        if saved(v.trace, path):
            paths.append(str(path))
    return paths


def saved(trace: Trace, path: Path) -> bool:
    """Save ``trace`` at ``path``; False if it could not be written (the failure is noted for the run's end:
    the finding is still printed, and the end says which file is missing and why)."""
    try:
        save_trace(trace, path)
    except WriteError as exc:
        note_unsaved(exc)
        return False
    return True


def unsaved_messages() -> list[str]:
    """The failed writes of this run so far, one line each (taken: the next run starts with none)."""
    return [str(exc) for exc in take_unsaved()]


def end_code(code: int, unsaved: list[str]) -> int:
    """The exit code of a run once its report is out: with files not written, one line on stderr and 2
    (3 where the run was cut short: its partial result stands)."""
    if not unsaved:
        return code
    print(unsaved_line([WriteError(m) for m in unsaved]), file=sys.stderr)
    return EXIT_PARTIAL if code == EXIT_PARTIAL else EXIT_USAGE


def update_manifest_from(results: list[CheckResult], code: int) -> None:
    """Pin the measured counts of a passing run; a failing or partial run pins nothing."""
    if code != EXIT_OK:
        print(f"asyncspec: error: --update-manifest: nothing pinned, the run did not pass (exit {code}); "
              f"pin counts from a run that exits 0", file=sys.stderr)
        return
    manifest = cfgs.load_manifest()
    for r in results:
        manifest[r.name] = {"distinct_states": r.distinct_states, "depth": r.depth}
    text = json.dumps(dict(sorted(manifest.items())), indent=2) + "\n"
    try:
        write_atomically(cfgs.manifest_path(), text)
    except WriteError as exc:
        note_unsaved(exc)


def show_witness_main(configs: list[SpecConfig], event: str, as_json: bool, trace_dir: Path,
                      max_states: int | None = None) -> int:
    """``check --show-witness EVENT``: a shortest trace reaching ``EVENT`` in each config, printed and saved.

    Exit 0 when every config reaches it, 1 when one does not (the config is vacuous for it), 3 when
    ``--max-states`` stopped a search first (partial)."""
    if event not in ALL_EVENTS:
        fail_usage(f"--show-witness: unknown witness '{event}'{nearest(event, ALL_EVENTS)}; "
                   f"the witnesses are listed in docs/spec.md")
    rows: list[dict[str, Any]] = []
    for cfg in configs:
        stopped: list[bool] = []
        trace = witness_trace(cfg, event, max_states, stopped)
        path = trace_path(trace_dir, cfg.name, f"witness-{event}") if trace is not None else None
        if trace is not None and path is not None and not saved(trace, path):
            path = None
        rows.append({"name": cfg.name, "reached": trace is not None, "partial": bool(stopped),
                     "steps": len(trace.actions) if trace is not None else None,
                     "trace_file": str(path) if path is not None else None})
        if as_json:
            continue
        if trace is None:
            never = f"not reached within --max-states {max_states} (partial)" if stopped else "never reached"
            out().print(f"{cfg.name}: witness '{event}' is {never}", markup=False)
            continue
        out().print(trace_table(cfg, trace.states(), title=f"{cfg.name}: a shortest trace reaching {event}"))
        replay = f"replay with: asyncspec replay {path}" if path is not None else "not saved (see the last line)"
        out().print(f"  {event} reached after {len(trace.actions)} actions; {replay}", markup=False)
    ok = all(r["reached"] for r in rows)
    code = EXIT_OK if ok else EXIT_PARTIAL if all(r["reached"] or r["partial"] for r in rows) else EXIT_VIOLATION
    unsaved = unsaved_messages()
    if as_json:
        print(json.dumps({"schema_version": JSON_SCHEMA_VERSION, "witness": event, "configs": rows,
                          "result": {EXIT_OK: "ok", EXIT_PARTIAL: "partial"}.get(code, "violation"),
                          **({"unsaved_files": unsaved} if unsaved else {})}, indent=2))
    return end_code(code, unsaved)


def _csv(option: str, text: str, kind: str, parse: Callable[[str], Any]) -> tuple[Any, ...]:
    values = []
    for part in text.split(","):
        try:
            values.append(parse(part.strip()))
        except (ValueError, KeyError):
            fail_usage(f"{option}: '{part}' is not {kind} (got '{text}'); write e.g. {_EXAMPLES[option]}")
    return tuple(values)


_EXAMPLES = {"--requests": "3x2,2x2", "--depth": "1,2,3", "--blocks": "3,4", "--defer": "off,on",
             "--stale": "deliver,drop"}


def _integer(part: str) -> int:
    """An integer in ASCII digits (``int`` would read full-width and other Unicode digits); ``ValueError``."""
    if not part.isascii() or not part.lstrip("-").isdigit():
        raise ValueError(part)
    return int(part)


def _request(part: str) -> tuple[int, int]:
    prompt, max_tokens = part.split("x")  # ValueError unless exactly two
    return _integer(prompt), _integer(max_tokens)


def _choice(options: dict[str, Any]) -> Callable[[str], Any]:
    return lambda part: options[part]


def sweep_configs(requests: str, depth: str, blocks: str, defer: str, stale: str) -> list[SpecConfig]:
    """The grid of ``asyncspec sweep``; a bad option value is one line naming it (exit 2)."""
    from asyncspec.checker.sweep import grid

    reqs = _csv("--requests", requests, "PROMPTxMAX_TOKENS", _request)
    depths = _csv("--depth", depth, "an integer", _integer)
    block_counts = _csv("--blocks", blocks, "an integer", _integer)
    defer_opts = _csv("--defer", defer, "on or off", _choice({"off": False, "on": True}))
    stale_opts = _csv("--stale", stale, "deliver or drop", _choice({"deliver": "deliver", "drop": "drop"}))
    try:
        return list(grid(reqs, depths, block_counts, defer_opts, stale_opts))
    except ConfigError as exc:
        fail_usage(f"sweep: {exc}")
