"""Who expands states for the fast explorer: this process, K local processes
(``--jobs K``) or Ray actors (``--ray ADDRESS``).

An expander gets a batch of known states (their component ids, in index
order) and returns each one's successors as (action, events, canonical
component ids, property answers or ``None``).  In this process the answers
are left to the explorer, which computes them for new states only.

A worker does everything that depends on one state alone: it runs the
model's ``next_states`` (``checker/spec_model.py``: the spec's), puts each successor in canonical form on its own component
tables (``checker/packed.py``) and evaluates the *always* properties on it
(``checker/memo.py``).  Only ids travel: the explorer sends each worker the
component values it has not seen yet with each batch, and each worker
returns the values it created since its last answer, so both sides translate
ids through per-worker tables.  A batch is split by state hash (a state's
component ids: the same state always goes to the same worker, as in
distributed TLC), and the answers are put back in batch order; the explorer
integrates them in that order, so the result is the single-process result
whatever the number of workers (``tests/test_fast_explorer.py``).

Workers explore the explorer's model: the scheduler spec of the config by
default (seven components), any other ``checker/model.py`` model stored whole
(``checker/whole.py``).  Worker processes are forked (``--jobs``), so a spec
mutant installed in this process is in theirs too; Ray workers import the
installed spec afresh.
"""
from __future__ import annotations

import multiprocessing
import signal
from typing import Any, Protocol

from asyncspec.spec.config import SpecConfig
from asyncspec.spec.engine import Action

from asyncspec.checker.memo import PropertyMemo
from asyncspec.checker.model import Model, Step
from asyncspec.checker.packed import Packer
from asyncspec.checker.ray_address import RayActors
from asyncspec.checker.spec_model import SpecModel
from asyncspec.checker.whole import Checks, Codec, ModelChecks, WholePacker

Ids = tuple[int, ...]
Answers = list[tuple[str, str]]  # (property, message) of each property the state violates
Successor = tuple[Action, frozenset[str], Ids, "Answers | None"]
_Wire = tuple[int, int, Ids, Answers]  # action, events, ids: all in the worker's numbering


class Expander(Protocol):
    """Computes the successors of batches of states."""

    batch: int  # how many states to hand over at once

    def open(self, packer: Codec, model: Model[Any, Any]) -> None:
        """Use ``packer``'s component tables and ``model`` (the explorer's) from now on."""

    def expand(self, batch: list[Ids]) -> list[list[Successor]]:
        """The successors of each state, in the order given."""

    def close(self) -> None:
        """Release workers."""


class LocalExpander:
    """In this process, on the explorer's own tables."""

    batch = 64

    def __init__(self, cfg: SpecConfig) -> None:
        self.model: Model[Any, Any] = SpecModel(cfg)
        self.packer: Codec = Packer()

    def open(self, packer: Codec, model: Model[Any, Any]) -> None:
        self.packer, self.model = packer, model

    def expand(self, batch: list[Ids]) -> list[list[Successor]]:
        next_states, p = self.model.next_states, self.packer
        return [[(t.action, t.events, p.canonical_ids(t.state), None)
                 for t in next_states(p.decode(ids))] for ids in batch]

    def close(self) -> None:
        pass


# ---------------------------------------------------------------- the worker side


class WorkerState:
    """One worker's tables: its own ids, the explorer's ids of the values it was sent."""

    def __init__(self, cfg: SpecConfig, symmetry: bool, model: Model[Any, Any] | None = None) -> None:
        self.model = model or SpecModel(cfg, symmetry)
        self.packer, self.memo = codec_for(self.model)
        arity = len(self.packer.values)
        self.theirs: list[list[int]] = [[] for _ in range(arity)]  # explorer's id -> ours
        self.reported = [0] * arity  # our values the explorer has
        self.actions: dict[Action, int] = {}
        self.events: dict[frozenset[str], int] = {}
        self.new_actions: list[Action] = []
        self.new_events: list[frozenset[str]] = []

    def handle(self, sent: list[list[Any]], part: list[tuple[int, Ids]]) -> tuple[Any, ...]:
        """Learn the ``sent`` values, expand ``part`` (position, explorer's ids); the answer."""
        p = self.packer
        for c, values in enumerate(sent):
            self.theirs[c].extend(p.intern(c, v) for v in values)
        out = [(position, [self._successor(t) for t in self.model.next_states(
                    p.decode(tuple(self.theirs[c][i] for c, i in enumerate(ids))))])
               for position, ids in part]
        new_values = []
        for c, values in enumerate(p.values):
            new_values.append(values[self.reported[c]:])
            self.reported[c] = len(values)
        reply = (new_values, self.new_actions, self.new_events, out)
        self.new_actions, self.new_events = [], []
        return reply

    def _successor(self, t: Step[Any, Any]) -> _Wire:
        ids = self.packer.canonical_ids(t.state)
        return (self._number(self.actions, self.new_actions, t.action),
                self._number(self.events, self.new_events, t.events),
                ids, self.memo.check(ids, self.packer.decode, set()))

    @staticmethod
    def _number(table: dict[Any, int], new: list[Any], value: Any) -> int:
        i = table.get(value)
        if i is None:
            i = table[value] = len(table)
            new.append(value)
        return i


