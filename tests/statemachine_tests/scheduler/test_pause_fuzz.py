"""Pauses in differential fuzzing: the ``pause`` part's held-send shape (``workload_draw.held_send``), a
keep-mode pause the engine steps through in lock step with vLLM, and the pause mutants the default
campaign kills (``engine/vllm/mutants_features.py``, ``PAUSE_MUTANTS``).

vLLM must be installed (``.ci/install-vllm``); without it this module fails at collection
(ASYNCSPEC_ALLOW_NO_VLLM=1 skips instead)."""
from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from tests.vllm_guard import require_pinned_vllm

from asyncspec.statemachine_tests.core.harness import Event, RequestSpec, Workload, parse_event, run_lockstep
from asyncspec.statemachine_tests.scheduler import workload_draw
from asyncspec.statemachine_tests.scheduler.spec_target import SpecTarget
from asyncspec.statemachine_tests.scheduler.vllm_target import VllmTarget

require_pinned_vllm()

HELD_SEND = Workload(requests=(RequestSpec(2, 6, 0), RequestSpec(2, 1, 0)), depth=2, block_size=4, num_blocks=8,
                     token_budget=8, max_num_seqs=4, aborts=False, kv_connector="toy", remote_sends=(1,), pauses=1)
"""The held-send shape by hand: r0 decodes six tokens, r1 finishes at its first and sends its KV."""

KEEP_PAUSE_TRACE = ("add_request r0, add_request r1, schedule, pause_keep, deliver, schedule, schedule, "
                    "deliver sent=r1, deliver, resume")
"""Both admitted in one step, a keep pause with it in flight; its output finishes r1, whose finished id and
held blocks keep ``has_requests`` true under ``PAUSED_ALL``: two empty ``schedule()`` calls (r0 runs, the
token budget is 0), then r1's send is reported and the resume lets r0 go on."""


def _events(text: str) -> list[Event]:
    return [parse_event(e.strip()) for e in text.split(",")]


def test_the_held_send_shape_keeps_r0_decoding_and_r1_sending() -> None:
    requests = (RequestSpec(30, 2, 1), RequestSpec(9, 4, 2), RequestSpec(5, 3, 0))
    shaped, loads, sends = workload_draw.held_send(requests, (0, 1, 2), (2,), capacity=40, max_output=10, short=4)
    assert shaped == (RequestSpec(4, 10, 0), RequestSpec(4, 1, 0), RequestSpec(5, 3, 0))
    assert loads == (2,) and sends == (1, 2)
    tight, _, _ = workload_draw.held_send(requests, (), (), capacity=12, max_output=10, short=4)
    assert tight[0] == RequestSpec(4, 8, 0)  # P + M stays within the capacity drawn for it


def test_a_keep_pause_the_engine_steps_through_in_lock_step_with_vllm() -> None:
    oracle = SpecTarget(HELD_SEND, target="vllm")
    result = run_lockstep(HELD_SEND, oracle, VllmTarget(HELD_SEND), _events(KEEP_PAUSE_TRACE))
    assert not result.diverged, result.rows[-1].differences
    rows = result.rows
    assert "kv_send_delayed_free" in rows[4].spec_events and "paused_output" in rows[4].spec_events
    assert [sorted(rows[i].spec_events) for i in (5, 6)] == [["empty_step"], ["empty_step"]]


MUTANT_TRACE = textwrap.dedent("""
    import sys
    from asyncspec.engine.vllm.vllm_mutants import MUTANTS_BY_ID
    from asyncspec.engine.vllm.overlay import install
    install(MUTANTS_BY_ID["sched_paused_all_keeps_budget"])
    from tests.statemachine_tests.scheduler.test_pause_fuzz import HELD_SEND, KEEP_PAUSE_TRACE, _events
    from asyncspec.statemachine_tests.core.harness import run_lockstep
    from asyncspec.statemachine_tests.scheduler.spec_target import SpecTarget
    from asyncspec.statemachine_tests.scheduler.vllm_target import VllmTarget
    result = run_lockstep(HELD_SEND, SpecTarget(HELD_SEND, target="vllm"), VllmTarget(HELD_SEND),
                          _events(KEEP_PAUSE_TRACE))
    row = result.rows[-1]
    first = row.differences[0]
    print(row.index, row.event, first.field, first.expected, first.actual)
""")


@pytest.mark.slow
def test_the_keep_budget_mutant_schedules_r0_under_the_keep_pause() -> None:
    """``sched_paused_all_keeps_budget`` (the budget left at ``max_num_batched_tokens``): the first
    ``schedule()`` under ``PAUSED_ALL`` runs r0's decode, which the spec's budget of 0 does not."""
    out = subprocess.run([sys.executable, "-c", MUTANT_TRACE], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "6 schedule scheduled () ((0, 1, 2),)"


PAUSE_MUTANT_KILLS = {
    "sched_paused_all_keeps_budget": 1068,
    "sched_paused_new_admits_waiting": 271,
    "sched_paused_new_skips_kv_holding": 271,
    "sched_paused_new_counts_running_only": 271,
}
"""The scheduler's pause mutants and the example of the default campaign (``fuzz --target vllm --seed 0``,
20 parts) at which each dies: the ``pause`` part's shards 13 and 53 (examples 261-280, 1061-1080)."""


@pytest.mark.slow
@pytest.mark.parametrize("mutant_id", sorted(PAUSE_MUTANT_KILLS))
def test_the_pause_mutants_are_killed_by_the_default_campaign(mutant_id: str) -> None:
    """``asyncspec mutate-vllm --target vllm --only ID``, its worker without the baseline."""
    from asyncspec.statemachine_tests.mutation.mutate_vllm import run_worker

    at = PAUSE_MUTANT_KILLS[mutant_id]
    r = run_worker(mutant_id, "vllm", examples=at, seed=0, timeout=900)
    assert r.killed and r.how == "divergence" and r.loaded, r
    assert r.died_at_example == at, r
