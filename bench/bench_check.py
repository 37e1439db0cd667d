"""Benchmark: states per CPU-second and bytes per state: compiled, fast and plain explorers.

Run: ``python bench/bench_check.py [--large NAME] [--huge NAME] [--plain-cap N] [--fast-cap N]
[--profile] [--jobs K]``.  Every measurement is one ``asyncspec check --json``
in a fresh process (so the memory figure is that run's alone): ``cpu_seconds``
(exploring and checking, start-up excluded) and ``bytes_per_state`` (the
resident memory the run added at its peak, per distinct state).

1. On the largest config of the slow set (``--large``, default async-d2-large)
   the three explorers run to completion (``--explorer compiled``, ``fast``,
   ``plain``), in this one run; the ratios are printed (the bar of the compiled
   explorer: 10x the fast one's states per CPU-second).
2. On a config of at least 5M states (``--huge``, default the campaign config
   async-d2-5req) the compiled explorer runs to completion; the plain one, which
   would need about 2.3 KB per state, runs its first ``--plain-cap`` states
   (default 500,000), the fast one its first ``--fast-cap`` (default the same;
   0: the whole config, about 7 minutes on one core), and the compiled one again
   on those first states, so each ratio compares the same states.
3. ``--profile``: where the fast explorer's time goes on ``--large`` (cProfile,
   cumulative time of each part).  ``--jobs K``: 1..K workers, compiled
   (threads, on ``--huge``) and fast (processes, on ``--large``): wall seconds
   and the speed-up (which needs free cores; a loaded shared machine shows little).

Nothing is asserted: these machines are shared and noisy.
"""
from __future__ import annotations

import argparse
import cProfile
import json
import pstats
import subprocess
import sys
from typing import Any


def check(name: str, *extra: str) -> dict[str, Any]:
    """One ``asyncspec check --json`` of ``name`` in a fresh process; its config entry."""
    p = subprocess.run([sys.executable, "-m", "asyncspec", "check", "-c", name, "--json", *extra],
                       capture_output=True, text=True)
    if p.returncode not in (0, 3):
        raise SystemExit(f"check {name} {' '.join(extra)} failed ({p.returncode}): {p.stderr.strip()}")
    entry: dict[str, Any] = json.loads(p.stdout)["configs"][0]
    return entry


def rate(c: dict[str, Any]) -> float:
    return float(c["distinct_states"]) / max(float(c["cpu_seconds"]), 1e-9)


def row(label: str, c: dict[str, Any]) -> None:
    note = " (partial: " + c["partial_reason"] + ")" if c["partial"] else ""
    print(f"  {label:22s} {c['distinct_states']:>10,d} states {c['cpu_seconds']:>9.1f} CPU-s "
          f"{rate(c):>10,.0f} states/CPU-s {c['bytes_per_state']:>8,.0f} B/state{note}")


def ratio(label: str, a: dict[str, Any], b: dict[str, Any]) -> None:
    print(f"  ratio {label}: {rate(a) / rate(b):.1f}x states per CPU-second, "
          f"{b['bytes_per_state'] / max(a['bytes_per_state'], 1e-9):.1f}x fewer bytes per state")


def compare(name: str) -> None:
    print(f"\n{name}:")
    runs = {e: check(name, "--explorer", e) for e in ("compiled", "fast", "plain")}
    for e, c in runs.items():
        row(f"{e} ({c['explorer']})" if c["explorer"] != e else e, c)
    ratio("compiled/fast", runs["compiled"], runs["fast"])
    ratio("compiled/plain", runs["compiled"], runs["plain"])
    ratio("fast/plain", runs["fast"], runs["plain"])


def scaling(name: str, explorer: str, jobs: int) -> None:
    """Wall seconds with 1, 2, ... ``jobs`` workers (threads for compiled, processes for fast)."""
    print(f"\n--jobs on {name}, {explorer} explorer (wall seconds; CPU-seconds in brackets):")
    base = None
    for k in range(1, jobs + 1):
        c = check(name, "--explorer", explorer, "--jobs", str(k))
        base = base or c
        print(f"  --jobs {k}: {c['seconds']:7.2f} s ({c['cpu_seconds']:.2f}) {base['seconds'] / c['seconds']:5.2f}x, "
              f"explorer {c['explorer']}, same counts: {c['distinct_states'] == base['distinct_states']}")


def compare_huge(name: str, plain_cap: int, fast_cap: int) -> None:
    print(f"\n{name}:")
    whole = check(name, "--explorer", "compiled")
    row("compiled", whole)
    fast = check(name, "--explorer", "fast", *(("--max-states", str(fast_cap)) if fast_cap else ()))
    row("fast", fast)
    same = whole if not fast_cap else check(name, "--explorer", "compiled", "--max-states", str(fast_cap))
    if fast_cap:
        row("compiled, same states", same)
    ratio("compiled/fast", same, fast)
    plain = check(name, "--explorer", "plain", "--max-states", str(plain_cap))
    row("plain", plain)
    if plain_cap != fast_cap:
        same = check(name, "--explorer", "compiled", "--max-states", str(plain_cap))
        row("compiled, same states", same)
    ratio("compiled/plain", same, plain)


PARTS = (
    ("spec next_states", "engine.py", "next_states"),
    ("property checks", "memo.py", "check"),
    ("canonical form + interning", "packed.py", "canonical_ids"),
    ("state store", "store.py", "add"),
    ("decoding states", "packed.py", "decode"),
    ("graph properties", "fast_explorer.py", "_check_eventually"),
)


def profile(name: str) -> None:
    from asyncspec.checker import configs as cfgs
    from asyncspec.checker.fast_explorer import FastExplorer

    e = FastExplorer(cfgs.named_configs()[name])
    prof = cProfile.Profile()
    prof.runcall(e.run)
    stats: Any = getattr(pstats.Stats(prof), "stats")  # {(file, line, function): (cc, nc, tt, ct, callers)}
    total = max(ct for (_, _, fn), (_, _, _, ct, _) in stats.items() if fn == "run")
    print(f"\nprofile of the fast explorer on {name} (cProfile, {total:.1f} s profiled):")
    for label, file, function in PARTS:
        ct = sum(v[3] for (f, _, fn), v in stats.items() if f.endswith(file) and fn == function)
        print(f"  {label:28s} {100 * ct / total:5.1f}%")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--large", default="async-d2-large")
    ap.add_argument("--huge", default="async-d2-5req", help="a config of at least 5M states ('' to skip)")
    ap.add_argument("--plain-cap", type=int, default=500_000)
    ap.add_argument("--fast-cap", type=int, default=500_000, help="0: the fast explorer runs the whole --huge")
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--jobs", type=int, default=0)
    args = ap.parse_args()
    compare(args.large)
    if args.huge:
        compare_huge(args.huge, args.plain_cap, args.fast_cap)
    if args.jobs > 1:  # the compiled explorer finishes --large in well under a second: its curve on --huge
        scaling(args.huge or args.large, "compiled", args.jobs)
        scaling(args.large, "fast", args.jobs)
    if args.profile:
        profile(args.large)


if __name__ == "__main__":
    main()
