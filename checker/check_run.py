"""One config checked by the chosen explorer, with what it cost (``asyncspec check``).

``--explorer compiled`` (the default) is ``checker/compiled.py``, the C encoding of the spec,
where it covers the config, is built and no option it lacks is given (``--jobs K`` runs it on
K threads, up to 16, or with ``--ray`` on K Ray actors; ``--checkpoint`` saves its own checkpoints, and ``--resume`` of the
fast explorer's goes on with the fast explorer); elsewhere it is the fast explorer, and the JSON ``explorer``
field says why (``fast (compiled: REASON)``) when the config or the checkpoint was the reason.  ``fast`` is ``checker/fast_explorer.py``;
``plain`` is ``checker/bfs.py``; all explore the spec's model (``checker/spec_model.py``)
and give the same result (``tests/test_fast_explorer.py``, ``tests/test_compiled_explorer.py``);
the plain one has no ``--jobs``, ``--ray`` or checkpoints.  Errors in these settings are
``RunError``s with a one-line message (the CLI exits 2).
"""
from __future__ import annotations

import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from asyncspec.spec.config import SpecConfig

from asyncspec.checker.bfs import Explorer, Progress
from asyncspec.checker.checkpoint import CheckpointError
from asyncspec.checker.compiled import NOT_BUILT, CompiledExplorer, not_covered
from asyncspec.checker.compiled_checkpoint import written_by
from asyncspec.checker.compiled_ray import RayCompiled
from asyncspec.checker.fast_explorer import FastExplorer
from asyncspec.checker.fast_parallel import make_expander
from asyncspec.checker.measure import measured, parse_memory, rss_bytes
from asyncspec.checker.ray_address import unreachable
from asyncspec.checker.result import CheckResult

ExplorerName = Literal["compiled", "fast", "plain"]
EXPLORERS: tuple[ExplorerName, ...] = ("compiled", "fast", "plain")


class RunError(ValueError):
    """Settings that cannot be honoured; the message is one line."""


@dataclass(frozen=True)
class RunSettings:
    """How to explore: which explorer, how many workers, limits, checkpoints."""

    explorer: ExplorerName = "compiled"
    symmetry: bool = True
    max_states: int | None = None
    jobs: int = 1
    ray: str | None = None  # a Ray address, or "local"
    max_memory: int | None = None  # bytes
    checkpoint_dir: Path | None = None
    checkpoint_seconds: float = 60.0
    resume: bool = False

    def checkpoint_for(self, cfg: SpecConfig) -> Path | None:
        return None if self.checkpoint_dir is None else self.checkpoint_dir / f"{cfg.name}.ckpt"


def settings(explorer: str, *, symmetry: bool, max_states: int | None, jobs: int, ray: str | None,
             max_memory: str | None, checkpoint_dir: Path | None, checkpoint_seconds: float,
             resume: bool) -> RunSettings:
    """Validated settings; ``RunError`` names the first bad one."""
    if explorer not in EXPLORERS:
        raise RunError(f"--explorer must be one of {', '.join(EXPLORERS)}, not {explorer!r}")
    if jobs < 1:
        raise RunError(f"--jobs must be at least 1 (got {jobs})")
    if not math.isfinite(checkpoint_seconds) or checkpoint_seconds <= 0:
        raise RunError(f"--checkpoint-every must be a finite number of seconds > 0 (got {checkpoint_seconds})")
    if resume and checkpoint_dir is None:
        raise RunError("--resume needs --checkpoint DIR (where the checkpoints are)")
    limit = None
    if max_memory is not None:
        try:
            limit = parse_memory(max_memory)
        except ValueError as exc:
            raise RunError(f"--max-memory: {exc}") from None
        held = rss_bytes()
        if limit <= held:
            raise RunError(f"--max-memory {max_memory} is below what the process holds before exploring "
                           f"({held // 2**20} MiB); raise it")
    if ray is not None and (problem := unreachable(ray)):
        raise RunError(problem)
    fast_only = {"--jobs": jobs > 1, "--ray": ray is not None, "--max-memory": limit is not None,
                 "--checkpoint": checkpoint_dir is not None}
    if explorer == "plain" and any(fast_only.values()):
        used = next(k for k, v in fast_only.items() if v)
        raise RunError(f"{used} needs --explorer fast (the plain explorer is kept as it was)")
    return RunSettings(explorer, symmetry, max_states, jobs, ray, limit,
                       checkpoint_dir, checkpoint_seconds, resume)