class _Translator:
    """The explorer's side of the id exchange with one worker."""

    def __init__(self, arity: int) -> None:
        self.sent = [0] * arity  # our values the worker has
        self.ours: list[list[int]] = [[] for _ in range(arity)]  # worker's id -> ours
        self.actions: list[Action] = []
        self.events: list[frozenset[str]] = []

    def outgoing(self, packer: Codec) -> list[list[Any]]:
        sent = []
        for c, values in enumerate(packer.values):
            sent.append(values[self.sent[c]:])
            self.sent[c] = len(values)
        return sent

    def incoming(self, packer: Codec, reply: tuple[Any, ...]) -> list[tuple[int, list[Successor]]]:
        new_values, new_actions, new_events, out = reply
        for c, values in enumerate(new_values):
            self.ours[c].extend(packer.intern(c, v) for v in values)
        self.actions += new_actions
        self.events += new_events
        ours, actions, events = self.ours, self.actions, self.events
        return [(position, [(actions[a], events[e], tuple(ours[c][i] for c, i in enumerate(ids)), answers)
                            for a, e, ids, answers in successors])
                for position, successors in out]


def partition(batch: list[Ids], workers: int) -> list[list[tuple[int, Ids]]]:
    """Positions and ids of ``batch`` per worker, by the hash of the ids."""
    parts: list[list[tuple[int, Ids]]] = [[] for _ in range(workers)]
    for position, ids in enumerate(batch):
        parts[hash(ids) % workers].append((position, ids))  # int tuples hash the same in every process
    return parts


class _Distributed:
    """What the process pool and Ray share: splitting, translating, merging."""

    def __init__(self, workers: int) -> None:
        self.batch = 256 * workers
        self.packer: Codec = Packer()
        self._translators = [_Translator(len(self.packer.values)) for _ in range(workers)]

    def open(self, packer: Codec, model: Model[Any, Any]) -> None:
        """The explorer's tables (the workers run their own copy of ``model``, given at start)."""
        self.packer = packer
        self._translators = [_Translator(len(packer.values)) for _ in self._translators]

    def _send(self, messages: list[tuple[list[list[Any]], list[tuple[int, Ids]]]]) -> list[tuple[Any, ...]]:
        raise NotImplementedError

    def expand(self, batch: list[Ids]) -> list[list[Successor]]:
        parts = partition(batch, len(self._translators))
        replies = self._send([(t.outgoing(self.packer), part) for t, part in zip(self._translators, parts)])
        out: list[list[Successor]] = [[] for _ in batch]
        for t, reply in zip(self._translators, replies):
            for position, successors in t.incoming(self.packer, reply):
                out[position] = successors
        return out


_worker: WorkerState | None = None


def _init_worker(cfg: SpecConfig, symmetry: bool, model: Model[Any, Any] | None) -> None:
    global _worker
    _worker = WorkerState(cfg, symmetry, model)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the explorer's to handle


def _handle(message: tuple[list[list[Any]], list[tuple[int, Ids]]]) -> tuple[Any, ...]:
    assert _worker is not None
    return _worker.handle(*message)


class PoolExpander(_Distributed):
    """``jobs`` forked processes of this machine, one per hash partition."""

    def __init__(self, cfg: SpecConfig, jobs: int, symmetry: bool = True,
                 model: Model[Any, Any] | None = None) -> None:
        super().__init__(jobs)
        try:
            context = multiprocessing.get_context("fork")
        except ValueError:
            raise RuntimeError("--jobs needs processes started by fork (Linux or macOS); use --ray") from None
        # one single-process pool per partition: partition k always meets the same worker
        self._pools = [context.Pool(1, initializer=_init_worker, initargs=(cfg, symmetry, model)) for _ in range(jobs)]

    def _send(self, messages: list[tuple[list[list[Any]], list[tuple[int, Ids]]]]) -> list[tuple[Any, ...]]:
        pending = [pool.apply_async(_handle, (m,)) for pool, m in zip(self._pools, messages)]
        return [p.get() for p in pending]

    def close(self) -> None:
        for pool in self._pools:
            pool.close()
        for pool in self._pools:
            pool.join()


class RayExpander(_Distributed):
    """``jobs`` Ray actors on the cluster at ``address`` (``local``: start one on this machine)."""

    def __init__(self, cfg: SpecConfig, jobs: int, address: str, symmetry: bool = True,
                 model: Model[Any, Any] | None = None) -> None:
        self._cluster = RayActors(address, jobs, WorkerState, cfg, symmetry, model)
        super().__init__(jobs)

    def _send(self, messages: list[tuple[list[list[Any]], list[tuple[int, Ids]]]]) -> list[tuple[Any, ...]]:
        actors = self._cluster.actors
        return list(self._cluster.ray.get([a.handle.remote(*m) for a, m in zip(actors, messages)]))

    def close(self) -> None:
        self._cluster.close()


def make_expander(cfg: SpecConfig, jobs: int, ray_address: str | None, symmetry: bool = True,
                  model: Model[Any, Any] | None = None) -> Expander | None:
    """The expander for ``--jobs``/``--ray`` (``None``: this process); workers explore ``model``
    (default: the spec of ``cfg``)."""
    if ray_address is not None:
        return RayExpander(cfg, jobs, ray_address, symmetry, model)
    if jobs > 1:
        return PoolExpander(cfg, jobs, symmetry, model)
    return None


def codec_for(model: Model[Any, Any]) -> tuple[Codec, Checks]:
    """The spec's seven components and memoized checks; any other model's states whole."""
    if isinstance(model, SpecModel):
        return Packer(model.symmetry), PropertyMemo(model.cfg, model.properties)
    return WholePacker(model), ModelChecks(model)
