"""Hypothesis stateful refinement: the reference against the spec on large workloads.

A ``RuleBasedStateMachine`` draws a workload (up to 64 requests, prompts up
to 2,000 tokens, block size 16, a pool from "just fits the largest request"
up, budgets, depth D in 1..3, deferral, stale mode, chunked prefill, prefix
caching, aborts, late arrivals, forced preemptions), then interleaves engine
actions (in ``step_with_batch_queue`` order; any order in the free loop) with
random client events.  After *every* event the abstraction of the reference
must equal the spec's successor (``spec.engine.apply``), with the same
enabled actions and events; the reference's derived data is checked
periodically and at the end.

Tiers: ``test_reference_refines_spec`` (default, < 60 s) and
``test_reference_refines_spec_long`` (``-m slow``).  ``test_mutant_is_caught``
checks that each seeded bug of ``reference/reference_mutants.py`` is caught.
"""
from __future__ import annotations

from collections import Counter, deque
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine, initialize, invariant, precondition, rule)
from hypothesis.stateful import run_state_machine_as_test as _run_machine
from rich.console import Console

from asyncspec.checker.table import trace_table
from asyncspec.reference.abstraction import abstract, representation_problems
from asyncspec.reference.reference_harness import ReferenceHarness, spec_config
from asyncspec.reference.reference_mutants import MUTANTS, applied
from asyncspec.reference.refinement import first_difference
from asyncspec.spec import engine
from asyncspec.spec.config import SpecConfig
from asyncspec.spec.engine import ABORT, ADD_REQUEST, RESET_PREFIX_CACHE, UPDATE_FROM_OUTPUT, Action
from asyncspec.spec.state import EngineState, initial_state

BLOCK_SIZE = 16
DRAIN_LIMIT = 20_000  # engine actions run at the end of an example


class RefinementFailure(AssertionError):
    """The reference's abstraction left the spec."""


@dataclass(frozen=True)
class Profile:
    """Bounds of the drawn workloads, and settings forced to a value."""

    max_requests: int = 64
    max_prompt: int = 2000
    max_output: int = 48
    fixed: dict[str, Any] = field(default_factory=dict)


