"""The spec's ``abort_mode`` (SGLang's deferred abort, docs/findings_sglang.md 1): the config
refuses the combinations it gives no meaning, the finding's minimal trace, witnesses and the
pinned count of ``sglang-overlap``, explorer parity, refinement by the reference, the proof."""
from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest

from asyncspec.checker import configs as cfgs
from asyncspec.checker.bfs import Explorer, explore
from asyncspec.checker.fast_explorer import FastExplorer
from asyncspec.proofs.request_abstraction import VARIANTS
from asyncspec.proofs.proof_mutants import DEFERRED_ABORT_MUTANTS
from asyncspec.proofs.prover import prove, prove_with_patches
from asyncspec.reference import reference_scheduler as ref_scheduler
from asyncspec.reference.refinement import check_refinement
from asyncspec.spec import engine
from asyncspec.spec import request as rq
from asyncspec.spec.config import ConfigError, SpecConfig
from asyncspec.spec.engine import parse_action
from asyncspec.spec.state import initial_state

DEFERRED = dict(stale_mode="drop", aborts=True, abort_mode="deferred")
NEW_WITNESSES = ("abort_deferred", "deferred_abort_delivery", "deferred_abort_wasted_step")
SGLANG_D2 = tuple(v for v in VARIANTS if v.deferred_abort)


def _minimal(mode: str) -> rq.RequestCounters:
    """The finding's minimal case: one request, prompt 3, max 4, aborted after its first token."""
    cfg = SpecConfig(name="f1", requests=((3, 4),), batch_queue_depth=2, token_budget=4, block_size=2,
                     num_blocks=5, stale_mode="drop", aborts=True, abort_mode=mode)  # type: ignore[arg-type]
    s = initial_state(cfg, (0,))
    for text in ("schedule", "schedule", "update_from_output", "abort r0"):
        s, _ = engine.apply(cfg, s, parse_action(text))
    while engine.enabled_actions(cfg, s):  # the exact loop drains what is left
        s, _ = engine.apply(cfg, s, engine.enabled_actions(cfg, s)[0])
    return s.counters[0]


def test_the_default_is_immediate_and_only_sglang_overlap_defers() -> None:
    assert SpecConfig(name="x", requests=((2, 1),)).abort_mode == "immediate"
    deferred = [c.name for c in cfgs.named_configs().values() if c.abort_mode == "deferred"]
    assert deferred == ["sglang-overlap"]


@pytest.mark.parametrize("fields, words", [
    ({"batch_queue_depth": 3}, "depth 1 or 2"),
    ({"stale_mode": "deliver"}, "stale_mode = 'drop'"),
    ({"num_speculative_tokens": 1, "num_blocks": 8}, "speculative decoding"),
    ({"abort_mode": "later"}, "'immediate' or 'deferred'"),
])
def test_a_deferred_abort_the_spec_gives_no_meaning_is_refused_in_one_line(fields: dict[str, object],
                                                                           words: str) -> None:
    with pytest.raises(ConfigError) as err:
        SpecConfig(**{"name": "bad", "requests": ((2, 2),), "num_blocks": 4, **DEFERRED, **fields})  # type: ignore[arg-type]
    assert words in str(err.value) and "\n" not in str(err.value)


