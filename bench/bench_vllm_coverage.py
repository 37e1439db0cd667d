"""Arcs of vLLM's files reached by the default campaigns, per file: before -> after, and vLLM's own core tests.

    python bench/bench_vllm_coverage.py measure [--tree DIR] --out FILE [--engine-examples N] [--jobs K]
    python bench/bench_vllm_coverage.py vllm-tests --tests DIR --out FILE
    python bench/bench_vllm_coverage.py compare BEFORE AFTER [--baseline FILE]
    python bench/bench_vllm_coverage.py gap AFTER --baseline FILE [--top N]

``measure`` runs the default campaigns of the asyncspec checkout at ``--tree``
(default: this one; an older commit in a ``git worktree`` is measured the same
way, so "before" needs no ``--vllm-coverage`` of its own): ``fuzz --target vllm``
(its default, 1800 examples) under coverage.py with the configuration
``--vllm-coverage`` uses (``core/vllm_coverage.rc_text``, every ``--jobs`` worker
followed), and ``fuzz --target vllm-engine`` (its default campaign, the parts of
``engine_parts.ENGINE_PARTS``) with its own ``--vllm-coverage``, which follows the
parts it runs in processes of their own (``--engine-examples N``: N cases of the V1
profile instead, under coverage.py), and writes both reports.  ``vllm-tests`` runs vLLM's
own ``tests/v1/core`` (from the 0.33.0 sdist, offline: docs/coverage.md) under
the same measurement.  ``compare`` prints, per file, the arcs each campaign
reached before and after, their union, and the core tests' arcs.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
_TOP = {"asyncspec.cli": "cli", "asyncspec.spec": "spec", "asyncspec.checker": "checker", "asyncspec.configs": "configs",
        "asyncspec.proofs": "proofs", "asyncspec.reference": "reference", "asyncspec.engine": "engine",
        "asyncspec.statemachine_tests": "statemachine_tests", "asyncspec.monitor": "monitor",
        "asyncspec.fidelity": "fidelity", "asyncspec.explorer": "explorer"}


def package_farm(tree: Path, into: Path) -> Path:
    """A folder whose ``asyncspec`` package is ``tree``'s (the pyproject's folder mapping, as links)."""
    package = into / "asyncspec"
    package.mkdir(parents=True)
    for item in (tree / "asyncspec").iterdir():
        if item.suffix == ".py":
            (package / item.name).symlink_to(item)
    for name, folder in _TOP.items():
        if (tree / folder).is_dir():
            (package / name.split(".", 1)[1]).symlink_to(tree / folder)
    return into


def run_measured(command: list[str], folder: Path, env: dict[str, str], cwd: Path,
                 counting: bool = False) -> dict[str, Any]:
    """``python -m coverage run`` of ``command`` with ``--vllm-coverage``'s configuration; its report
    (``counting``: with the counted runner scenarios, ``core/coverage_counts.py``)."""
    import coverage

    from asyncspec.statemachine_tests.core.vllm_coverage import build_report, measured_root, rc_text

    root = measured_root()
    rcfile = folder / "coveragerc"
    rcfile.write_text(rc_text(root, folder / "data", counting), encoding="utf-8")
    done = subprocess.run([sys.executable, "-m", "coverage", "run", f"--rcfile={rcfile}", *command],
                          cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    print(f"{' '.join(command[:6])}...: exit {done.returncode}", file=sys.stderr)
    cov = coverage.Coverage(config_file=str(rcfile))
    cov.combine(data_paths=[str(folder)])
    report = build_report(cov, root)
    report["command"] = command
    report["exit"] = done.returncode
    report["stdout_tail"] = done.stdout[-2000:]
    return report


def measure(tree: Path, engine_examples: int, jobs: int) -> dict[str, Any]:
    """The reports of the default campaigns of the checkout at ``tree``."""
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="bench-vllm-coverage-") as scratch:
        base = Path(scratch)
        farm = package_farm(tree, base / "farm")
        env = {**os.environ, "PYTHONPATH": str(farm), "VLLM_LOGGING_STREAM": "ext://sys.stderr"}
        work = base / "work"
        work.mkdir()
        runs = {"vllm": ["-m", "asyncspec", "fuzz", "--target", "vllm", "--jobs", str(jobs), "--json",
                         "--out-dir", str(base / "traces")],
                "vllm-engine": ["-m", "asyncspec", "fuzz", "--target", "vllm-engine", "--json", "--out-dir",
                                str(base / "traces"), *(["--examples", str(engine_examples)] if engine_examples else [])]}
        for target, command in runs.items():
            folder = base / target
            folder.mkdir()
            if target == "vllm-engine" and not engine_examples:
                out[target] = run_reporting(command, folder / "report.json", env, work)
                continue
            counting = target == "vllm-engine" and (tree / "statemachine_tests/core/coverage_counts.py").is_file()
            out[target] = run_measured(command, folder, env, work, counting)
    return out


def run_reporting(command: list[str], report: Path, env: dict[str, str], cwd: Path) -> dict[str, Any]:
    """``command`` with its own ``--vllm-coverage``: the engine target's default campaign runs its MRV2 parts
    in processes of their own, which only the campaign's own measurement follows (``vllm_coverage.INTO``)."""
    done = subprocess.run([sys.executable, *command, "--vllm-coverage", str(report)], cwd=cwd, env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    print(f"{' '.join(command[:6])}...: exit {done.returncode}", file=sys.stderr)
    if not report.is_file():
        raise SystemExit(f"bench_vllm_coverage: {' '.join(command[:6])} wrote no coverage report "
                         f"(exit {done.returncode}): {done.stderr[-500:]}")
    out: dict[str, Any] = json.loads(report.read_text())
    out.update(command=command, exit=done.returncode, stdout_tail=done.stdout[-2000:])
    return out


_OPT = {"opt-125m": (768, 12, 12, 3072, 768, True), "opt-350m": (1024, 24, 16, 4096, 512, False)}
"""The two OPT checkpoints tests/v1/core names: hidden size, layers, heads, FFN, embedding projection, pre-LN."""


def offline_hub(hub: Path) -> Path:
    """A Hugging Face cache holding only the ``config.json`` of facebook/opt-125m and opt-350m (no weights, no
    tokenizer: the core tests build ``ModelConfig`` with ``skip_tokenizer_init``), so they run offline."""
    revision = "0" * 40
    for name, (hidden, layers, heads, ffn, projection, pre_ln) in _OPT.items():
        base = hub / "hub" / f"models--facebook--{name}"
        (base / "refs").mkdir(parents=True, exist_ok=True)
        (base / "snapshots" / revision).mkdir(parents=True, exist_ok=True)
        (base / "refs" / "main").write_text(revision)
        config = {"architectures": ["OPTForCausalLM"], "model_type": "opt", "hidden_size": hidden,
                  "num_hidden_layers": layers, "num_attention_heads": heads, "ffn_dim": ffn, "vocab_size": 50272,
                  "max_position_embeddings": 2048, "word_embed_proj_dim": projection, "do_layer_norm_before": pre_ln,
                  "torch_dtype": "float16", "bos_token_id": 2, "eos_token_id": 2, "pad_token_id": 1,
                  "activation_function": "relu", "enable_bias": True}
        (base / "snapshots" / revision / "config.json").write_text(json.dumps(config))
    return hub


def vllm_tests(tests: Path) -> dict[str, Any]:
    """The report of vLLM's own ``tests/v1/core`` under the same measurement (offline, on a CPU)."""
    hub = offline_hub(tests / ".hf-home")
    env = {**os.environ, "HF_HOME": str(hub), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
           "VLLM_TARGET_DEVICE": "cpu"}
    with tempfile.TemporaryDirectory(prefix="bench-vllm-tests-") as scratch:
        return run_measured(["-m", "pytest", "-q", "-p", "no:cacheprovider", "--confcutdir=tests/v1",
                             "--continue-on-collection-errors", "--timeout=600", "-rfE", "tests/v1/core"],
                            Path(scratch), env, tests)


def file_arcs(report: dict[str, Any]) -> dict[str, list[int]]:
    from asyncspec.statemachine_tests.core.coverage_report import file_totals

    return {f: file_totals(e)["arcs"] for f, e in report["files"].items()}


def union_arcs(*reports: dict[str, Any]) -> dict[str, int]:
    """Per file, the arcs any of ``reports`` reached (total minus the arcs every one left unreached)."""
    out: dict[str, int] = {}
    for key in reports[0]["files"]:
        total = sum(f["arcs"][1] for f in reports[0]["files"][key]["functions"].values())
        unreached = [{(name, tuple(a)) for name, f in r["files"][key]["functions"].items() for a in f["unreached_arcs"]}
                     for r in reports]
        out[key] = total - len(set.intersection(*unreached))
    return out


def compare(before: dict[str, Any], after: dict[str, Any], baseline: dict[str, Any] | None) -> None:
    union_before = union_arcs(before["vllm"], before["vllm-engine"])
    union_after = union_arcs(after["vllm"], after["vllm-engine"])
    core = file_arcs(baseline) if baseline is not None else {}
    rows = [("file", "vllm before", "vllm after", "engine before", "engine after", "both before", "both after",
             "vLLM tests/v1/core", "arcs")]
    b_sched, a_sched = file_arcs(before["vllm"]), file_arcs(after["vllm"])
    b_eng, a_eng = file_arcs(before["vllm-engine"]), file_arcs(after["vllm-engine"])
    for key in after["vllm"]["files"]:
        rows.append((key.removeprefix("vllm/"), str(b_sched[key][0]), str(a_sched[key][0]), str(b_eng[key][0]),
                     str(a_eng[key][0]), str(union_before[key]), str(union_after[key]),
                     str(core[key][0]) if key in core else "-", str(a_sched[key][1])))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths))))


