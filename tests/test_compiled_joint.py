"""The compiled joint explorer (``checker/compiled_joint.py``, ``csrc/worker*.c``) held to the
interpreted one (``checker/joint.py``'s ``Search``): the same result (counts, depth, witnesses,
every violation with its message and trace), the same states at the same indices and the same
edges, on every ``configs/worker/*.toml`` row (V1, V2 and Neuron; the pinned counts of the
manifest) and on random configs with each strategy (stopping on the first violation and not);
refusals up front with one line; a worker mutant never runs in C."""
from __future__ import annotations

import random
from typing import Any

import pytest

from asyncspec.spec.config import ConfigError, SpecConfig
from asyncspec.spec.worker import REQUIRED_WITNESSES, WorkerConfig

from asyncspec.checker import compiled, joint
from asyncspec.checker.bfs import Search
from asyncspec.checker.configs import load_manifest
from asyncspec.checker.result import CheckResult
from asyncspec.checker.compiled_joint import CompiledJointExplorer, worker_not_covered
from asyncspec.checker.joint import EXPECTATIONS, JointModel, explore_joint, small_configs
from asyncspec.checker.spec_mutants import applied
from asyncspec.checker.worker_mutants import MUTANTS, run_worker_mutant

pytestmark = pytest.mark.skipif(not compiled.built(), reason=compiled.NOT_BUILT)

ENCODED = ("v1", "v2", "neuron")
"""The strategies the C encoding has (all three)."""
RANDOM_DRAWN = ("v1", "v2")
"""The strategies a random config draws (Neuron's random configs are the same configs, named)."""


def _untimed(r: Any) -> dict[str, Any]:
    data: dict[str, Any] = r.to_json()
    data.pop("seconds")
    return data


def assert_same(cfg: SpecConfig, wcfg: WorkerConfig, required: tuple[str, ...] = (), engine_properties: bool = True,
                stop_on_first: bool = True, max_states: int | None = None) -> CheckResult:
    """Compiled == interpreted: the JSON result, every state and every edge by index; the result."""
    c = CompiledJointExplorer(JointModel(cfg, wcfg, required, engine_properties), max_states, stop_on_first)
    result = c.run()
    mine = _untimed(result)
    plain = Search(JointModel(cfg, wcfg, required, engine_properties), max_states, stop_on_first,
                   partial_on_interrupt=False)
    assert mine == _untimed(plain.run()), (cfg.name, wcfg)
    g = plain.graph
    states = c.all_states()
    assert len(states) == len(g.states)
    for i, s in enumerate(states):
        assert s == g.states[i], (cfg.name, wcfg.strategy, i)
    assert c.state(len(states) - 1) == g.states[-1]  # the path replay agrees with the parent-by-parent one
    start, target = (memoryview(b).cast("I") for b in c.c.csr())
    for i in range(c.c.stats()["head"]):
        assert list(target[start[i]:start[i + 1]]) == list(g.edges[i]), (cfg.name, wcfg.strategy, i)
    return result


@pytest.mark.parametrize("e", [e for e in EXPECTATIONS if e.strategy in ENCODED], ids=lambda e: f"{e.config}/{e.strategy}")
def test_compiled_equals_interpreted_on_a_worker_config(e: Any) -> None:
    cfg = small_configs()[e.config]
    pin = load_manifest()[f"{e.config}/{e.strategy}"]
    for stop_on_first in (True, False):  # a mutant-style run: past the first violation too
        r = assert_same(cfg, WorkerConfig(e.strategy), e.required_witnesses, e.engine_properties, stop_on_first)
        if stop_on_first:  # the pinned run (checker/joint.run_expectation's)
            assert (r.distinct_states, r.depth) == (pin["distinct_states"], pin["depth"])
        if not r.violations:  # nothing stopped it: the run past violations is this same search
            break


@pytest.mark.parametrize("strategy", ENCODED)
def test_every_worker_config_runs_compiled_with_the_pinned_result(strategy: str, capsys: pytest.CaptureFixture[str]) -> None:
    for name, cfg in small_configs().items():
        assert worker_not_covered(cfg, WorkerConfig(strategy)) is None, name
    rows = [e for e in EXPECTATIONS if e.strategy == strategy]
    assert rows and all(joint.run_expectation(e).ok for e in rows)
    assert capsys.readouterr().err == ""  # no fallback line: every row ran on the C encoding


