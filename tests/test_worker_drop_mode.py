"""The worker model under drop-mode preemption (reset_prefix_cache): issue 16's triage.

V1: ``_update_states`` removes a request resumed in the step right after its forced
preemption (``resumed_req_ids`` join the unscheduled set), and ``remove_request`` pops
it from ``prev_req_id_to_index``, so its prefill row is not fed the stale sample.
V2 / ghost: samples of a dropped in-flight step are not "the last sampled token" of the
resumed request.  Both were model gaps; W1 now holds.
Neuron: W1 fails, and that is vllm-neuron's behaviour (``docs/findings_neuron.md``, N1):
``_get_partial_prefill_req_ids`` discards a sample only inside the prompt, so a resumed
request's recompute chunk that ends inside its old outputs keeps a fresh re-sample, and
the next 1-token row (a decode row for ``_is_decode_row``) is fed it from the future.
Not drop-specific: deliver mode and a single request show the same 9-action trace.
"""
from __future__ import annotations

import pytest

from asyncspec.checker.joint import explore_joint
from asyncspec.checker.worker_mutants import MUTANTS_BY_NAME, explore_mutant
from asyncspec.spec.config import SpecConfig, StaleMode

DROP = SpecConfig(name="worker-d2-drop", requests=((2, 4), (2, 3)), token_budget=3, batch_queue_depth=2,
                  stale_mode="drop", forced_preemptions=1)


@pytest.mark.parametrize("strategy", ["v1", "v2"])
def test_forced_drop_mode_preemption_keeps_w1(strategy: str) -> None:
    r = explore_joint(DROP, strategy, required_witnesses=())
    assert r.ok, [(v.property, v.message, [str(a) for a in v.trace.actions]) for v in r.violations]


def test_the_v1_feed_mutant_is_still_caught_in_drop_mode() -> None:
    r = explore_mutant(DROP, MUTANTS_BY_NAME["v1_feed_by_row"], engine_properties=False)
    assert any(v.property.startswith("W1") for v in r.violations)


NEURON_TRACE = ["schedule", "schedule", "update_from_output", "schedule", "update_from_output",
                "reset_prefix_cache", "schedule", "update_from_output", "schedule"]


@pytest.mark.parametrize("requests", [((2, 4),), ((2, 4), (2, 3))])
@pytest.mark.parametrize("stale_mode", ["drop", "deliver"])
def test_neuron_feeds_a_resumed_requests_history_tail_the_recompute_chunks_resample(
        requests: tuple[tuple[int, int], ...], stale_mode: StaleMode) -> None:
    cfg = SpecConfig(name="worker-neuron-resume", requests=requests, token_budget=3, batch_queue_depth=2,
                     stale_mode=stale_mode, forced_preemptions=1)
    r = explore_joint(cfg, "neuron", required_witnesses=())
    w1 = [v for v in r.violations if v.property.startswith("W1")]
    assert w1, "the Neuron model no longer reports finding N1"
    v = w1[0]
    assert [str(a) for a in v.trace.actions] == NEURON_TRACE
    # r0 resumed at position 0 with a 3-token chunk (positions 0-2) that ends inside its
    # outputs; its sample is kept on Neuron and fed to position 3, which needs r0#2.
    assert "re-sample" in v.message and "needs r0#2" in v.message, v.message
