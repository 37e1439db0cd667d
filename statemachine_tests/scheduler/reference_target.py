"""The reference scheduler (``reference/``) as a fuzz target.

Each event runs on the reference engine (``ReferenceHarness``); the state is
then mapped to a spec ``EngineState`` by the abstraction function
(``reference/abstraction.py``) and observed exactly as the spec oracle is.
So a fuzz run against ``reference`` is a refinement check on random workloads
far larger than the exhaustive configs: any event whose abstract effect is not
the spec's stops the run.
"""
from __future__ import annotations

from asyncspec.reference.abstraction import abstract, representation_problems
from asyncspec.reference.reference_harness import ReferenceHarness
from asyncspec.spec import engine as eng
from asyncspec.spec.engine import Action

from asyncspec.statemachine_tests.core.harness import Unsupported, Workload
from asyncspec.statemachine_tests.scheduler import stop_obs
from asyncspec.statemachine_tests.scheduler.spec_target import SpecTarget


class ReferenceTarget(SpecTarget):
    """``SpecTarget`` whose transitions are computed by the reference engine."""

    name = "reference"

    def __init__(self, w: Workload) -> None:
        super().__init__(w)
        eos = stop_obs.spec_positions(w)  # check_stop's position for each request's stop (spec/stop.py)
        self.harness = ReferenceHarness.from_spec(self.cfg, eos)
        self.state = abstract(self.harness)

    def pause(self, mode: str) -> None:
        raise Unsupported("the reference scheduler has no pause_scheduler (docs/reference.md)")

    def resume(self) -> None:
        raise Unsupported("the reference scheduler has no resume_scheduler (docs/reference.md)")

    def _apply(self, action: Action) -> None:
        before = self.state
        if action not in self.harness.enabled_actions():
            raise RuntimeError(f"'{action}' is not enabled in the reference")
        events = self.harness.apply(action)
        problems = representation_problems(self.harness)
        if problems:
            raise RuntimeError(f"reference data structures inconsistent: {problems[0]}")
        after = abstract(self.harness)
        scheduled: tuple[tuple[int, int, int], ...] = ()
        delivered: tuple[tuple[int, tuple[int, ...]], ...] = ()
        self._payload = ()
        self._reset = action.name == eng.RESET_PREFIX_CACHE
        if action.name == eng.SCHEDULE:
            step = after.batch_queue[-1]
            scheduled = tuple((e.req, e.num_tokens, e.sampled_position) for e in step.entries)
            self._note_payload(before, after, scheduled)
        elif action.name == eng.UPDATE_FROM_OUTPUT:
            delivered = self._record_delivery(before, after)
        elif action.name == eng.RESET_PREFIX_CACHE:
            self._previous_step = frozenset()  # as SpecTarget: every running request is resumed
        self.state = after
        self._finish_event(before, events, scheduled, delivered)
