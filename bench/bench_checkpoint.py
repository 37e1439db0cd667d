"""Checkpoint size and write + read time of the fast and the compiled explorer on one config (prints,
asserts nothing beyond the read-back store being the written one).

The config is explored whole, then its store, tables and findings are written as
a checkpoint (``checker/checkpoint.py``; the compiled explorer's C store:
``checker/compiled_checkpoint.py``) and read back into a fresh explorer, as
``check --checkpoint DIR --resume`` would (the compiled read includes every check
``csrc/snapshot.h`` makes).

    python3 bench/bench_checkpoint.py [--config async-d2-large] [--repeat 3]
"""
from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any


def round_trips(name: str, repeat: int, save: Callable[[Path], None], fresh: Callable[[Path], Any],
                load: Callable[[Any, Path], None]) -> tuple[list[float], list[float], int, Any]:
    """``save`` a checkpoint of ``name``, then ``load`` it into a ``fresh`` explorer (built untimed),
    ``repeat`` times: the write and read seconds, the file's size, and the last explorer loaded."""
    writes, reads, loaded = [], [], None
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"{name}.ckpt"
        for _ in range(repeat):
            t0 = time.perf_counter()
            save(path)
            writes.append(time.perf_counter() - t0)
            loaded = fresh(path)
            t0 = time.perf_counter()
            load(loaded, path)
            reads.append(time.perf_counter() - t0)
        size = path.stat().st_size
    return writes, reads, size, loaded


def report(title: str, states: int, size: int, writes: list[float], reads: list[float], repeat: int) -> None:
    """The measurement's two lines: ``title``, then the size per state and the best times."""
    print(title)
    print(f"  checkpoint {size:,} bytes ({size / max(states, 1):.1f} per state); "
          f"write {min(writes) * 1e3:.0f} ms, read {min(reads) * 1e3:.0f} ms (best of {repeat})")


def measure(name: str, repeat: int) -> None:
    """Explore ``name``, then write and read its checkpoint ``repeat`` times; print the best times."""
    from asyncspec.checker import checkpoint as ckpt
    from asyncspec.checker import configs as cfgs
    from asyncspec.checker.fast_explorer import FastExplorer

    cfg = cfgs.named_configs()[name]
    t0 = time.perf_counter()
    e = FastExplorer(cfg)
    e.run()
    explored = time.perf_counter() - t0

    def save(path: Path) -> None:
        e.checkpoint = path
        e._save()

    def load(r: FastExplorer, path: Path) -> None:
        r._load(ckpt.load(path, cfg, r.symmetry, r._model_name()))
    writes, reads, size, r = round_trips(name, repeat, save,
                                         lambda path: FastExplorer(cfg, checkpoint=path, resume=True), load)
    assert r.store.snapshot() == e.store.snapshot()
    report(f"{name}: {len(e.store):,} states, {len(e.store.edge_target):,} edges, explored in {explored:.1f} s",
           len(e.store), size, writes, reads, repeat)


def measure_compiled(name: str, repeat: int) -> None:
    """The same for the compiled explorer (skipped with a line where the extension is not built)."""
    from asyncspec.checker import compiled, compiled_checkpoint as cc
    from asyncspec.checker import configs as cfgs

    cfg = cfgs.named_configs()[name]
    if (why := compiled.not_covered(cfg)) is not None:
        print(f"{name}: compiled explorer skipped ({why})")
        return
    t0 = time.perf_counter()
    e = compiled.CompiledExplorer(cfg)
    e.run()
    explored = time.perf_counter() - t0

    def save(path: Path) -> None:
        e.checkpoint = path
        e._save()

    def load(r: compiled.CompiledExplorer, path: Path) -> None:
        snapshot, found = cc.load(path, cfg, compiled._build())
        cc.restore(r.c, snapshot, found, path)
    writes, reads, size, r = round_trips(name, repeat, save,
                                         lambda path: compiled.CompiledExplorer(cfg, checkpoint=path, resume=True), load)
    assert r.c.snapshot() == e.c.snapshot()
    states = e.c.stats()["states"]
    report(f"{name} (compiled): {states:,} states, explored in {explored:.2f} s", states, size, writes, reads, repeat)


def main() -> None:
    """The command line above."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", default="async-d2-large")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    measure(args.config, args.repeat)
    measure_compiled(args.config, args.repeat)


if __name__ == "__main__":
    main()