@st.composite
def workloads(draw: st.DrawFn, profile: Profile) -> tuple[SpecConfig, tuple[int, ...]]:
    """A spec config and EOS positions."""
    n = draw(st.integers(1, profile.max_requests))
    prompt = st.one_of(st.integers(1, 40), st.integers(1, profile.max_prompt))
    requests = tuple((draw(prompt), draw(st.integers(1, profile.max_output))) for _ in range(n))
    eos = tuple(draw(st.one_of(st.just(0), st.integers(1, m))) for _, m in requests)
    block_size = int(profile.fixed.get("block_size", BLOCK_SIZE))
    need = max(-(-(p + m) // block_size) for p, m in requests)
    fields: dict[str, Any] = dict(
        name="hypothesis", requests=requests, block_size=block_size,
        batch_queue_depth=draw(st.sampled_from([1, 2, 2, 3])),
        loop=draw(st.sampled_from(["exact", "exact", "free"])),
        num_blocks=need + draw(st.integers(0, 2 * need)),
        token_budget=draw(st.sampled_from([16, 64, 256, 512, 2048, 8192])),
        max_num_seqs=draw(st.integers(1, 64)),
        enable_chunked_prefill=draw(st.booleans() | st.just(True)),
        enable_prefix_caching=draw(st.booleans() | st.just(True)),
        reserve_full_isl=draw(st.booleans()),
        defer_block_free=draw(st.booleans()),
        stale_mode=draw(st.sampled_from(["deliver", "drop"])),
        aborts=draw(st.booleans()),
        late_arrivals=draw(st.booleans()),
        forced_preemptions=draw(st.integers(0, 3)),
    )
    fields.update(profile.fixed)
    if not fields["enable_chunked_prefill"]:
        fields["token_budget"] = max(fields["token_budget"], max(p + m - 1 for p, m in requests))
    return spec_config(**fields), eos


@dataclass
class Coverage:
    """What the examples of one run exercised (summed over examples)."""

    examples: int = 0
    events: int = 0
    max_requests: int = 0
    max_prompt: int = 0
    behaviours: Counter[str] = field(default_factory=Counter)


def machine_for(profile: Profile, coverage: Coverage | None = None) -> type[RuleBasedStateMachine]:
    """A refinement machine drawing workloads from ``profile``; fills ``coverage``."""
    cov = coverage if coverage is not None else Coverage()

    class ReferenceRefinement(RuleBasedStateMachine):
        """The reference and the spec, driven by the same events."""

        cfg: SpecConfig
        h: ReferenceHarness
        s: EngineState

        @initialize(workload=workloads(profile))
        def start(self, workload: tuple[SpecConfig, tuple[int, ...]]) -> None:
            self.cfg, eos = workload
            self.h = ReferenceHarness.from_spec(self.cfg, eos)
            self.s = initial_state(self.cfg, eos)
            self.rows: deque[tuple[Action | None, EngineState, frozenset[str]]] = deque(maxlen=8)
            self.rows.append((None, self.s, frozenset()))
            self.events = 0
            self._check_equal(abstract(self.h), self.s, "init")

        # ---------------------------------------------------------- the lockstep

        def _do(self, action: Action) -> None:
            ref_actions = self.h.enabled_actions()
            spec_actions = engine.enabled_actions(self.cfg, self.s)
            if ref_actions != spec_actions:
                self._fail(f"enabled actions differ: reference {[str(a) for a in ref_actions]}, "
                           f"spec {[str(a) for a in spec_actions]}")
            events = self.h.apply(action)
            self.s, spec_events = engine.apply(self.cfg, self.s, action)
            self.rows.append((action, self.s, spec_events))
            self._check_equal(abstract(self.h), self.s, str(action))
            if events != spec_events:
                self._fail(f"after {action}: events {sorted(events)} != spec {sorted(spec_events)}")
            self.events += 1
            if self.events % 32 == 0:
                self._check_representation()

        def _check_equal(self, a: EngineState, s: EngineState, what: str) -> None:
            if a != s:
                self._fail(f"after {what}: {first_difference(a, s)}", a)

        def _check_representation(self) -> None:
            problems = representation_problems(self.h)
            if problems:
                self._fail(f"reference data inconsistent: {problems[0]}")

        def _fail(self, message: str, ref_state: EngineState | None = None) -> None:
            text = message
            if len(self.cfg.requests) <= 6:
                rows = list(self.rows)
                if ref_state is not None:
                    rows.append((Action("reference"), ref_state, frozenset()))
                console = Console(width=250, record=True, color_system=None)
                with console.capture() as cap:
                    console.print(trace_table(self.cfg, rows, title="last events (spec), then the reference"))
                text += "\n" + cap.get()
            raise RefinementFailure(text)

        # ---------------------------------------------------------- rules

        @rule(k=st.integers(1, 64))
        def run_engine(self, k: int) -> None:
            """Up to ``k`` halves of ``step_with_batch_queue``."""
            for _ in range(k):
                action = self.h.engine_action()
                if action is None:
                    return
                self._do(action)

        @precondition(lambda self: self.cfg.loop == "free" and bool(self.h.core.batch_queue))
        @rule()
        def process_early(self) -> None:
            """Free loop: process the oldest step before the queue is full."""
            self._do(Action(UPDATE_FROM_OUTPUT))

        @precondition(lambda self: self.cfg.aborts and any(a.name == ABORT for a in self.h.enabled_actions()))
        @rule(pick=st.integers(0, 1 << 16))
        def abort(self, pick: int) -> None:
            """The client aborts one unfinished request."""
            choices = [a for a in self.h.enabled_actions() if a.name == ABORT]
            self._do(choices[pick % len(choices)])

        @precondition(lambda self: self.cfg.late_arrivals and self.h.num_arrived < len(self.h.requests))
        @rule()
        def arrive(self) -> None:
            """The next request arrives."""
            self._do(Action(ADD_REQUEST, self.h.num_arrived))

        @precondition(lambda self: self.h.forced_preemptions_left > 0 and bool(self.h.core.scheduler.running))
        @rule()
        def reset_prefix_cache(self) -> None:
            """A forced preemption of every running request."""
            self._do(Action(RESET_PREFIX_CACHE))

        @invariant()
        def queues_agree(self) -> None:
            if hasattr(self, "h") and len(self.h.core.batch_queue) != len(self.s.batch_queue):
                self._fail("batch queue lengths differ")

        def teardown(self) -> None:
            """Run the engine to completion (still in lockstep), then check everything."""
            if hasattr(self, "h"):
                for _ in range(DRAIN_LIMIT):
                    action = self.h.engine_action()
                    if action is None:
                        break
                    self._do(action)
                self._check_representation()
                cov.examples += 1
                cov.events += self.events
                cov.max_requests = max(cov.max_requests, len(self.cfg.requests))
                cov.max_prompt = max(cov.max_prompt, max(p for p, _ in self.cfg.requests))
                cov.behaviours.update(self.h.core.scheduler.stats)

    return ReferenceRefinement


def run_state_machine_as_test(machine: type[RuleBasedStateMachine], settings: settings) -> None:
    """Hypothesis's runner (typed: some Hypothesis releases annotate it, others do not)."""
    runner: Any = _run_machine
    runner(machine, settings=settings)


def _settings(examples: int, steps: int, derandomize: bool = False) -> settings:
    return settings(max_examples=examples, stateful_step_count=steps, deadline=None, database=None,
                    derandomize=derandomize, suppress_health_check=list(HealthCheck))


DEFAULT = Profile()


REQUIRED = ("preemption", "preemption_in_flight_deliver", "preemption_in_flight_drop", "stale_delivery",
            "stale_drop", "deferred_free", "deferred_free_drained", "chunked_prefill", "prefix_cache_hit",
            "max_tokens_guard", "wasted_step", "abort_in_flight", "empty_step")


def _assert_covered(cov: Coverage, required: tuple[str, ...]) -> None:
    missing = [b for b in required if not cov.behaviours[b]]
    assert not missing, f"vacuous run: never exercised {missing} ({cov})"


def test_reference_refines_spec() -> None:
    """The default tier: mixed workloads up to 64 requests and 2,000-token prompts (12 derandomized
    examples already reach every behaviour asserted; the slow tier's long run draws 300)."""
    cov = Coverage()
    run_state_machine_as_test(machine_for(DEFAULT, cov), settings=_settings(12, 30, derandomize=True))
    _assert_covered(cov, ("preemption", "chunked_prefill", "prefix_cache_hit", "deferred_free"))
    assert cov.max_requests > 32 and cov.max_prompt > 1000, cov


def test_reference_refines_spec_small() -> None:
    """Small workloads, many events: the corners (tiny pools, D = 3, free loop)."""
    small = Profile(max_requests=6, max_prompt=80, max_output=6, fixed={"block_size": 4})
    cov = Coverage()
    run_state_machine_as_test(machine_for(small, cov), settings=_settings(150, 40, derandomize=True))
    _assert_covered(cov, REQUIRED)


@pytest.mark.slow
def test_reference_refines_spec_long() -> None:
    """The long run (``-m slow``): many more, longer examples."""
    cov = Coverage()
    run_state_machine_as_test(machine_for(DEFAULT, cov), settings=_settings(300, 80))
    small = Profile(max_requests=6, max_prompt=80, max_output=6, fixed={"block_size": 4})
    run_state_machine_as_test(machine_for(small, cov), settings=_settings(1500, 60))
    _assert_covered(cov, REQUIRED)


# Workloads that make each seeded bug reachable (the machine must still find the events).
MUTANT_PROFILES: dict[str, Profile] = {
    "free_immediately_despite_deferral": Profile(8, 64, 6, {"defer_block_free": True, "batch_queue_depth": 2}),
    "stale_frame_counts_against_placeholders": Profile(
        8, 64, 6, {"stale_mode": "drop", "batch_queue_depth": 2, "forced_preemptions": 3}),
    "forget_stale_skip": Profile(8, 64, 6, {"batch_queue_depth": 3, "decode_stagger": 1,
                                          "stale_mode": "deliver", "defer_block_free": False}),
    "cached_blocks_freed_to_front": Profile(8, 64, 6, {"enable_prefix_caching": True}),
    # A failed forced reset (blocks parked under deferral) keeps the hashes: hits after resume.
    "cache_hit_without_cap": Profile(4, 6, 3, {"enable_prefix_caching": True, "forced_preemptions": 3,
                                               "block_size": 2, "defer_block_free": True,
                                               "batch_queue_depth": 2}),
    "no_max_tokens_guard": Profile(8, 64, 6, {"batch_queue_depth": 2}),
}


@pytest.mark.parametrize("mutant", MUTANTS, ids=[m.name for m in MUTANTS])
def test_mutant_is_caught(mutant: Any) -> None:
    """Each seeded bug makes the machine fail (deterministic search, no shrinking)."""
    machine = machine_for(MUTANT_PROFILES[mutant.name])
    quick = settings(_settings(300, 30, derandomize=True), phases=[Phase.generate])
    with applied(mutant), pytest.raises(RefinementFailure):
        run_state_machine_as_test(machine, settings=quick)
