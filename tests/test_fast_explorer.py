"""The fast explorer against the plain one, directly: same states, same indices,
same edges, same counts, verdicts and traces, on every named config, on
random configs and under every spec mutant; and its own machinery (packed
canonical form, store, cycles, --jobs, checkpoints, --max-memory)."""
from __future__ import annotations

import dataclasses
import doctest
import os
import random
import signal
from pathlib import Path
from typing import Any

import pytest

from asyncspec.checker import checkpoint, configs as cfgs, fast_explorer, measure, memo, packed, scc, store
from asyncspec.checker.bfs import Explorer
from asyncspec.checker.fast_explorer import FastExplorer
from asyncspec.checker.fast_parallel import Ids, LocalExpander, PoolExpander, Successor
from asyncspec.checker.graph import cycle_nodes
from asyncspec.checker.dp_mutants import is_dp_config
from asyncspec.checker.spec_mutants import MUTANT_STATE_CAP, MUTANTS, MUTANTS_BY_NAME, applied
from asyncspec.checker.result import CheckResult
from asyncspec.checker.state_graph import StateGraph
from asyncspec.checker.symmetry import canonical
from asyncspec.spec import engine
from asyncspec.spec.config import ConfigError, SpecConfig
from asyncspec.spec.engine import Transition

from tests.plain_runs import plain_run

DEFAULT_TIER = [c.name for c in cfgs.config_set("default") + cfgs.config_set("finding")]
SLOW_TIER = [c.name for c in cfgs.config_set("slow")]
COMPILED_ONLY = {"async-d2-6req", "async-d3-spec-5req"}
"""Campaign configs only the compiled explorer finishes in minutes (49.8M states: about half an hour here)."""
CAMPAIGN = [c.name for c in cfgs.config_set("campaign") if c.name not in COMPILED_ONLY]


def _json(r: CheckResult) -> dict[str, Any]:
    data = r.to_json()
    del data["seconds"]
    return data


def assert_same(cfg: SpecConfig, named: bool = False, **kw: Any) -> CheckResult:
    """Both explorers on ``cfg``: identical results, states (by index) and edges (``named``: ``cfg`` is
    the named config itself, explored whole, and the plain run is the session's shared one)."""
    if named:
        plain, expected = plain_run(cfg.name)
    else:
        plain = Explorer(cfg, **kw)
        expected = plain.run()
    fast = FastExplorer(cfg, **kw)
    got = fast.run()
    assert _json(got) == _json(expected)
    assert [fast.state(i) for i in range(len(fast.store))] == plain.graph.states
    for i in range(len(fast.store)):
        edges = list(fast.store.successors(i)) if i < fast.store.expanded else []
        assert edges == plain.graph.edges[i], f"edges of state {i}"
    return got


# ---------------------------------------------------------------- every named config


SLOW_HERE = {"async-d2-stream", "paused_session_frees_slot", "stream_stop_keeps_in_flight",
             "offload_finished_jobs_unwatched", "encoder_evictions_not_sent", "paused_new_admits_waiting",
             "every_abort_wastes", "paused_all_keeps_budget"}
"""Default configs and mutants compared in ``slow`` only: each takes seconds here, and the default tier
keeps a cheaper one of the same feature (finding-stream-paused-starves and finding-stream-sessions-deadlock
for sessions; offload_store_past_tokens, encoder_hit_stays_freeable, unfinished_ignores_pause,
preempt_adds_stale)."""


def _tiered(names: list[str]) -> list[Any]:
    """``names`` as parameters, those of ``SLOW_HERE`` marked slow."""
    return [pytest.param(n, marks=pytest.mark.slow, id=n) if n in SLOW_HERE else pytest.param(n, id=n)
            for n in names]


@pytest.mark.parametrize("name", _tiered(DEFAULT_TIER))
def test_fast_equals_plain_on_named_config(name: str) -> None:
    assert_same(cfgs.named_configs()[name], named=True, stop_on_first=False)


