"""The compiled explorer (``checker/compiled.py``, ``csrc/``) held to the spec: the same result as
``--explorer plain`` (counts, depth, witnesses, every violation with its trace and message), the
same states at the same indices and the same edges, on every pinned config it covers and on
random configs; refusals up front; a seeded mutant never runs on the C encoding."""
from __future__ import annotations

import dataclasses
import random
from typing import Any

import pytest

from asyncspec.spec.config import PAUSE_MODES, ConfigError, SpecConfig
from asyncspec.spec.events import ALL_EVENTS
from asyncspec.spec.properties import ALL_ALWAYS

from asyncspec.checker import compiled
from asyncspec.checker.bfs import Explorer
from asyncspec.checker.check_run import RunSettings, check_config
from asyncspec.checker.configs import load_manifest, named_configs
from asyncspec.checker.fast_explorer import explore_fast
from asyncspec.checker.spec_mutants import MUTANTS, applied

from tests.conftest import cli_json

pytestmark = pytest.mark.skipif(not compiled.built(), reason=compiled.NOT_BUILT)

NOT_ENCODED = {"encoder_output_available", "encoder_cache_bounded", "mamba_states_held", "mamba_chunks_aligned"}
"""The properties of encoder inputs and Mamba groups, which the C encoding does not check."""
SESSION_ONLY = {"paused_sessions_hold_slots", "stopped_turn_output_dropped"}
"""The streaming-input sessions' properties (spec/properties.py): a random config names them only with sessions."""
OFFLOAD_ONLY = {"store_reads_fenced", "offload_accounting"}
"""The offloading connector's properties (spec/offload.py): a random config names them only with it."""
COVERED = {name for name, cfg in named_configs().items()
           if not cfg.images and not cfg.mamba_cache_mode and not (cfg.sliding_window and cfg.enable_prefix_caching)}
"""The pinned configs the C encoding covers: every one of the scheduler's, the KV connectors'
(``kv-invalid-blocks*``, ``kv-sends-aborts``, ``kv-offloading``), the sliding window's (``async-d2-swa``) and
the streaming-input sessions' (``async-d2-stream``, ``finding-stream-*``) included, but the encoder
inputs' (``async-d2-encoder``, ``finding-encoder-undo-miss``), the Mamba group's (``async-d2-mamba``) and
the sliding window's with prefix caching (``async-d2-swa-hit``): ``compiled.not_covered`` sends them to the
fast explorer."""
HEAVY = {"kv-offloading", "async-d2-stream", "finding-stream-paused-starves"}
"""Covered pinned configs whose state-by-state replay takes over 5 s here: the default tier compares their
JSON results, ``slow`` every state and edge."""


def _untimed(r: Any) -> dict[str, Any]:
    data: dict[str, Any] = r.to_json()
    data.pop("seconds")
    return data


def assert_same(cfg: SpecConfig, max_states: int | None = None, states: bool = True) -> None:
    """Compiled == plain: the JSON result, and (``states``) every state and edge by index."""
    c = compiled.CompiledExplorer(cfg, max_states=max_states)
    mine = _untimed(c.run())
    plain = Explorer(cfg, True, max_states, True)
    assert mine == _untimed(plain.run()), cfg
    if not states:
        return
    g = plain.graph
    assert c.c.stats()["states"] == len(g.states)
    for i, s in enumerate(g.states):
        assert c.state(i) == s, (cfg.name, i)
    start, target = (memoryview(b).cast("I") for b in c.c.csr())
    expanded = c.c.stats()["head"]
    for i in range(expanded):
        assert list(target[start[i]:start[i + 1]]) == list(g.edges[i]), (cfg.name, i)


def compiled_free(cfg: SpecConfig) -> dict[str, Any]:
    """The fast explorer's JSON result of ``cfg``, its first 300 states."""
    data: dict[str, Any] = explore_fast(cfg, max_states=300).to_json()
    return data


def _pinned(which: str) -> list[str]:
    return sorted(n for n, cfg in named_configs().items() if cfg.extra.get("set") == which
                  or (which == "default" and cfg.extra.get("set") == "finding"))