def unreached(report: dict[str, Any], key: str) -> dict[str, set[tuple[int, int]]]:
    """Per function of file ``key``, the arcs ``report`` left unreached."""
    functions = report["files"].get(key, {}).get("functions", {})
    return {name: {(a[0], a[1]) for a in f["unreached_arcs"]} for name, f in functions.items()}


def gap(after: dict[str, Any], baseline: dict[str, Any], top: int) -> None:
    """Per scheduler/KV file, the functions whose arcs the core tests reach and both campaigns miss
    (``+``) or the other way round (``-``): where the gap of ``compare``'s table lies."""
    for key in sorted(baseline["files"]):
        if "/core/" not in key and not key.endswith("request.py"):
            continue
        core = unreached(baseline, key)
        ours = [unreached(after[target], key) for target in ("vllm", "vllm-engine")]
        rows = []
        for name, core_missed in core.items():
            missed = set.intersection(*(o.get(name, set()) for o in ours))
            core_only, ours_only = len(missed - core_missed), len(core_missed - missed)
            if core_only or ours_only:
                rows.append((core_only - ours_only, name, core_only, ours_only))
        rows.sort(key=lambda r: (-r[0], r[1]))
        print(f"{key.removeprefix('vllm/')}: core tests ahead by {sum(r[0] for r in rows)} arcs")
        for net, name, core_only, ours_only in rows[:top]:
            print(f"  {net:+5d}  {name}  (core tests only {core_only}, campaigns only {ours_only})")