@pytest.mark.slow
@pytest.mark.parametrize("name", SLOW_TIER)
def test_fast_equals_plain_on_slow_config(name: str) -> None:
    assert_same(cfgs.named_configs()[name])


@pytest.mark.campaign
@pytest.mark.parametrize("name", CAMPAIGN)
def test_campaign_config_matches_its_pinned_counts(name: str) -> None:
    """Configs the plain explorer cannot afford: the fast explorer alone, against the manifest."""
    r = FastExplorer(cfgs.named_configs()[name]).run()
    pinned = cfgs.load_manifest()[name]
    assert (r.distinct_states, r.depth) == (pinned["distinct_states"], pinned["depth"])
    assert r.ok, [v.message for v in r.violations] + r.vacuous


@pytest.mark.campaign
def test_fast_equals_plain_on_the_four_request_config() -> None:
    assert_same(cfgs.named_configs()["async-d2-4req"])


def test_fast_equals_plain_without_symmetry_and_with_first_stop() -> None:
    for name in ("async-d2", "async-d2-defer", "sync-d1"):
        assert_same(cfgs.named_configs()[name], symmetry=False)
    for cfg in cfgs.config_set("finding"):
        assert_same(cfg, stop_on_first=True)


def test_fast_equals_plain_when_stopped_by_max_states() -> None:
    cfg = cfgs.named_configs()["async-free"]
    for cap in (1, 57, 1000):
        r = assert_same(cfg, max_states=cap)
        assert r.partial and r.partial_reason == f"stopped at --max-states {cap}"


# ---------------------------------------------------------------- random configs