def test_the_covered_pinned_configs_are_the_listed_ones() -> None:
    covered = {n for n, cfg in named_configs().items() if compiled.not_covered(cfg) is None}
    assert covered == COVERED


@pytest.mark.parametrize("name", [n for n in _pinned("default") if n in COVERED])
def test_compiled_equals_plain_on_a_pinned_config(name: str) -> None:
    assert_same(named_configs()[name], states=name not in HEAVY)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(HEAVY))
def test_compiled_equals_plain_state_by_state_on_a_heavy_pinned_config(name: str) -> None:
    assert_same(named_configs()[name])


def random_config(seed: int, big: bool = False) -> SpecConfig:
    """A valid config inside what the C encoding covers, drawn from ``seed`` (deterministic)."""
    for attempt in range(100):
        rng = random.Random(seed * 1000 + attempt)
        n = rng.choice([1, 2, 2, 3] + ([3, 4] if big else []))
        requests = tuple((rng.randint(1, 4), rng.randint(1, 3)) for _ in range(n))
        depth = rng.choice([1, 2, 2, 3, 4])
        k = rng.choice([0, 0, 0, 1, 2])
        lookahead = None if not k or rng.random() < 0.7 else rng.randint(0, k + 1)
        block_size = rng.choice([1, 2, 4])
        need = max(-(-(p + m - 1) // block_size) for p, m in requests) + rng.choice([0, 0, 1, 1, 2, 3])
        chunked = rng.random() < 0.8
        budget = rng.choice([1, 2, 3, 4, 8])
        if not chunked:
            budget = max([budget] + [p + m - 1 for p, m in requests])
        eos = None if rng.random() < 0.7 else tuple(tuple(sorted(rng.sample(range(m + 2), 2))) for _, m in requests)
        try:
            cfg = SpecConfig(
                name=f"random-{seed}", requests=requests, batch_queue_depth=depth,
                loop=rng.choice(["exact", "exact", "free"]), token_budget=budget,
                max_num_seqs=rng.choice([1, 2, 4]), block_size=block_size,
                num_blocks=min(16, need), enable_chunked_prefill=chunked,
                enable_prefix_caching=rng.random() < 0.7, reserve_full_isl=rng.random() < 0.8,
                defer_block_free=rng.random() < 0.3, stale_mode=rng.choice(["deliver", "drop"]),
                decode_stagger=rng.choice([None, None, 1, 2, 3]) if depth > 2 else None,
                aborts=rng.random() < 0.4, abort_mode=rng.choice(["immediate", "immediate", "deferred"]),
                late_arrivals=n > 1 and rng.random() < 0.3, forced_preemptions=rng.choice([0, 0, 1, 2]),
                eos_positions=eos, num_speculative_tokens=k, num_lookahead_tokens=lookahead,
                structured_output=tuple(i for i in range(n) if rng.random() < 0.2),
                policy="priority" if rng.random() < 0.2 else "fcfs",
                priorities=tuple(rng.randint(0, 2) for _ in range(n)) if rng.random() < 0.2 else (),
                long_prefill_token_threshold=rng.choice([0, 0, 0, 1, 2, 3]), long_prefill_adaptive=rng.random() < 0.5,
                max_model_len=None if rng.random() < 0.8 else max(p + m for p, m in requests) - rng.randint(0, 2),
                properties=None if rng.random() < 0.8 else tuple(rng.sample(sorted(
                    set(ALL_ALWAYS) - NOT_ENCODED - SESSION_ONLY - OFFLOAD_ONLY), 4)),
            )
            return with_sessions(with_window(with_connector(with_pauses(cfg, rng), rng), rng), rng)
        except ConfigError:
            continue
    raise AssertionError(f"no valid config for seed {seed}")


def with_pauses(cfg: SpecConfig, rng: random.Random) -> SpecConfig:
    """``cfg`` with pause calls drawn last (the other draws stay those of the seed): any
    non-empty subset of the modes, in any order; none with deferred aborts."""
    pauses = rng.choice([0, 0, 0, 1, 2])
    modes = [m for m in PAUSE_MODES if rng.random() < 0.6] or [rng.choice(PAUSE_MODES)]
    if rng.random() < 0.3:
        rng.shuffle(modes)  # the pause actions come in the config's order
    if not pauses or cfg.abort_mode == "deferred":
        return cfg
    properties = cfg.properties
    if properties is not None and "pause_respected" not in properties:
        properties = (*properties, "pause_respected")
    return dataclasses.replace(cfg, pauses=pauses, pause_modes=tuple(modes), properties=properties)


def with_connector(cfg: SpecConfig, rng: random.Random) -> SpecConfig:
    """``cfg`` with a KV connector drawn last (the other draws stay those of the seed), where the
    spec models one (no drafts, no deferred abort; prefix caching off): loads of any requests
    (whole prompt or P - 1), sends, invalid-block reports, either failure policy."""
    n = len(cfg.requests)
    on = rng.random() < 0.3
    loads = tuple(i for i in range(n) if rng.random() < 0.6)
    sends = tuple(i for i in range(n) if rng.random() < 0.4)
    invalid, fail, whole = rng.random() < 0.6, rng.random() < 0.4, rng.random() < 0.3
    offload, prompt_only = rng.random() < 0.35, rng.random() < 0.5
    if not on or cfg.num_speculative_tokens or cfg.abort_mode == "deferred":
        return cfg
    if offload and not cfg.structured_output:
        return with_offloading(cfg, prompt_only)
    return dataclasses.replace(cfg, kv_connector=True, enable_prefix_caching=False, remote_loads=loads,
                               remote_sends=sends, kv_invalid_blocks=invalid, kv_load_whole_prompt=whole,
                               kv_load_failure_policy="fail" if fail else "recompute")


def with_offloading(cfg: SpecConfig, prompt_only: bool) -> SpecConfig:
    """``cfg`` with vLLM's OffloadingConnector as its connector (fenced frees exactly with overlapping
    steps, as vLLM sets them), the offloading properties among any it names; unchanged where the C
    encoding's store-job bounds refuse it."""
    properties = cfg.properties and (*cfg.properties, *sorted(OFFLOAD_ONLY))
    offloading = dataclasses.replace(cfg, kv_connector=True, kv_offloading=True, kv_offload_prompt_only=prompt_only,
                                     enable_prefix_caching=False, defer_block_free=cfg.batch_queue_depth > 1,
                                     properties=properties)
    return cfg if compiled.not_covered(offloading) else offloading


def with_window(cfg: SpecConfig, rng: random.Random) -> SpecConfig:
    """``cfg`` with a sliding-window group drawn last, where the spec models one (no drafts, no
    connector; prefix caching off), its pool doubled for the second group (up to 16 blocks)."""
    window, on = rng.randint(1, 5), rng.random() < 0.25
    if not on or cfg.num_speculative_tokens or cfg.kv_connector:
        return cfg
    try:
        return dataclasses.replace(cfg, sliding_window=window, enable_prefix_caching=False,
                                   num_blocks=min(16, 2 * cfg.num_blocks))
    except ConfigError:
        return cfg


def with_sessions(cfg: SpecConfig, rng: random.Random) -> SpecConfig:
    """``cfg`` with streaming-input sessions drawn last (the other draws stay those of the seed), where
    the spec models them (chunked prefill; no connector, window, drafts, grammar or deferred abort;
    prefix caching off): any requests, one or two updates, the pool raised for the longest session."""
    on, sessions = rng.random() < 0.7, tuple(i for i in range(len(cfg.requests)) if rng.random() < 0.6)
    updates = tuple((rng.randint(1, 2), rng.randint(1, 2)) for _ in range(rng.choice([1, 1, 2])))
    if (not on or not sessions or not cfg.enable_chunked_prefill or cfg.kv_connector or cfg.sliding_window
            or cfg.num_speculative_tokens or cfg.structured_output or cfg.abort_mode == "deferred"):
        return cfg
    properties = cfg.properties and (*cfg.properties, *sorted(SESSION_ONLY))
    longest = max(cfg.requests[i][0] + cfg.requests[i][1] + sum(u + m - 1 for u, m in updates) for i in sessions)
    try:
        return dataclasses.replace(cfg, resumable=sessions, stream_updates=updates, enable_prefix_caching=False,
                                   num_blocks=max(cfg.num_blocks, cfg.blocks_for(longest)), properties=properties)
    except ConfigError:
        return cfg


@pytest.mark.parametrize("seed", [*range(100), *(pytest.param(s, marks=pytest.mark.slow) for s in range(100, 200))])
def test_compiled_equals_plain_on_a_random_config(seed: int) -> None:
    """Seeds 0-99 in the default tier (connectors, sliding windows, offloading and sessions among them), 100-199
    in slow (the default tier's time budget); every seed's witnesses are counted below either way."""
    cfg = random_config(seed)
    assert compiled.not_covered(cfg) is None
    assert_same(cfg, max_states=1500)


def tight_config(seed: int) -> SpecConfig:
    """A priority-policy config with a pool just large enough: pass-1 preemptions of every kind."""
    for attempt in range(100):
        rng = random.Random(seed * 7919 + attempt)
        n = rng.choice([2, 3])
        requests = tuple((rng.randint(1, 4), rng.randint(2, 4)) for _ in range(n))
        bs = rng.choice([1, 2])
        need = max(-(-(p + m - 1) // bs) for p, m in requests)
        try:
            return SpecConfig(name=f"tight-{seed}", requests=requests, batch_queue_depth=rng.choice([1, 2, 3]),
                              token_budget=rng.choice([2, 4, 6]), block_size=bs, num_blocks=need + rng.choice([0, 1]),
                              reserve_full_isl=rng.random() < 0.3, policy="priority",
                              priorities=tuple(rng.randint(0, 2) for _ in range(n)),
                              stale_mode=rng.choice(["deliver", "drop"]), aborts=rng.random() < 0.3,
                              late_arrivals=rng.random() < 0.3, num_speculative_tokens=rng.choice([0, 0, 1]))
        except ConfigError:
            continue
    raise AssertionError(f"no valid config for seed {seed}")


@pytest.mark.parametrize("seed", range(40))
def test_compiled_equals_plain_on_a_tight_priority_config(seed: int) -> None:
    assert_same(tight_config(seed), max_states=1500)


def test_the_random_configs_reach_every_witness_the_encoding_can_emit() -> None:
    """The cross-check is only as good as what the drawn configs exercise."""
    reached: set[str] = set()
    for cfg in [random_config(seed) for seed in range(200)] + [tight_config(seed) for seed in range(40)]:
        r = compiled.CompiledExplorer(cfg, max_states=1500).run()
        reached |= {e for e, hit in r.witnesses.items() if hit}
    outside = {e for e in ALL_EVENTS if e.startswith(("encoder_", "mamba_"))}  # not encoded: images, Mamba groups
    assert reached == set(ALL_EVENTS) - outside


def test_the_encoding_knows_every_property_of_the_spec() -> None:
    assert compiled._C is not None and set(compiled._C.PROPERTIES) == set(ALL_ALWAYS) - NOT_ENCODED


def test_configs_outside_the_encoding_are_refused_up_front() -> None:
    cfgs = named_configs()
    many = dataclasses.replace(cfgs["async-d2"], name="nine", requests=((1, 1),) * 9, num_blocks=9)
    assert "more than 8 requests" in str(compiled.not_covered(many))
    drafts = dataclasses.replace(cfgs["async-d2"], requests=((1, 1),) * 4, num_speculative_tokens=4, num_blocks=12)
    assert "acceptance choices" in str(compiled.not_covered(drafts))
    assert "--no-symmetry" in str(compiled.not_covered(cfgs["async-d2"], symmetry=False))
    long_jobs = dataclasses.replace(cfgs["kv-offloading"], requests=((17, 1),), block_size=2, num_blocks=9)
    assert "store jobs could pass the C encoding's bounds" in str(compiled.not_covered(long_jobs))
    assert "encoder inputs (images) are not encoded" in str(compiled.not_covered(cfgs["async-d2-encoder"]))
    assert compiled.not_covered(cfgs["async-d2-swa-hit"]) == (
        "a sliding-window group with prefix caching (its hybrid hit) is not encoded")
    assert compiled.not_covered(cfgs["async-d2-swa"]) is None
    with pytest.raises(ValueError, match="cannot check it: more than 8 requests"):
        compiled.CompiledExplorer(many)
    checked = check_config(many, RunSettings(max_states=300))
    assert checked.explorer == "fast (compiled: more than 8 requests or 16 blocks)"
    assert checked.result.to_json() | {"seconds": 0} == compiled_free(many) | {"seconds": 0}
    assert check_config(cfgs["async-d2"], RunSettings(jobs=17)).explorer == "fast x17"
    assert check_config(cfgs["async-d2"], RunSettings()).explorer == "compiled"


def test_without_the_extension_the_fast_explorer_runs_with_one_note(monkeypatch: pytest.MonkeyPatch,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(compiled, "_C", None)
    monkeypatch.setattr("asyncspec.checker.check_run._NOTED", [])
    cfg = named_configs()["async-d2"]
    first, second = check_config(cfg, RunSettings()), check_config(cfg, RunSettings())
    assert first.explorer == second.explorer == f"fast (compiled: {compiled.NOT_BUILT})"
    assert first.result.ok and first.result.distinct_states == 222
    assert capsys.readouterr().err.count("not built") == 1


@pytest.mark.parametrize("mutant", [m for m in MUTANTS if m.config in COVERED], ids=lambda m: m.name)
def test_a_mutant_run_never_uses_the_compiled_path(mutant: Any) -> None:
    cfg = named_configs()[mutant.config]
    with applied(mutant.patches):
        assert "seeded mutant" in str(compiled.not_covered(cfg))
        checked = check_config(cfg, RunSettings())
        fast = explore_fast(cfg)
    assert checked.explorer.startswith("fast (compiled: spec.") and "seeded mutant" in checked.explorer
    assert checked.result.violations and _untimed(checked.result) == _untimed(fast)
    assert compiled.not_covered(cfg) is None  # restored: the compiled path again


def test_check_json_names_the_explorer() -> None:
    code, data = cli_json("check", "-c", "async-d2", "-c", "async-d2-spec")
    assert code == 0 and [c["explorer"] for c in data["configs"]] == ["compiled", "compiled"]
    code, data = cli_json("check", "-c", "async-d2", "--no-symmetry")
    assert code == 0 and data["configs"][0]["explorer"] == "fast (compiled: --no-symmetry is not encoded)"


# ---------------------------------------------------------------- slow: the large configs


@pytest.mark.slow
@pytest.mark.parametrize("name", [n for n in _pinned("slow") if n in COVERED])
def test_compiled_equals_plain_on_a_large_pinned_config(name: str) -> None:
    assert_same(named_configs()[name], states=False)


@pytest.mark.parametrize("name", [pytest.param("async-d2-4req", marks=pytest.mark.slow),
                                  pytest.param("async-d2-5req", marks=pytest.mark.slow),
                                  pytest.param("async-d2-6req", marks=pytest.mark.campaign),
                                  pytest.param("async-d3-spec-5req", marks=pytest.mark.campaign)])
def test_compiled_finds_the_pinned_counts_of_a_campaign_config(name: str) -> None:
    """async-d2-6req (49,753,156 states, depth 21) and async-d3-spec-5req (five requests at depth 3 with a
    draft per step, aborts and a tight pool: 26,076,320 states, depth 30) are beyond the fast explorer's ten
    minutes: 155 s and 225 s here (the latter at a load average of about 5)."""
    r = compiled.explore_compiled(named_configs()[name])
    pin = load_manifest()[name]
    assert r.ok and (r.distinct_states, r.depth) == (pin["distinct_states"], pin["depth"])


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(200, 260))
def test_compiled_equals_plain_on_a_larger_random_config(seed: int) -> None:
    assert_same(random_config(seed, big=True), max_states=30000)


@pytest.mark.parametrize("jobs", [2, 3])
def test_threads_give_the_single_thread_result(jobs: int) -> None:
    for cfg in [named_configs()[n] for n in ("async-free", "finding-d3-no-stagger", "sglang-overlap")] + [
            random_config(seed) for seed in range(20)]:
        one = _untimed(compiled.CompiledExplorer(cfg, max_states=2000).run())
        assert _untimed(compiled.CompiledExplorer(cfg, max_states=2000, jobs=jobs).run()) == one, cfg.name
    checked = check_config(named_configs()["async-d2"], RunSettings(jobs=2))
    assert checked.explorer == "compiled x2" and checked.result.ok