def test_the_cli_refuses_a_deferred_abort_at_depth_three_with_exit_2(tmp_path: Path) -> None:
    path = tmp_path / "d3.toml"
    path.write_text('name = "d3"\nrequests = [[2, 2]]\nbatch_queue_depth = 3\nstale_mode = "drop"\n'
                    'aborts = true\nabort_mode = "deferred"\n')
    run = subprocess.run([sys.executable, "-m", "asyncspec", "check", "-c", str(path)],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 2, run.stderr
    assert len(run.stderr.strip().splitlines()) == 1 and "depth 1 or 2" in run.stderr


def test_the_minimal_trace_a_deferred_abort_delivers_one_more_token_and_wastes_one_row() -> None:
    immediate, deferred = _minimal("immediate"), _minimal("deferred")
    assert (immediate.num_output_tokens, immediate.status, immediate.num_wasted_steps) == (1, rq.FINISHED_ABORTED, 0)
    assert (deferred.num_output_tokens, deferred.status, deferred.num_wasted_steps) == (2, rq.FINISHED_ABORTED, 1)


def test_sglang_overlap_reaches_the_deferred_abort_witnesses_at_its_pinned_count() -> None:
    cfg = cfgs.named_configs()["sglang-overlap"]
    r = explore(cfg, stop_on_first=False)
    pinned = cfgs.load_manifest()["sglang-overlap"]
    assert (r.distinct_states, r.depth) == (pinned["distinct_states"], pinned["depth"]) == (6695, 17)
    assert r.ok and all(r.witnesses[w] for w in NEW_WITNESSES)
    assert set(NEW_WITNESSES) <= set(cfg.extra["witnesses"])  # type: ignore[arg-type]


def test_in_immediate_mode_sglang_overlap_is_the_old_model_and_never_defers() -> None:
    cfg = dataclasses.replace(cfgs.named_configs()["sglang-overlap"], abort_mode="immediate",
                              extra={"witnesses": NEW_WITNESSES})
    r = explore(cfg, stop_on_first=False)
    assert r.distinct_states == 11915  # the count pinned before abort_mode existed
    assert not any(r.witnesses[w] for w in NEW_WITNESSES) and r.vacuous == list(NEW_WITNESSES)


@pytest.mark.parametrize("fields", [
    {"batch_queue_depth": 1},
    {"batch_queue_depth": 2, "loop": "free", "late_arrivals": True},
    {"batch_queue_depth": 2, "forced_preemptions": 1, "enable_prefix_caching": False},
], ids=["sync", "free-late", "forced"])
def test_fast_and_plain_explorers_agree_with_a_deferred_abort(fields: dict[str, object]) -> None:
    witnesses = NEW_WITNESSES if fields["batch_queue_depth"] == 2 else NEW_WITNESSES[:2]  # D = 1 wastes nothing
    cfg = SpecConfig(name="dx", requests=((3, 2), (2, 2)), token_budget=4, block_size=2, num_blocks=4,
                     **DEFERRED, **fields, extra={"witnesses": witnesses})  # type: ignore[arg-type]
    plain, fast = Explorer(cfg, stop_on_first=False), FastExplorer(cfg, stop_on_first=False)
    expected, got = plain.run(), fast.run()
    assert expected.ok, expected.vacuous
    assert got.to_json() | {"seconds": 0} == expected.to_json() | {"seconds": 0}
    assert [fast.state(i) for i in range(len(fast.store))] == plain.graph.states


@pytest.mark.parametrize("fields", [{"batch_queue_depth": 1}, {"loop": "free", "late_arrivals": True}],
                         ids=["sync", "free-late"])
def test_the_reference_refines_the_deferred_abort(fields: dict[str, object]) -> None:
    cfg = SpecConfig(name="rx", requests=((3, 2), (2, 2)), token_budget=4, block_size=2, num_blocks=4,
                     **DEFERRED, **fields)  # type: ignore[arg-type]
    result = check_refinement(cfg)
    assert result.mismatch is None, result.mismatch.render()
    assert result.ok and result.distinct_states == explore(cfg, stop_on_first=False).distinct_states


def test_a_reference_that_aborts_at_once_does_not_refine_the_deferred_spec(monkeypatch: pytest.MonkeyPatch) -> None:
    def immediate(self: ref_scheduler.Scheduler, request_id: str) -> None:
        self.finish_requests((request_id,), ref_scheduler.RequestStatus.FINISHED_ABORTED)

    monkeypatch.setattr(ref_scheduler.Scheduler, "abort", immediate)
    result = check_refinement(cfgs.named_configs()["sglang-overlap"])
    assert result.mismatch is not None and result.mismatch.kind in ("state", "events", "enabled")


def test_the_sglang_variant_is_proved_with_its_wasted_row_bound() -> None:
    report = prove(variants=SGLANG_D2)
    assert report.ok and report.total == 324
    assert any(o.invariant == "deferred_abort_wastes_one_step" and o.action == "safety" for o in report.outcomes)


@pytest.mark.parametrize("mutant", DEFERRED_ABORT_MUTANTS, ids=lambda m: m.name)
def test_a_deferred_abort_mutant_gives_a_replayed_cti_only_in_the_sglang_variant(mutant: object) -> None:
    patches = {mutant.function: mutant.replacement}  # type: ignore[attr-defined]
    r = prove_with_patches(patches, variants=SGLANG_D2, stop_on_cti=True)
    assert not r.ok and r.ctis and r.ctis[0].invariant == mutant.breaks  # type: ignore[attr-defined]
    others = tuple(v for v in VARIANTS if v.name == "async-d2")
    assert prove_with_patches(patches, variants=others).ok
