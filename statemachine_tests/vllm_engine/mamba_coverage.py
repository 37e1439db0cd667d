"""The ``mamba`` part of the ``vllm-engine`` target: its engine configurations and what its cases reach.

The runner reports a ``MambaSpec`` layer beside its attention layer (``runner_stubs.stub_runner``) in
``mamba_cache_mode`` ``none``: vLLM's hybrid KV manager gives every request one state block of 256
tokens from the shared pool (group 1, ``MambaManager`` through the base class), which the scheduler
observer compares with the spec's ``mamba_tables`` (``swa_block_table``), the payload with what the
worker is sent, and the oracle model reads and writes as each request's recurrent state
(``fake_model.py``).  The spec's Mamba events are ``align``'s; these categories are counted from the
engine's side of each compared row (equal to the spec's on a clean run):

* ``mamba_state_carried`` — a forward fed a request from a position past 0: its chunk read the state
  its previous chunk left in its state block;
* ``mamba_state_preempted`` — a preemption freed a request's state block;
* ``mamba_state_released_in_flight`` — a request's state block was freed (finish, abort, preemption)
  while a step that scheduled it was still in flight;
* ``mamba_state_block_reused`` — a request got a state block another request of the case had held
  (as a state block or an attention block).
"""
from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from asyncspec.engine.vllm.engine_config import EngineDriverConfig
from asyncspec.statemachine_tests.core.harness import DELIVER, SCHEDULE, Observation

MAMBA_ENGINE_COVERAGE = ("mamba_state_carried", "mamba_state_preempted", "mamba_state_released_in_flight",
                         "mamba_state_block_reused")
"""The ``mamba`` part's categories (this module's docstring)."""
MAMBA_STATE_BLOCKS = 2
"""Pool blocks a request may need beyond its attention blocks (``workload.mamba_problem``'s margin)."""


def mamba_configs(depth: int, device: str) -> tuple[EngineDriverConfig, ...]:
    """A Mamba group in mode ``none`` where the spec models it (chunked prefill, no prefix caching, no
    drafts): blocks of 4 and 2, small pools in which the state blocks compete with attention's (each
    pool holds ``max_model_len``'s blocks and one state block, as vLLM's start-up check asks)."""
    base = EngineDriverConfig(depth=depth, device=device, block_size=4, num_blocks=8, max_num_seqs=4,
                              max_num_batched_tokens=8, enable_chunked_prefill=True, enable_prefix_caching=False,
                              max_model_len=24, mamba_cache_mode="none")
    return base, replace(base, block_size=2, num_blocks=12, max_num_seqs=3, max_num_batched_tokens=6, max_model_len=20)


def _tables(obs: Observation) -> dict[int, tuple[tuple[int, ...], tuple[int, ...]]]:
    """Per request: (attention blocks, state blocks)."""
    return {i: (r.block_table, r.swa_block_table) for i, r in obs.requests}


class MambaCoverage:
    """Adds the ``mamba`` part's counts of one run to a coverage dict (an engine with a Mamba group)."""

    def __init__(self, coverage: dict[str, int]) -> None:
        self.coverage = coverage
        for key in MAMBA_ENGINE_COVERAGE:
            coverage.setdefault(key, 0)
        self._last: dict[int, tuple[tuple[int, ...], tuple[int, ...]]] = {}
        self._held_by: dict[int, set[int]] = {}  # block -> requests that have held it
        self._in_flight: deque[frozenset[int]] = deque()  # per step sent: the requests it scheduled

    def _count(self, key: str, n: int = 1) -> None:
        self.coverage[key] += n

    def schedule(self, observation: Observation, fed: Sequence[Any] | None) -> None:
        """A ``schedule()`` (after its row) and the forward pass the runner ran for it, if any."""
        self._in_flight.append(frozenset(req for req, _, _ in observation.scheduled))  # one per schedule()
        if fed:
            self._count("mamba_state_carried", sum(1 for f in fed if f.start_position > 0))

    def deliver(self) -> None:
        """The oldest step's output was processed (after its row)."""
        if self._in_flight:
            self._in_flight.popleft()

    def note(self, kind: str, observation: Observation) -> None:
        """One compared row's engine side (before ``schedule`` / ``deliver`` above move the steps in flight)."""
        tables = _tables(observation)
        steps = list(self._in_flight)[1:] if kind == DELIVER else list(self._in_flight)
        in_flight = frozenset().union(*steps)
        for req, (_, states) in tables.items():
            before = self._last.get(req, ((), ()))[1]
            if before and not states:
                self._count("mamba_state_preempted", int(req in observation.preempted))
                self._count("mamba_state_released_in_flight", int(req in in_flight))
            new = states[len(before):] if states[:len(before)] == before else states
            if kind == SCHEDULE:
                self._count("mamba_state_block_reused", sum(1 for b in new if self._held_by.get(b, set()) - {req}))
        for req, (blocks, states) in tables.items():
            for b in (*blocks, *states):
                if b >= 0:
                    self._held_by.setdefault(b, set()).add(req)
        self._last = tables