def random_config(seed: int) -> SpecConfig:
    """A small valid config drawn from ``seed`` (deterministic)."""
    for attempt in range(100):
        rng = random.Random(seed * 1000 + attempt)
        n = rng.choice([1, 2, 2, 3])
        requests = tuple((rng.randint(1, 4), rng.randint(1, 3)) for _ in range(n))
        depth = rng.choice([1, 2, 2, 3])
        k = rng.choice([0, 0, 0, 1, 2])
        block_size = rng.choice([2, 4])
        need = max(-(-(p + m + depth * k) // block_size) for p, m in requests)
        chunked = rng.random() < 0.8
        budget = rng.choice([2, 3, 4, 8])
        if not chunked:
            budget = max([budget] + [p + m - 1 for p, m in requests])
        try:
            return SpecConfig(
                name=f"random-{seed}", requests=requests, batch_queue_depth=depth,
                loop=rng.choice(["exact", "exact", "free"]), token_budget=budget,
                max_num_seqs=rng.choice([1, 2, 4]), block_size=block_size,
                num_blocks=need + rng.randint(0, 3), enable_chunked_prefill=chunked,
                enable_prefix_caching=rng.random() < 0.7, defer_block_free=rng.random() < 0.3,
                stale_mode=rng.choice(["deliver", "drop"]), aborts=rng.random() < 0.3,
                late_arrivals=n > 1 and rng.random() < 0.3, forced_preemptions=rng.choice([0, 0, 1]),
                num_speculative_tokens=k,
                structured_output=tuple(i for i in range(n) if rng.random() < 0.2),
            )
        except ConfigError:
            continue
    raise AssertionError(f"no valid config for seed {seed}")


@pytest.mark.parametrize("seed", range(12))
def test_fast_equals_plain_on_random_config(seed: int) -> None:
    assert_same(random_config(seed), stop_on_first=False, max_states=3000)


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(12, 112))
def test_fast_equals_plain_on_more_random_configs(seed: int) -> None:
    assert_same(random_config(seed), stop_on_first=False, max_states=30_000)


def test_random_configs_differ() -> None:
    assert len({dataclasses.replace(random_config(s), name="x") for s in range(12)}) == 12


# ---------------------------------------------------------------- spec mutants


@pytest.mark.parametrize("name", _tiered([m.name for m in MUTANTS if not is_dp_config(m.config)]))  # DP: tests/test_dp.py
def test_fast_kills_every_mutant_with_the_plain_trace(name: str) -> None:
    mutant = MUTANTS_BY_NAME[name]
    cfg = dataclasses.replace(cfgs.named_configs()[mutant.config], expect_violation=None, properties=None)
    with applied(mutant.patches):
        r = assert_same(cfg, stop_on_first=False, max_states=MUTANT_STATE_CAP)
    assert mutant.property in {v.property for v in r.violations}


# ---------------------------------------------------------------- the pieces


def _successors(name: str, limit: int = 400) -> list[Transition]:
    cfg = cfgs.named_configs()[name]
    e = Explorer(cfg, max_states=limit)
    e.run()
    return [t for s in e.graph.states for t in engine.next_states(cfg, s)]


@pytest.mark.parametrize("name", ["async-d2-defer", "async-d3-defer", "async-d2-spec", "async-free"])
def test_packed_canonical_form_is_the_symmetry_modules(name: str) -> None:
    p = packed.Packer(symmetry=True)
    for t in _successors(name):
        assert p.decode(p.canonical_ids(t.state)) == canonical(t.state)
        assert p.decode(p.pack(t.state)) == t.state


def test_store_finds_every_key_across_growth_and_restore() -> None:
    g = store.PackedStore()
    keys = [(i % 7, i, i // 3, 0, 1, 2, i * 5) for i in range(5000)]
    for depth, k in enumerate(keys):
        assert g.add(k, -1, 0, depth // 1000) == (depth, True)
    back = store.PackedStore.restore(g.snapshot())
    for i, k in enumerate(keys):
        assert g.add(k, -1, 0, 0) == (i, False) and back.add(k, -1, 0, 0) == (i, False)
        assert back.ids(i) == k
    assert back.depth(4999) == 4 and back.max_depth == 4


def test_store_widens_its_keys_when_an_id_passes_65535() -> None:
    g = store.PackedStore()
    small = [(i, 0, 0, 0, 0, 0, 1) for i in range(3000)]
    for k in small:
        g.add(k, -1, 0, 0)
    assert g.add((70_000, 0, 0, 0, 0, 0, 1), -1, 0, 0) == (3000, True)
    back = store.PackedStore.restore(g.snapshot())
    for i, k in enumerate(small):
        assert g.add(k, -1, 0, 0) == (i, False) and back.ids(i) == k
    assert back.ids(3000) == (70_000, 0, 0, 0, 0, 0, 1)


def test_cycle_finder_matches_networkx_on_random_graphs() -> None:
    rng = random.Random(7)
    for _ in range(200):
        n = rng.randint(1, 30)
        g: StateGraph[int, None] = StateGraph()
        for v in range(n):
            g.add(v, -1, None, 0)
        for v in range(n):
            g.edges[v] = [rng.randrange(n) for _ in range(rng.choice([0, 1, 1, 2, 3]))]
        start = [0]
        for v in range(n):
            start.append(start[-1] + len(g.edges[v]))
        assert scc.cycle_nodes(start, [w for es in g.edges for w in es]) == cycle_nodes(g)


def test_property_memo_reads_only_what_it_must() -> None:
    """Properties that read only the counters and parameters share one group."""
    cfg = cfgs.named_configs()["async-d2-aborts"]
    e = FastExplorer(cfg)
    e.run()
    groups = [g for g in e.memo._order if g.members]
    by_name = {e.memo.props[i].name: g.reads for g in groups for i in g.members}
    assert by_name["blocks_conserved"] == {packed.TABLES, packed.POOL}
    assert by_name["output_within_max_tokens"] == {packed.COUNTERS, packed.PARAMS}
    assert e.memo.misses < len(e.store) * len(e.always) / 3


@pytest.mark.parametrize("module", [packed, store, scc, memo, fast_explorer, measure])
def test_doctests(module: Any) -> None:
    assert doctest.testmod(module).failed == 0


# ---------------------------------------------------------------- workers, checkpoints, memory


@pytest.mark.parametrize("name", ["async-free", "async-d2-spec", "finding-frontier-strict"])
def test_jobs_equal_one_process(name: str) -> None:
    cfg = cfgs.named_configs()[name]
    one = FastExplorer(cfg, stop_on_first=False)
    expected = _json(one.run())
    for jobs in (2, 3):
        many = FastExplorer(cfg, stop_on_first=False, expander=PoolExpander(cfg, jobs))
        assert _json(many.run()) == expected
        graph = {k: v for k, v in one.store.snapshot().items() if k != "keys"}  # ids are numbered apart
        assert {k: v for k, v in many.store.snapshot().items() if k != "keys"} == graph
        assert [many.state(i) for i in range(len(many.store))] == [one.state(i) for i in range(len(one.store))]


def test_jobs_2_kill_a_mutant_with_the_plain_trace() -> None:
    """Forked workers run the mutated spec: the same traces as one process."""
    m = next(m for m in MUTANTS if m.name == "stale_delivery_decrements_placeholders")
    cfg = cfgs.named_configs()[m.config]
    with applied(m.patches):
        expected = _json(Explorer(cfg, stop_on_first=False).run())
        got = _json(FastExplorer(cfg, stop_on_first=False, expander=PoolExpander(cfg, 2)).run())
    assert got == expected and any(v["property"] == m.property for v in got["violations"])


class _InterruptAfter(LocalExpander):
    """Sends this process SIGINT after ``batches`` batches: a Ctrl-C mid-run."""

    def __init__(self, cfg: SpecConfig, batches: int) -> None:
        super().__init__(cfg)
        self.left = batches

    def expand(self, batch: list[Ids]) -> list[list[Successor]]:
        self.left -= 1
        if self.left == 0:
            os.kill(os.getpid(), signal.SIGINT)
        return super().expand(batch)


def test_an_interrupted_run_resumes_to_the_uninterrupted_result(tmp_path: Path) -> None:
    cfg = cfgs.named_configs()["async-free"]
    whole = FastExplorer(cfg)
    expected = whole.run()
    path = tmp_path / "free.ckpt"
    first = FastExplorer(cfg, checkpoint=path, expander=_InterruptAfter(cfg, 20))
    partial = first.run()
    assert partial.partial and partial.partial_reason == "interrupted" and path.exists()
    assert 0 < partial.distinct_states < expected.distinct_states
    resumed = FastExplorer(cfg, checkpoint=path, resume=True)
    assert _json(resumed.run()) == _json(expected)
    assert resumed.store.snapshot() == whole.store.snapshot()
    assert not path.exists()  # complete: nothing left to resume


def test_a_checkpoint_of_another_config_or_spec_is_refused(tmp_path: Path, monkeypatch: Any) -> None:
    cfg = cfgs.named_configs()["async-free"]
    path = tmp_path / "c.ckpt"
    FastExplorer(cfg, max_states=100, checkpoint=path).run()
    other = cfgs.named_configs()["async-d2"]
    with pytest.raises(checkpoint.CheckpointError, match="checkpoint of config 'async-free'"):
        FastExplorer(other, checkpoint=path, resume=True).run()
    monkeypatch.setattr(checkpoint, "spec_fingerprint", lambda: "another")
    with pytest.raises(checkpoint.CheckpointError, match="another spec version"):
        FastExplorer(cfg, checkpoint=path, resume=True).run()
    path.write_bytes(b"not a checkpoint")
    with pytest.raises(checkpoint.CheckpointError, match="not an asyncspec checkpoint"):
        FastExplorer(cfg, checkpoint=path, resume=True).run()


def test_max_memory_stops_cleanly_with_a_partial_report(tmp_path: Path) -> None:
    cfg = cfgs.named_configs()["async-free"]
    path = tmp_path / "m.ckpt"
    r = FastExplorer(cfg, max_memory=measure.rss_bytes() - 1, checkpoint=path).run()
    assert r.partial and r.partial_reason.startswith("stopped at --max-memory") and not r.violations
    assert r.distinct_states > 0 and path.exists()