def random_joint_config(seed: int, big: bool = False, strategy: str | None = None) -> tuple[SpecConfig, WorkerConfig]:
    """A valid config and worker inside what the joint C encoding covers, drawn from ``seed``
    (the strategy V1 or V2 as drawn, unless ``strategy`` is given: the same config with it)."""
    for attempt in range(100):
        rng = random.Random(seed * 1000 + attempt)
        n = rng.choice([1, 2, 2, 2, 3] + ([3, 4] if big else []))
        requests = tuple((rng.randint(1, 3), rng.randint(1, 4)) for _ in range(n))
        depth = rng.choice([1, 2, 2, 3])
        block_size = rng.choice([1, 2, 4])
        need = max(-(-(p + m - 1) // block_size) for p, m in requests) + rng.choice([0, 1, 2, 4])
        chunked = rng.random() < 0.8
        budget = rng.choice([1, 2, 3, 4])
        if not chunked:
            budget = max([budget] + [p + m - 1 for p, m in requests])
        try:
            cfg = SpecConfig(
                name=f"random-joint-{seed}", requests=requests, batch_queue_depth=depth,
                loop=rng.choice(["exact", "exact", "free"]), token_budget=budget,
                max_num_seqs=rng.choice([1, 2, 4]), block_size=block_size, num_blocks=min(16, need),
                enable_chunked_prefill=chunked, enable_prefix_caching=rng.random() < 0.6,
                reserve_full_isl=rng.random() < 0.8, defer_block_free=rng.random() < 0.3,
                stale_mode=rng.choice(["deliver", "drop"]),
                decode_stagger=rng.choice([None, 1, 2]) if depth > 2 else None,
                aborts=rng.random() < 0.3, abort_mode=rng.choice(["immediate", "immediate", "deferred"]),
                late_arrivals=n > 1 and rng.random() < 0.4, forced_preemptions=rng.choice([0, 0, 1]),
                policy="priority" if rng.random() < 0.15 else "fcfs",
                long_prefill_token_threshold=rng.choice([0, 0, 1, 2]),
                max_model_len=None if rng.random() < 0.85 else max(p + m for p, m in requests) - rng.randint(0, 1),
            )
        except ConfigError:
            continue
        buckets = rng.choice([(1, 4), (1, 4), (2,), (1, 2, 8), (3,)])
        drawn = rng.choice(RANDOM_DRAWN)
        return cfg, WorkerConfig(strategy or drawn, buckets, "any" if rng.random() < 0.8 else "none")
    raise AssertionError(f"no valid config for seed {seed}")


SMALL_SEEDS = (0, 1, 3, 4, 7, 9, 10, 13, 16, 22, 49, 53)
"""Random configs of at most a few hundred joint states (a W1 finding, engine findings among them)."""


@pytest.mark.parametrize("seed", [*SMALL_SEEDS, *(pytest.param(s, marks=pytest.mark.slow)
                                                  for s in range(100) if s not in SMALL_SEEDS)])
def test_compiled_equals_interpreted_on_a_random_config(seed: int) -> None:
    cfg, wcfg = random_joint_config(seed)
    assert_same(cfg, wcfg, stop_on_first=seed % 2 == 0, max_states=20_000)


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(100, 130))
def test_compiled_equals_interpreted_on_a_larger_random_config(seed: int) -> None:
    cfg, wcfg = random_joint_config(seed, big=True)
    assert_same(cfg, wcfg, stop_on_first=seed % 2 == 0, max_states=20_000)


NEURON_SMALL_SEEDS = (3, 4, 9, 13, 16, 22, 34, 51, 53, 72, 76, 98)
"""The same random configs with the Neuron worker: at most 1,540 joint states each (W1 and engine
findings, a remap, a shape mismatch among them)."""


@pytest.mark.parametrize("seed", [*NEURON_SMALL_SEEDS, *(pytest.param(s, marks=pytest.mark.slow)
                                                         for s in range(100) if s not in NEURON_SMALL_SEEDS)])
def test_compiled_equals_interpreted_on_a_random_config_with_the_neuron_worker(seed: int) -> None:
    cfg, wcfg = random_joint_config(seed, strategy="neuron")
    assert_same(cfg, wcfg, stop_on_first=seed % 2 == 0, max_states=20_000)


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(100, 130))
def test_compiled_equals_interpreted_on_a_larger_random_config_with_the_neuron_worker(seed: int) -> None:
    cfg, wcfg = random_joint_config(seed, big=True, strategy="neuron")
    assert_same(cfg, wcfg, stop_on_first=seed % 2 == 0, max_states=20_000)


