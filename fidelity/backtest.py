"""``asyncspec backtest``: each vLLM release's fixed-work campaigns, their buckets, and what removed each.

For every interpreter given (a venv or a Python with one vLLM release
installed, ``.ci/install-vllm VERSION``), oldest release first, and every
target: the target's default campaign (``asyncspec fuzz --target T --json``,
the same fixed work on every release) run by that interpreter; its parts run
and skipped; its divergence buckets, each classified from the hand-kept table
(``backtest_classes.py``); and, for each bucket, its shrunk replay file
replayed on the next newer release given, to show whether that release still
has it, with the functions of the classification's upstream change that
``drift`` finds changed between the two.  Nothing is imported from vLLM here:
every release runs in its own process.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from asyncspec.engine.vllm.release_settings import ENV as SETTINGS_ENV
from asyncspec.fidelity.backtest_classes import classify

TARGETS = ("vllm", "vllm-engine")
_VERSION_CODE = "import importlib.metadata as m; print(m.version('vllm'))"


class BacktestError(ValueError):
    """Bad input: one line naming it."""


@dataclass(frozen=True)
class Release:
    """One interpreter and the vLLM release it imports."""

    python: str
    version: str
    package: str

    def key(self) -> tuple[int, ...]:
        """Sort key: the release number, numerically."""
        return tuple(int(p) if p.isdigit() else 0 for p in self.version.split(".")[:3])


@dataclass
class Run:
    """One target's campaign on one release."""

    version: str
    target: str
    exit_code: int
    report: dict[str, Any] = field(default_factory=dict)
    error: str = ""


def interpreter(arg: str) -> str:
    """The Python of ``arg``: a venv folder (its ``bin/python``) or a Python executable."""
    path = Path(arg)
    if not path.exists() and shutil.which(arg):
        path = Path(str(shutil.which(arg)))
    if path.is_dir():
        path = path / "bin" / "python"
    if not (path.is_file() and os.access(path, os.X_OK)):
        raise BacktestError(f"{arg}: neither a venv folder nor a Python executable; give a venv with "
                            "vLLM installed (.ci/install-vllm VERSION)")
    return str(path)


def release_of(python: str) -> Release:
    """Which vLLM ``python`` imports (from its package metadata; vLLM is not imported)."""
    code = _VERSION_CODE + "; import importlib.util as u; print(u.find_spec('vllm').submodule_search_locations[0])"
    done = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    lines = done.stdout.split()
    if done.returncode != 0 or len(lines) != 2:
        raise BacktestError(f"{python}: has no vLLM installed (install one: PYTHON={python} "
                            ".ci/install-vllm VERSION)")
    return Release(python, lines[0], lines[1])


def releases(args: Sequence[str]) -> list[Release]:
    """The releases of ``args``, oldest first; two interpreters of one release are refused."""
    found = sorted((release_of(interpreter(a)) for a in args), key=Release.key)
    versions = [r.version for r in found]
    for v in versions:
        if versions.count(v) > 1:
            raise BacktestError(f"vLLM {v} is given twice; give one interpreter per release")
    return found


def _environment(raw: bool) -> dict[str, str]:
    env = dict(os.environ)
    env.pop(SETTINGS_ENV, None)
    if raw:
        env[SETTINGS_ENV] = "none"
    return env


def run_campaign(release: Release, target: str, out_dir: Path, extra: Sequence[str], raw: bool) -> Run:
    """``fuzz --target`` on ``release``: its default campaign, its replay files under ``out_dir``."""
    cmd = [release.python, "-m", "asyncspec", "fuzz", "--target", target, "--json",
           "--out-dir", str(out_dir), *extra]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False, env=_environment(raw))
    try:
        report = json.loads(done.stdout)
    except ValueError:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return Run(release.version, target, done.returncode, error=last[:300])
    return Run(release.version, target, done.returncode, report)


def replays_on(release: Release, target: str, replay_file: str, raw: bool) -> bool:
    """Whether ``replay_file`` still diverges on ``release`` (``replay`` exits 1)."""
    cmd = [release.python, "-m", "asyncspec", "replay", replay_file, "--target", target]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False, env=_environment(raw))
    return done.returncode == 1


def changed_functions(newer: Release, older: Release) -> set[str] | None:
    """The functions ``drift`` (run by ``newer``'s Python against ``older``'s package) finds changed,
    moved or gone; None when drift could not run."""
    cmd = [newer.python, "-m", "asyncspec", "drift", older.package, "--json"]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    try:
        items = json.loads(done.stdout)["items"]
    except (ValueError, KeyError):
        return None
    return {str(i["symbol"]) for i in items}


def parts_of(report: dict[str, Any]) -> tuple[list[str], list[dict[str, Any]]]:
    """(parts run, parts skipped) of a campaign's JSON."""
    skipped = [{"part": s["part"], "reason": s["reason"]} for s in report.get("skipped_parts", [])]
    names = {s["part"] for s in skipped}
    parts = report.get("parts") or {}
    counts = parts.items() if isinstance(parts, dict) else ((p.get("part", ""), p.get("examples", 0))
                                                            for p in parts)
    run = [str(name) for name, n in counts if name not in names and (not isinstance(n, int) or n > 0)]
    return run, skipped