def tests_problem(tests: Path) -> str | None:
    """Why ``tests`` cannot serve as ``vllm-tests --tests``, or None."""
    if not (tests / "tests" / "v1" / "core").is_dir():
        return f"--tests {tests}: no tests/v1/core under it; pass the folder that holds the sdist's tests/"
    if (tests / "vllm").exists():
        return (f"--tests {tests}: it holds a vllm/ folder, which would shadow the installed vLLM that is measured;"
                " copy the sdist's tests/ into a folder of its own")
    return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="mode", required=True)
    m = sub.add_parser("measure")
    m.add_argument("--tree", type=Path, default=ROOT)
    m.add_argument("--out", type=Path, required=True)
    m.add_argument("--engine-examples", type=int, default=0,
                   help="cases of the engine target's V1 profile instead of its default campaign (0: the campaign)")
    m.add_argument("--jobs", type=int, default=2)
    t = sub.add_parser("vllm-tests")
    t.add_argument("--tests", type=Path, required=True, help="a folder holding vLLM 0.33.0's tests/ (the sdist's)")
    t.add_argument("--out", type=Path, required=True)
    c = sub.add_parser("compare")
    c.add_argument("before", type=Path)
    c.add_argument("after", type=Path)
    c.add_argument("--baseline", type=Path, default=None)
    g = sub.add_parser("gap")
    g.add_argument("after", type=Path)
    g.add_argument("--baseline", type=Path, required=True)
    g.add_argument("--top", type=int, default=12)
    args = parser.parse_args()
    if args.mode == "measure":
        args.out.write_text(json.dumps(measure(args.tree.resolve(), args.engine_examples, args.jobs), sort_keys=True))
    elif args.mode == "vllm-tests":
        problem = tests_problem(args.tests.resolve())
        if problem is not None:
            print(f"bench_vllm_coverage: {problem}", file=sys.stderr)
            raise SystemExit(2)
        args.out.write_text(json.dumps(vllm_tests(args.tests.resolve()), sort_keys=True))
    elif args.mode == "gap":
        gap(json.loads(args.after.read_text()), json.loads(args.baseline.read_text()), args.top)
    else:
        load = lambda p: json.loads(p.read_text())  # noqa: E731
        compare(load(args.before), load(args.after), load(args.baseline) if args.baseline else None)


if __name__ == "__main__":
    main()
