"""Who runs the spec's next-state relation for the fast explorer: this process,
K local processes (``--jobs K``) or Ray workers (``--ray ADDRESS``).

An expander gets a batch of known states, in index order, and returns each
one's transitions (``spec.engine.next_states``).  The parallel ones split the
batch by state hash (a state's component ids; the same state always goes to
the same worker, as in distributed TLC) and put the answers back in batch
order; the explorer integrates them in that order, so the result is the
single-process result whatever the number of workers.

Worker processes are forked (``--jobs``), so a spec mutant installed in this
process is in theirs too; Ray workers import the installed spec afresh.
"""
from __future__ import annotations

import multiprocessing
import signal
from typing import Any, Protocol

from asyncspec.spec import engine
from asyncspec.spec.config import SpecConfig
from asyncspec.spec.engine import Transition
from asyncspec.spec.state import EngineState

Item = tuple[tuple[int, ...], EngineState]  # a state's component ids, and the state


class Expander(Protocol):
    """Runs ``next_states`` on batches of states."""

    batch: int  # how many states to hand over at once

    def expand(self, items: list[Item]) -> list[list[Transition]]:
        """The transitions of each state, in the order given."""

    def close(self) -> None:
        """Release workers."""


class LocalExpander:
    """In this process."""

    batch = 64

    def __init__(self, cfg: SpecConfig) -> None:
        self.cfg = cfg

    def expand(self, items: list[Item]) -> list[list[Transition]]:
        cfg = self.cfg
        return [engine.next_states(cfg, s) for _, s in items]

    def close(self) -> None:
        pass


def partition(items: list[Item], workers: int) -> list[list[tuple[int, EngineState]]]:
    """Positions and states of ``items`` per worker, by the hash of the state's ids."""
    parts: list[list[tuple[int, EngineState]]] = [[] for _ in range(workers)]
    for position, (ids, s) in enumerate(items):
        parts[hash(ids) % workers].append((position, s))  # int tuples hash the same in every process
    return parts


def merge(size: int, answers: list[list[tuple[int, list[Transition]]]]) -> list[list[Transition]]:
    """Put each worker's answers back in batch order."""
    out: list[list[Transition]] = [[] for _ in range(size)]
    for part in answers:
        for position, transitions in part:
            out[position] = transitions
    return out


_worker_cfg: SpecConfig | None = None


def _init_worker(cfg: SpecConfig) -> None:
    global _worker_cfg
    _worker_cfg = cfg
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the explorer's to handle


def _expand_part(part: list[tuple[int, EngineState]]) -> list[tuple[int, list[Transition]]]:
    assert _worker_cfg is not None
    return [(position, engine.next_states(_worker_cfg, s)) for position, s in part]


class PoolExpander:
    """``jobs`` forked processes of this machine."""

    def __init__(self, cfg: SpecConfig, jobs: int) -> None:
        self.jobs = jobs
        self.batch = 256 * jobs
        context = multiprocessing.get_context("fork")
        self._pool = context.Pool(jobs, initializer=_init_worker, initargs=(cfg,))

    def expand(self, items: list[Item]) -> list[list[Transition]]:
        return merge(len(items), self._pool.map(_expand_part, partition(items, self.jobs)))

    def close(self) -> None:
        self._pool.close()
        self._pool.join()


class _RayWorker:
    """One Ray actor: the spec, a config, and ``next_states``."""

    def __init__(self, cfg: SpecConfig) -> None:
        self.cfg = cfg

    def expand(self, part: list[tuple[int, EngineState]]) -> list[tuple[int, list[Transition]]]:
        return [(position, engine.next_states(self.cfg, s)) for position, s in part]


class RayExpander:
    """``jobs`` Ray actors on the cluster at ``address`` (``local``: start one on this machine)."""

    def __init__(self, cfg: SpecConfig, jobs: int, address: str) -> None:
        try:
            import ray
        except ImportError:
            raise RuntimeError("--ray needs Ray: pip install 'asyncspec[ray]'") from None
        self._ray: Any = ray
        self._started = not ray.is_initialized()
        if self._started:
            if address == "local":
                ray.init(num_cpus=jobs, include_dashboard=False, log_to_driver=False,
                         configure_logging=False)
            else:
                ray.init(address=address, include_dashboard=False, log_to_driver=False,
                         configure_logging=False)
        actor = ray.remote(num_cpus=1)(_RayWorker)
        self._workers = [actor.remote(cfg) for _ in range(jobs)]
        self.batch = 256 * jobs

    def expand(self, items: list[Item]) -> list[list[Transition]]:
        parts = partition(items, len(self._workers))
        futures = [w.expand.remote(p) for w, p in zip(self._workers, parts)]
        return merge(len(items), self._ray.get(futures))

    def close(self) -> None:
        for w in self._workers:
            self._ray.kill(w)
        if self._started:
            self._ray.shutdown()


def make_expander(cfg: SpecConfig, jobs: int, ray_address: str | None) -> Expander | None:
    """The expander for ``--jobs``/``--ray`` (``None``: this process)."""
    if ray_address is not None:
        return RayExpander(cfg, jobs, ray_address)
    if jobs > 1:
        return PoolExpander(cfg, jobs)
    return None
