"""Coverage of speculative decoding on the ``vllm-engine`` target: what the n-gram drafter and the rejection sampler did.

Under async scheduling the scheduler schedules every decode with k
placeholder drafts; the runner trims the ones its n-gram drafter
(``NgramProposerGPU``) did not propose (``update_scheduler_for_invalid_drafts``,
on its own copy of the ``SchedulerOutput``), feeds the rest, and the
rejection sampler accepts a prefix of them.  Counted per request and step,
from the tokens the runner fed (the oracle model's record) and the accepted
counts the scheduler is handed:

* ``drafts_proposed`` — the runner fed a request one or more real drafts;
* ``drafts_accepted`` — the worker accepted one or more drafts of a request;
* ``drafts_rejected`` — it rejected a draft the drafter had proposed (fewer
  accepted than fed).
"""
from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from typing import Any

from asyncspec.statemachine_tests.scheduler.vllm_observer import req_index

DRAFT_COVERAGE = ("drafts_proposed", "drafts_accepted", "drafts_rejected")


class DraftCoverage:
    """Pairs each step's fed drafts with its accepted counts (steps are processed in order)."""

    def __init__(self, coverage: dict[str, int]) -> None:
        self.coverage = coverage
        self._in_flight: deque[dict[int, int]] = deque()  # per scheduled step: request -> drafts fed

    def _count(self, key: str, n: int = 1) -> None:
        if n:
            self.coverage[key] = self.coverage.get(key, 0) + n

    def schedule(self, drafts: Sequence[tuple[int, int]], scheduled: Sequence[tuple[int, int, int]],
                 fed: Sequence[Any] | None) -> None:
        """One ``schedule()``: ``drafts`` (request, placeholder drafts), ``scheduled`` (request,
        tokens, position) and the runner's feed of that step (``FedRow``s; None if none ran)."""
        tokens = {req: n for req, n, _ in scheduled}
        placeholders = dict(drafts)
        fed_drafts: dict[int, int] = {}
        for row in fed or ():
            req = req_index(row.req_id)
            if req in placeholders:
                fed_drafts[req] = len(row.token_ids) - (tokens.get(req, 0) - placeholders[req])
        self._count("drafts_proposed", sum(1 for n in fed_drafts.values() if n > 0))
        self._in_flight.append(fed_drafts)

    def deliver(self, accepted: Sequence[tuple[int, int]]) -> None:
        """The oldest step's output: (request, drafts accepted)."""
        fed_drafts = self._in_flight.popleft() if self._in_flight else {}
        for req, n in accepted:
            self._count("drafts_accepted", int(n > 0))
            self._count("drafts_rejected", int(n < fed_drafts.get(req, 0)))
