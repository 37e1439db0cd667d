"""Two spec bugs the compiled explorer's random cross-check found (both explorers agreed on them),
pinned by ``configs/kv-sends-aborts.toml``: a one-token prompt loaded whole keeps its block at
admission (``blocks.admit_with_hit``), and a finished request held for its KV send keeps its
placeholders with its in-flight share drained (``properties.placeholders_le_in_flight``)."""
from __future__ import annotations

import dataclasses

from asyncspec.checker import compiled
from asyncspec.checker.bfs import explore
from asyncspec.checker.configs import load_manifest, named_configs
from asyncspec.spec import request as rq
from asyncspec.spec.algebra import CONCRETE as A
from asyncspec.spec.properties import ALL_ALWAYS
from asyncspec.spec.state import KV_SENDING

from tests.spec_steps import run_actions

CFG = named_configs()["kv-sends-aborts"]


_run = run_actions


def test_a_one_token_whole_prompt_load_keeps_its_block_at_admission() -> None:
    s = _run(CFG, ["schedule"])  # r0 loads its one prompt token into one block; r1 prefills
    assert s.counters[0].status == rq.WAITING_FOR_REMOTE_KVS and s.counters[0].num_computed_tokens == 1
    held = s.block_tables[0]
    assert len(held) == 1
    s = _run(CFG, ["schedule", "schedule", "update_from_output recv=r0", "schedule"])  # promoted (C -> 0), admitted
    assert s.counters[0].status == rq.RUNNING and s.counters[0].num_computed_tokens == 1
    assert s.block_tables[0] == held  # vLLM's allocate_slots extends req_to_blocks; no block lost
    assert ALL_ALWAYS["blocks_conserved"].check(CFG, s) is None


def test_a_send_aborted_in_flight_keeps_its_placeholders_and_passes() -> None:
    cfg = dataclasses.replace(named_configs()["kv-invalid-blocks"], name="kv-invalid-3",
                              requests=((7, 2), (2, 2), (3, 2)), num_blocks=8, remote_sends=(1,))
    s = _run(cfg, ["schedule", "schedule", "abort r1", "update_from_output"])
    c = s.counters[1]
    assert s.kv_transfer[1] == KV_SENDING and rq.is_finished(A, c)
    assert (c.num_output_placeholders, c.num_in_flight_tokens) == (2, 1)  # F drained, H kept, as in vLLM
    assert ALL_ALWAYS["placeholders_le_in_flight"].check(cfg, s) is None


def test_the_unfinished_requests_are_still_held_to_the_property() -> None:
    s = _run(CFG, ["schedule"])
    bad = s._replace(counters=tuple(c._replace(num_output_placeholders=c.num_in_flight_tokens + 1) if i == 1 else c
                                    for i, c in enumerate(s.counters)))
    assert "r1: num_output_placeholders" in str(ALL_ALWAYS["placeholders_le_in_flight"].check(CFG, bad))


def test_the_pinned_config_passes_on_every_explorer_with_its_count() -> None:
    pin = load_manifest()["kv-sends-aborts"]
    r = explore(CFG, stop_on_first=False)
    assert r.ok and (r.distinct_states, r.depth) == (pin["distinct_states"], pin["depth"])
    assert r.witnesses["kv_send_delayed_free"] and r.witnesses["abort_in_flight"]
    if compiled.built():
        rc = compiled.explore_compiled(CFG)
        assert rc.ok and (rc.distinct_states, rc.depth) == (r.distinct_states, r.depth)