def test_the_random_configs_find_a_worker_violation_and_reach_the_worker_witnesses() -> None:
    found: set[str] = set()
    reached: set[str] = set()
    for seed in SMALL_SEEDS:
        cfg, wcfg = random_joint_config(seed)
        r = CompiledJointExplorer(JointModel(cfg, wcfg, ())).run()
        found |= {v.property for v in r.violations}
        reached |= {w for w, hit in r.witnesses.items() if hit and w.startswith("worker_")}
    assert "W1_feed_is_last_sampled" in found
    assert {"worker_reorder", "worker_composition_change", "worker_async_step"} <= reached


def test_the_neuron_random_configs_find_a_worker_violation_and_reach_the_neuron_witnesses() -> None:
    found: set[str] = set()
    reached: set[str] = set()
    for seed in NEURON_SMALL_SEEDS:
        cfg, wcfg = random_joint_config(seed, strategy="neuron")
        r = CompiledJointExplorer(JointModel(cfg, wcfg, ())).run()
        found |= {v.property for v in r.violations}
        reached |= {w for w, hit in r.witnesses.items() if hit and w.startswith("worker_")}
    assert "W1_feed_is_last_sampled" in found
    assert set(REQUIRED_WITNESSES["neuron"]) <= reached  # the remap, the mismatch, both materialisations


def test_what_the_encoding_does_not_cover_is_refused_with_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    cfg = small_configs()["worker-d2"]
    refused = {
        "num_speculative_tokens": (SpecConfig(name="k", requests=((2, 2),), num_speculative_tokens=1, enable_prefix_caching=False), WorkerConfig("v1")),
        "KV connector": (SpecConfig(name="kv", requests=((2, 2),), kv_connector=True, enable_prefix_caching=False), WorkerConfig("v2")),
        "row orders": (SpecConfig(name="six", requests=((1, 1),) * 6, num_blocks=16), WorkerConfig("v1")),
        "decode buckets": (cfg, WorkerConfig("v2", (1, 16))),
        "--no-symmetry": (cfg, WorkerConfig("v1")),
    }
    for word, (c, w) in refused.items():
        why = worker_not_covered(c, w, symmetry=word != "--no-symmetry")
        assert why is not None and word in why and "\n" not in why, (word, why)
    with pytest.raises(ValueError, match="decode buckets outside"):
        CompiledJointExplorer(JointModel(cfg, WorkerConfig("neuron", (1, 16)), ()))
    small = SpecConfig(name="tiny-k", requests=((2, 1),), num_speculative_tokens=1, enable_prefix_caching=False)
    a, b = explore_joint(small, "v1", required_witnesses=()), explore_joint(small, "v1", required_witnesses=())
    assert _untimed(a) == _untimed(b) == _untimed(explore_joint(small, "v1", required_witnesses=(), explorer="plain"))
    err = capsys.readouterr().err.splitlines()
    assert err == ["asyncspec: tiny-k/v1: num_speculative_tokens: drafts in the worker's rows are not encoded; "
                   "using the interpreted joint explorer"]  # one line, once per config and reason
    with pytest.raises(ValueError, match="explorer must be"):
        explore_joint(small, "v1", explorer="fast")


def test_without_the_extension_the_interpreted_explorer_runs_with_one_note(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(compiled, "_C", None)
    monkeypatch.setattr(joint, "_NOTED", set())
    cfg = small_configs()["worker-d3"]
    for _ in range(2):
        r = explore_joint(cfg, "v1", required_witnesses=())
    assert r.distinct_states == 81
    assert capsys.readouterr().err.splitlines() == [f"asyncspec: {compiled.NOT_BUILT}; using the interpreted joint explorer"]


@pytest.mark.parametrize("mutant", MUTANTS, ids=lambda m: m.name)
def test_a_worker_mutant_never_runs_on_the_compiled_path(mutant: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = small_configs()["worker-d2"]
    with applied(mutant.patches):
        why = worker_not_covered(cfg, WorkerConfig("v1"))
    assert why is not None and "(a seeded mutant)" in why
    assert worker_not_covered(cfg, WorkerConfig("v1")) is None  # restored after the patch
    if mutant.strategy in ENCODED:  # its run is the interpreted one: the C search is never built
        monkeypatch.setattr(CompiledJointExplorer, "run", lambda self: pytest.fail("a mutant ran in C"))
        assert run_worker_mutant(mutant).killed  # on its configs (MUTANT_CONFIGS), all interpreted