@dataclass
class Checked:
    """A config's result and what checking it cost."""

    result: CheckResult
    explorer: str
    cpu_seconds: float
    bytes_per_state: float

    def to_json(self) -> dict[str, Any]:
        """The measurement fields ``check --json`` adds to a config's result."""
        return {"explorer": self.explorer, "cpu_seconds": round(self.cpu_seconds, 3),
                "bytes_per_state": round(self.bytes_per_state, 1)}


def check_config(cfg: SpecConfig, s: RunSettings, progress: Progress | None = None) -> Checked:
    """Explore ``cfg`` as ``s`` says; measured in this process (start-up excluded).

    A sliding-window group's table (``swa_block_tables``) is renamed by block-id symmetry
    with the others (``checker/symmetry.py``).  A KV connector's state (``kv_holding``,
    ``kv_transfer``) holds no block id: checked as it is.
    """
    if s.explorer == "compiled":
        why = not_covered(cfg, s.symmetry) or resumes_on_fast(cfg, s)
        if why is None and not options_refuse_compiled(s):
            return _run_compiled(cfg, s, progress)
        fallback = _run_fast(cfg, s, progress)
        if why is not None:  # the config, not an option, sent it to the fast explorer: say why
            note_not_built(why)
            fallback.explorer = f"{fallback.explorer} (compiled: {why})"
        return fallback
    if s.explorer == "plain":
        plain = Explorer(cfg, s.symmetry, s.max_states, True, progress)
        m = measured(plain.run, lambda _: plain.graph)
        return _checked(m.value, "plain", m.cpu_seconds, m.bytes_held)
    return _run_fast(cfg, s, progress)


def options_refuse_compiled(s: RunSettings) -> bool:
    """Whether an option only the fast explorer has is given (``--jobs`` above 16 threads)."""
    return s.jobs > 16 and s.ray is None


def _run_compiled(cfg: SpecConfig, s: RunSettings, progress: Progress | None) -> Checked:
    """The compiled explorer on ``s.jobs`` threads, or with ``--ray`` on ``s.jobs`` Ray actors."""
    try:
        remote = None if s.ray is None else RayCompiled(cfg, s.jobs, s.ray)
    except RuntimeError as exc:
        raise RunError(str(exc)) from None
    compiled = CompiledExplorer(cfg, s.max_states, progress, s.max_memory, 1 if remote else s.jobs,
                                s.checkpoint_for(cfg), s.checkpoint_seconds, s.resume, remote)
    try:
        m_c = measured(compiled.run, lambda _: compiled.c)
    except CheckpointError as exc:
        raise RunError(str(exc)) from None
    finally:
        if remote is not None:
            remote.close()
    label = "compiled" if s.jobs == 1 and s.ray is None else (
        f"compiled, ray x{s.jobs}" if s.ray else f"compiled x{s.jobs}")
    return _checked(m_c.value, label, m_c.cpu_seconds, m_c.bytes_held)


def resumes_on_fast(cfg: SpecConfig, s: RunSettings) -> str | None:
    """Why ``--resume`` goes on with the fast explorer: its checkpoint is one the compiled explorer did not
    write (the fast explorer's, or no readable checkpoint at all: the fast explorer's checks then name
    what is wrong with it); None otherwise."""
    path = s.checkpoint_for(cfg)
    if not s.resume or path is None or not path.exists() or written_by(path) == "compiled":
        return None
    return "--resume: the checkpoint is not the compiled explorer's"


_NOTED: list[str] = []


def note_not_built(why: str) -> None:
    """The one line, once per process, that the C extension is missing (stderr)."""
    if why == NOT_BUILT and not _NOTED:
        _NOTED.append(why)
        print(f"asyncspec: {NOT_BUILT}; using the fast explorer", file=sys.stderr)


def _run_fast(cfg: SpecConfig, s: RunSettings, progress: Progress | None) -> Checked:
    try:
        expander = make_expander(cfg, s.jobs, s.ray, s.symmetry)
    except RuntimeError as exc:
        raise RunError(str(exc)) from None
    fast = FastExplorer(cfg, s.symmetry, s.max_states, True, progress, s.max_memory,
                        s.checkpoint_for(cfg), s.checkpoint_seconds, s.resume, expander)
    try:
        m = measured(fast.run, lambda _: (fast.store, fast.packer, fast.memo))
    except CheckpointError as exc:
        raise RunError(str(exc)) from None
    label = "fast" if s.ray is None and s.jobs == 1 else (f"fast, ray x{s.jobs}" if s.ray else f"fast x{s.jobs}")
    return _checked(m.value, label, m.cpu_seconds, m.bytes_held)


def _checked(r: CheckResult, explorer: str, cpu: float, held: int) -> Checked:
    return Checked(r, explorer, cpu, held / max(r.distinct_states, 1))
