"""Coverage of combinations on the ``vllm-engine`` target: a preemption, a reset or an abort while drafts and a
grammar are in flight.

Speculative decoding and structured output each keep state across steps in
flight: the scheduler's draft placeholders (``AsyncScheduler._update_after_schedule``)
and the runner's drafts, and the grammar's advanced state with the deferred
bitmask (``StructuredOutputManager``, ``Scheduler.update_from_output``).  A
preemption (``Scheduler._preempt_request``), ``reset_prefix_cache``
(``Scheduler.reset_prefix_cache``) or an abort (``Scheduler.finish_requests``)
that lands while a step in flight carries draft positions and a step in flight
carries a grammar request must unwind both.  Per compared row:

* ``preempted_with_drafts_and_grammar_in_flight`` — the spec preempted a
  request with output in flight (``preempt_in_flight_*``);
* ``reset_with_drafts_and_grammar_in_flight`` — a ``reset_prefix_cache``;
* ``abort_with_drafts_and_grammar_in_flight`` — an abort (between steps or
  drained from ``EngineCore.aborts_queue``).
"""
from __future__ import annotations

from collections import deque
from collections.abc import Collection, Iterable

from asyncspec.spec import events as ev

from asyncspec.statemachine_tests.core.harness import ABORT, RESET_PREFIX_CACHE

COMBO_COVERAGE = ("preempted_with_drafts_and_grammar_in_flight", "reset_with_drafts_and_grammar_in_flight",
                  "abort_with_drafts_and_grammar_in_flight")
_PREEMPTED = frozenset({ev.PREEMPT_IN_FLIGHT_DELIVER, ev.PREEMPT_IN_FLIGHT_DROP})


class ComboCoverage:
    """Which steps in flight carry draft positions and grammar requests (oldest first)."""

    def __init__(self, coverage: dict[str, int], structured: Collection[int]) -> None:
        self._coverage = coverage
        self._structured = frozenset(structured)
        self._in_flight: deque[tuple[bool, bool]] = deque()  # per step: (drafts scheduled, a grammar request)

    def schedule(self, scheduled: Iterable[int], drafts: Iterable[tuple[int, int]]) -> None:
        """A ``schedule()`` that sent a step: its requests and (request, draft positions scheduled)."""
        grammar = bool(set(scheduled) & self._structured)
        self._in_flight.append((any(n > 0 for _, n in drafts), grammar))  # as DraftCoverage: one per schedule()

    def deliver(self) -> None:
        """The oldest step's output was processed."""
        if self._in_flight:
            self._in_flight.popleft()

    def note(self, kind: str, spec_events: Iterable[str]) -> None:
        """One compared row (before this row's ``schedule`` or ``deliver`` changes what is in flight)."""
        if not (any(d for d, _ in self._in_flight) and any(g for _, g in self._in_flight)):
            return
        if kind == ABORT:
            self._count("abort_with_drafts_and_grammar_in_flight")
        elif kind == RESET_PREFIX_CACHE:
            self._count("reset_with_drafts_and_grammar_in_flight")
        if _PREEMPTED & set(spec_events):
            self._count("preempted_with_drafts_and_grammar_in_flight")

    def _count(self, name: str) -> None:
        self._coverage[name] = self._coverage.get(name, 0) + 1
