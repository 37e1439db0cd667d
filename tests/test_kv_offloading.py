"""The offloading connector (``kv_offloading``, spec/offload.py): stores, flushes, CPU loads, the mutant."""
from __future__ import annotations

from asyncspec.checker.configs import named_configs
from asyncspec.checker.spec_mutants import MUTANTS_BY_NAME
from asyncspec.spec import events as ev
from asyncspec.spec.config import SpecConfig, validate
from asyncspec.spec.engine import apply, parse_action
from asyncspec.spec.state import KV_LOADING, EngineState, initial_state
import pytest

CFG = named_configs()["kv-offloading"]  # r0: P=4 M=1, r1: P=3 M=2, blocks of 2, 4 blocks, D=2, decode blocks stored too


def run(actions: list[str], eos: tuple[int, ...] = (0, 0)) -> tuple[EngineState, list[frozenset[str]]]:
    s, seen = initial_state(CFG, eos), []
    for text in actions:
        s, events = apply(CFG, s, parse_action(text))
        seen.append(events)
    return s, seen


def test_a_store_job_covers_the_blocks_the_step_computes() -> None:
    s, seen = run(["schedule"])  # r0's 4 prompt tokens: C + n = 4, two full blocks
    assert ev.OFFLOAD_STORE in seen[0]
    (job,) = s.store_jobs
    assert (job.req, job.blocks, job.flushed, job.registered) == (0, s.block_tables[0], False, False)
    assert s.offload_stored == (2, 0)
    assert job.outputs_ahead == 1  # the issuing step's own output cannot report it


def test_the_report_rides_on_a_later_output_only() -> None:
    s2, seen = run(["schedule", "schedule", "update_from_output"])
    assert s2.store_jobs and all(j.outputs_ahead == 0 for j in s2.store_jobs if j.req == 0)
    s3, seen3 = run(["schedule", "schedule", "update_from_output", "update_from_output stored=r0"])
    assert ev.OFFLOAD_STORE_DONE in seen3[-1] and all(j.req != 0 for j in s3.store_jobs)


def test_an_abort_in_flight_defers_the_free_and_watches_the_jobs() -> None:
    s, seen = run(["schedule", "abort r0"])
    assert ev.DEFERRED_FREE in seen[1]
    assert s.store_jobs[0].registered and s.offload_finished == (0,)
    s, seen = run(["schedule", "abort r0", "schedule"])  # finished_req_ids: nothing more to store (C = 4)
    assert s.offload_finished == () and ev.OFFLOAD_STORE_FINISHED not in seen[-1]


def test_preemption_flushes_and_the_return_loads_what_was_stored() -> None:
    head = ["schedule", "schedule", "update_from_output", "reset_prefix_cache"]  # r1 preempted, step in flight
    s, seen = run(head)
    assert ev.OFFLOAD_FLUSH_PREEMPTED in seen[-1] and [j.flushed for j in s.store_jobs if j.req == 1] == [True]
    s, seen = run(head + ["update_from_output", "schedule"])
    assert ev.OFFLOAD_LOOKUP_DELAYED in seen[-1]  # its store is not reported: not looked up yet
    s, seen = run(head + ["update_from_output", "schedule", "update_from_output stored=r1", "schedule"])
    assert ev.OFFLOAD_LOAD in seen[-1]
    assert s.kv_transfer[1] == KV_LOADING and s.counters[1].num_computed_tokens == 2  # its one stored block


def test_the_config_reaches_every_witness_and_holds() -> None:
    from asyncspec.checker.fast_explorer import explore_fast

    result = explore_fast(CFG, stop_on_first=False)
    assert not result.violations and result.distinct_states == 9748
    assert all(result.witnesses[w] for w in (ev.OFFLOAD_FLUSH, ev.OFFLOAD_FLUSH_PREEMPTED, ev.OFFLOAD_LOAD,
                                            ev.OFFLOAD_STORE_FINISHED))


def test_the_offloading_mutants_exist() -> None:  # tests/test_mutants.py checks each is killed
    assert {MUTANTS_BY_NAME[n].config for n in ("offload_finished_jobs_unwatched", "offload_store_past_tokens")} == {
        "kv-offloading"}


def test_bad_offloading_configs_are_refused() -> None:
    from asyncspec.spec.config import ConfigError

    with pytest.raises(ConfigError, match="kv_offloading"):
        validate(SpecConfig(name="x", requests=((4, 1),), kv_offloading=True))
    with pytest.raises(ConfigError, match="defer_block_free"):
        validate(SpecConfig(name="x", requests=((4, 1),), kv_connector=True, kv_offloading=True,
                            enable_prefix_caching=False))
