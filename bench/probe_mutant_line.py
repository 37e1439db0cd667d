"""Evidence for an argued-equivalent vLLM mutant: what one of vLLM's expressions evaluates to
during the ``--target vllm`` self-test campaign (docs/fuzzing.md, "Self-test: mutate-vllm").

    python bench/probe_mutant_line.py --file v1/core/sched/scheduler.py \
        --function Scheduler.schedule --line 'if X:' --expr X [--on MUTANT] [--examples N]

The line (found exactly once in the function, as a mutant's anchor is) is rewritten so that
``--expr`` is recorded each time the line runs: wrapped where it stands when the line contains
it, else evaluated just before the line, in its scope.  vLLM behaves exactly as installed; the
script prints how often the line ran and the truth values the expression took.  ``--on MUTANT`` probes the line with that mutant applied too (both lines in
the same module), to see what the mutant's own change leads to.  The campaign is the
self-test's (``mutant_worker.scheduler_campaign``, seed 0), run to the end: no divergence
stops it unless the mutant causes one.
"""
from __future__ import annotations

import argparse
import builtins
import collections
import json
import sys
from typing import Any

from asyncspec.engine.vllm.vllm_mutants import MUTANTS_BY_ID, VllmMutant
from asyncspec.engine.vllm.overlay import MutantFinder, _MutantLoader, apply, installed_source_path

SEEN: collections.Counter[str] = collections.Counter()


def _probe(value: Any) -> Any:
    SEEN[f"{bool(value)}"] += 1
    return value


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="probe_mutant_line")
    p.add_argument("--file", required=True)
    p.add_argument("--function", required=True)
    p.add_argument("--line", required=True, help="the exact line, without indentation")
    p.add_argument("--expr", required=True, help="a sub-expression of the line to record")
    p.add_argument("--on", default=None, help="a mutant of the same file to apply as well")
    p.add_argument("--examples", type=int, default=1000)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    if args.expr in args.line:  # wrapped where it stands
        probed = args.line.replace(args.expr, f"_asyncspec_probe({args.expr})", 1)
    elif args.line.endswith((":", "(", "[", ",")):
        p.error("--expr is not in --line, and the line does not stand alone (it opens a block or a bracket)")
    else:  # recorded just before the line runs, in the same scope
        probed = f"_asyncspec_probe({args.expr}); {args.line}"
    probe = VllmMutant("probe", args.file, args.function, "", args.line, probed, "")
    base = MUTANTS_BY_ID[args.on] if args.on else None
    if base is not None and base.file != probe.file:
        p.error("--on names a mutant of another file")
    path = installed_source_path(probe)
    source = path.read_text(encoding="utf-8")
    if base is not None:
        source = apply(base, source)
    code = compile(apply(probe, source), str(path), "exec", dont_inherit=True)
    builtins._asyncspec_probe = _probe  # type: ignore[attr-defined]
    finder = MutantFinder.__new__(MutantFinder)
    finder.name = "vllm." + probe.file.removesuffix(".py").replace("/", ".")
    finder.path, finder.loader = path, _MutantLoader(probe, code)
    sys.meta_path.insert(0, finder)

    from asyncspec.statemachine_tests.mutation.mutant_worker import scheduler_campaign

    run, found, detail = scheduler_campaign(args.examples, args.seed)
    print(json.dumps({"file": args.file, "function": args.function, "expr": args.expr, "on": args.on,
                      "examples": run, "divergence": detail if found else None,
                      "line_ran": sum(SEEN.values()), "values": dict(SEEN)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
