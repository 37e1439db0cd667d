"""The worker model under drop-mode preemption (reset_prefix_cache): issue 16's triage.

V1: ``_update_states`` removes a request resumed in the step right after its forced
preemption (``resumed_req_ids`` join the unscheduled set), and ``remove_request`` pops
it from ``prev_req_id_to_index``, so its prefill row is not fed the stale sample.
V2 / ghost: samples of a dropped in-flight step are not "the last sampled token" of the
resumed request.  Both were model gaps; W1 now holds.
"""
from __future__ import annotations

import pytest

from asyncspec.checker.joint import explore_joint
from asyncspec.spec.config import SpecConfig

DROP = SpecConfig(name="worker-d2-drop", requests=((2, 4), (2, 3)), token_budget=3, batch_queue_depth=2,
                  stale_mode="drop", forced_preemptions=1)


@pytest.mark.parametrize("strategy", ["v1", "v2"])
def test_forced_drop_mode_preemption_keeps_w1(strategy: str) -> None:
    r = explore_joint(DROP, strategy, required_witnesses=())
    assert r.ok, [(v.property, v.message, [str(a) for a in v.trace.actions]) for v in r.violations]


def test_the_v1_feed_mutant_is_still_caught_in_drop_mode() -> None:
    r = explore_joint(DROP, "v1", mutant="v1_feed_by_row", required_witnesses=(), engine_properties=False)
    assert any(v.property.startswith("W1") for v in r.violations)