def bucket_entry(bucket: dict[str, Any], version: str) -> dict[str, Any]:
    """A bucket with its classification (``unclassified`` when the table has none)."""
    judged = classify(str(bucket["signature"]), version)
    entry = {**bucket, "classification": judged.classification if judged else "unclassified"}
    if judged is not None:
        entry.update({"why": judged.why, "fixed_in": judged.fixed_in, "upstream_change": judged.upstream_change,
                      "functions": list(judged.functions), "release_setting": judged.release_setting,
                      "finding": judged.finding})
    return entry


def _judged_bucket(bucket: dict[str, Any], run: Run, newer: Release | None, changed: set[str] | None,
                   raw: bool) -> dict[str, Any]:
    """``bucket`` classified, replayed on ``newer``, with the upstream change's functions that changed."""
    entry = {"target": run.target, **bucket_entry(bucket, run.version)}
    replay = Path(str(bucket.get("replay_file", "")))
    if newer is not None and replay.name:
        entry["next_release"] = {"version": newer.version, "reproduces": replays_on(newer, run.target, str(replay), raw)}
    if changed is not None and entry.get("functions"):
        entry["changed_in_next"] = sorted(f for f in entry["functions"] if f in changed)
    return entry


def release_entry(rel: Release, newer: Release | None, targets: Sequence[str], out_dir: Path,
                  extra: Sequence[str], raw: bool) -> dict[str, Any]:
    """One release's campaigns, parts and classified buckets."""
    changed = changed_functions(newer, rel) if newer is not None else None
    entry: dict[str, Any] = {"version": rel.version, "python": rel.python, "parts_run": [], "parts_skipped": [],
                             "buckets": [], "runs": []}
    for target in targets:
        run = run_campaign(rel, target, out_dir / rel.version / target, extra, raw)
        entry["runs"].append({"target": target, "exit": run.exit_code, "error": run.error,
                              "examples": run.report.get("examples"),
                              "release_settings": (run.report.get("vllm") or {}).get("release_settings", [])})
        ran, skipped = parts_of(run.report)
        entry["parts_run"] += [f"{target}:{p}" for p in ran]
        entry["parts_skipped"] += [{**s, "part": f"{target}:{s['part']}"} for s in skipped]
        for bucket in run.report.get("buckets", []):
            entry["buckets"].append(_judged_bucket(bucket, run, newer, changed, raw))
    return entry


def backtest(rels: Sequence[Release], targets: Sequence[str], out_dir: Path, extra: Sequence[str],
             raw: bool, progress: Any = None) -> dict[str, Any]:
    """Every release's entry, oldest first (``progress(line)`` after each)."""
    out: list[dict[str, Any]] = []
    for i, rel in enumerate(rels):
        newer = rels[i + 1] if i + 1 < len(rels) else None
        out.append(release_entry(rel, newer, targets, out_dir, extra, raw))
        if progress is not None:
            progress(f"vLLM {rel.version}: {len(out[-1]['buckets'])} bucket(s)")
    return {"raw": raw, "targets": list(targets), "releases": out}


def exit_code(report: dict[str, Any]) -> int:
    """0 every run ended and every bucket is classified; 1 otherwise."""
    for rel in report["releases"]:
        if any(r["error"] or r["exit"] not in (0, 1, 3) for r in rel["runs"]):
            return 1
        if any(b["classification"] == "unclassified" for b in rel["buckets"]):
            return 1
    return 0


def markdown(report: dict[str, Any]) -> str:
    """The docs table: per release, its parts and buckets, each classified with its upstream change."""
    rows = ["| release | target | exit | parts run | parts skipped | buckets (count) | classification | "
            "release setting / upstream change | next release |", "|---|---|---|---|---|---|---|---|---|"]
    for rel in report["releases"]:
        for run in rel["runs"]:
            target = run["target"]
            ran = [p.split(":", 1)[1] for p in rel["parts_run"] if p.startswith(target + ":")]
            skipped = [s["part"].split(":", 1)[1] for s in rel["parts_skipped"] if s["part"].startswith(target + ":")]
            buckets = [b for b in rel["buckets"] if b["target"] == target]
            head = (f"| {rel['version']} | {target} | {run['exit']} | {len(ran)} | {', '.join(skipped) or 'none'} ")
            if not buckets:
                rows.append(head + "| none | | | |")
            for b in buckets:
                how = b.get("release_setting") or b.get("upstream_change", "")
                nxt = b.get("next_release")
                gone = (f"{nxt['version']}: {'still there' if nxt['reproduces'] else 'gone'}" if nxt else "")
                signature = str(b["signature"]).replace("|", "\\|")  # a cell of a markdown table
                rows.append(head + f"| `{signature}` ({b['count']}) | {b['classification']} | {how} | {gone} |")
    return "\n".join(rows) + "\n"


def render(report: dict[str, Any]) -> str:
    """The terminal view: the table, then each bucket's replay file."""
    lines = [markdown(report)]
    for rel in report["releases"]:
        for b in rel["buckets"]:
            lines.append(f"{rel['version']} {b['target']}: {b['signature']} -> {b.get('replay_file', '')}")
    return "\n".join(lines)
