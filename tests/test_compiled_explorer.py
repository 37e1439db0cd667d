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

ENCODER_ONLY = {"encoder_output_available", "encoder_cache_bounded"}
"""The encoder inputs' properties (spec/encoder.py): a random config names them only with images."""
MAMBA_ONLY = {"mamba_states_held", "mamba_chunks_aligned"}
"""The Mamba group's properties (spec/mamba.py): a random config names them only with a Mamba group."""
SESSION_ONLY = {"paused_sessions_hold_slots", "stopped_turn_output_dropped"}
"""The streaming-input sessions' properties (spec/properties.py): a random config names them only with sessions."""
OFFLOAD_ONLY = {"store_reads_fenced", "offload_accounting"}
"""The offloading connector's properties (spec/offload.py): a random config names them only with it."""
SWA_HIT_ONLY = {"window_kv_held"}
"""The hybrid hit's property (spec/swa.py): a random config names it only with a sliding window and prefix caching."""
COVERED = set(named_configs())
"""The pinned configs the C encoding covers: all of them, the KV connectors' (``kv-invalid-blocks*``,
``kv-sends-aborts``, ``kv-offloading``), the sliding window's with and without prefix caching
(``async-d2-swa-hit``, ``async-d2-swa``), the streaming-input sessions' (``async-d2-stream``,
``finding-stream-*``), the Mamba group's (``async-d2-mamba``) and the encoder inputs' (``async-d2-encoder``,
``finding-encoder-undo-miss``) and the plain Scheduler's under a batch queue (``sync-d2-pp``) included."""
HEAVY = {"kv-offloading", "async-d2-stream", "finding-stream-paused-starves", "async-d2-encoder"}
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
    for i, s in enumerate(c.all_states()):
        assert s == g.states[i], (cfg.name, i)
    assert c.state(len(g.states) - 1) == g.states[-1]  # the path replay agrees with the parent-by-parent one
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
                    set(ALL_ALWAYS) - ENCODER_ONLY - SESSION_ONLY - OFFLOAD_ONLY - MAMBA_ONLY - SWA_HIT_ONLY), 4)),
            )
            windowed = with_window(with_connector(with_pauses(cfg, rng), rng), rng, random.Random(seed * 6173 + attempt))
            drawn = with_images(with_mamba(with_sessions(windowed, rng), rng), rng)
            return with_sync_scheduler(drawn, random.Random(seed * 7919 + attempt))
        except ConfigError:
            continue
    raise AssertionError(f"no valid config for seed {seed}")


def with_sync_scheduler(cfg: SpecConfig, rng: random.Random) -> SpecConfig:
    """``cfg`` over the plain Scheduler (``sync_scheduler``) one time in five where it is defined (a batch
    queue, no drafts or stagger), from a generator of its own (the seed's other draws stay as they were)."""
    if (rng.random() < 0.2 and cfg.batch_queue_depth > 1 and not cfg.num_speculative_tokens
            and cfg.decode_stagger in (None, 1) and cfg.abort_mode != "deferred"):
        return dataclasses.replace(cfg, sync_scheduler=True)
    return cfg


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


def with_window(cfg: SpecConfig, rng: random.Random, hit_rng: random.Random) -> SpecConfig:
    """``cfg`` with a sliding-window group drawn last, where the spec models one (no drafts, no
    connector), its pool doubled for the second group (up to 16 blocks); prefix caching (the hybrid
    hit, ``spec/swa.py``) kept half the time where it was drawn, from a generator of its own
    (``hit_rng``: the seed's other draws stay as they were)."""
    window, on = rng.randint(1, 5), rng.random() < 0.25
    hit = cfg.enable_prefix_caching and hit_rng.random() < 0.5
    if not on or cfg.num_speculative_tokens or cfg.kv_connector:
        return cfg
    properties = cfg.properties and (*cfg.properties, *sorted(SWA_HIT_ONLY)) if hit else cfg.properties
    try:
        return dataclasses.replace(cfg, sliding_window=window, enable_prefix_caching=hit,
                                   num_blocks=min(16, 2 * cfg.num_blocks), properties=properties)
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


def with_mamba(cfg: SpecConfig, rng: random.Random) -> SpecConfig:
    """``cfg`` with a Mamba state group drawn last (the other draws stay those of the seed), where the
    spec models one (chunked prefill; no drafts, connector, window, sessions or deferred abort; prefix
    caching only in "align"): either mode, the pool raised for each request's two state blocks."""
    on, mode, spare = rng.random() < 0.6, rng.choice(["none", "align", "align"]), rng.choice([0, 0, 1, 2])
    if (not on or not cfg.enable_chunked_prefill or cfg.num_speculative_tokens or cfg.kv_connector
            or cfg.sliding_window or cfg.resumable or cfg.abort_mode == "deferred"):
        return cfg
    need = max(cfg.blocks_for(p + m) for p, m in cfg.requests) + 2 + spare
    properties = cfg.properties and (*cfg.properties, *sorted(MAMBA_ONLY))
    try:
        return dataclasses.replace(cfg, mamba_cache_mode=mode, num_blocks=min(16, max(cfg.num_blocks, need)),
                                   enable_prefix_caching=cfg.enable_prefix_caching and mode == "align",
                                   properties=properties)
    except ConfigError:
        return cfg


def with_images(cfg: SpecConfig, rng: random.Random) -> SpecConfig:
    """``cfg`` with encoder inputs drawn last (the other draws stay those of the seed), where the spec
    models them (chunked prefill; no drafts, connector, window, sessions or deferred abort; prefix caching
    off): up to two images per request from three items (shared ones among requests), a cache and a
    compute budget of the largest image or a little more."""
    on, lengths = rng.random() < 0.8, [rng.randint(1, 3) for _ in range(3)]
    spare_cache, spare_budget = rng.choice([0, 0, 1, 2, 3]), rng.choice([0, 0, 1, 2])
    images: list[tuple[int, int, int, int]] = []
    for r, (prompt, _) in enumerate(cfg.requests):
        start = 0
        for item in rng.sample(range(3), rng.choice([0, 1, 1, 2])):
            offset = start + rng.randint(0, 1)
            if offset + lengths[item] <= prompt:
                images.append((r, offset, lengths[item], item))
                start = offset + lengths[item]
    if (not on or not images or not cfg.enable_chunked_prefill or cfg.num_speculative_tokens or cfg.kv_connector
            or cfg.sliding_window or cfg.resumable or cfg.abort_mode == "deferred"):
        return cfg
    largest = max(n for _, _, n, _ in images)
    properties = cfg.properties and (*cfg.properties, *sorted(ENCODER_ONLY))
    try:
        return dataclasses.replace(cfg, images=tuple(images), encoder_cache_size=largest + spare_cache,
                                   encoder_compute_budget=largest + spare_budget, enable_prefix_caching=False,
                                   properties=properties)
    except ConfigError:
        return cfg


@pytest.mark.parametrize("seed", [*range(40), *(pytest.param(s, marks=pytest.mark.slow) for s in range(40, 200))])
def test_compiled_equals_plain_on_a_random_config(seed: int) -> None:
    """Seeds 0-39 in the default tier (connectors, sliding windows, offloading, sessions, Mamba groups and images
    among them), 40-199 in slow (the default tier's time budget); every seed's witnesses are counted below
    either way."""
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


@pytest.mark.parametrize("seed", [*range(12), *(pytest.param(s, marks=pytest.mark.slow) for s in range(12, 40))])
def test_compiled_equals_plain_on_a_tight_priority_config(seed: int) -> None:
    assert_same(tight_config(seed), max_states=1500)


def mamba_config(seed: int) -> SpecConfig:
    """A Mamba-group config with longer prompts and a pool just large enough: aligned splits, state frees,
    preemptions that come back to prefix hits cut to the last cached state."""
    for attempt in range(100):
        rng = random.Random(seed * 6007 + attempt)
        n = rng.choice([2, 3])
        requests = tuple((rng.randint(3, 8), rng.randint(1, 3)) for _ in range(n))
        bs, align = rng.choice([1, 2, 2]), rng.random() < 0.8
        need = max(-(-(p + m) // bs) for p, m in requests) + 2
        try:
            return SpecConfig(name=f"mamba-{seed}", requests=requests, batch_queue_depth=rng.choice([1, 2, 2, 3]),
                              token_budget=rng.choice([2, 3, 4, 6]), block_size=bs,
                              num_blocks=min(16, need + rng.choice([0, 0, 1])), enable_prefix_caching=align,
                              reserve_full_isl=rng.random() < 0.5, defer_block_free=rng.random() < 0.5,
                              mamba_cache_mode="align" if align else "none", late_arrivals=rng.random() < 0.5,
                              forced_preemptions=rng.choice([0, 0, 1]), aborts=rng.random() < 0.3,
                              policy="priority" if rng.random() < 0.3 else "fcfs",
                              priorities=tuple(rng.randint(0, 2) for _ in range(n)),
                              long_prefill_token_threshold=rng.choice([0, 0, 2, 3]),
                              stale_mode=rng.choice(["deliver", "drop"]))
        except ConfigError:
            continue
    raise AssertionError(f"no valid config for seed {seed}")


MAMBA_SEEDS = [0, 1, 2, 3, 9]
"""The default tier's Mamba configs (seed 9 reaches ``mamba_hit_cut``); the rest of 0-39 in slow."""


@pytest.mark.parametrize("seed", [*MAMBA_SEEDS, *(pytest.param(s, marks=pytest.mark.slow)
                                                  for s in range(40) if s not in MAMBA_SEEDS)])
def test_compiled_equals_plain_on_a_tight_mamba_config(seed: int) -> None:
    assert_same(mamba_config(seed), max_states=1000)


def encoder_config(seed: int) -> SpecConfig:
    """An encoder-input config with longer prompts, shared items and a cache of about one image: evictions,
    entries taken back, reallocations of an evicted item, and (priority policy) the undo's miss."""
    for attempt in range(100):
        rng = random.Random(seed * 4049 + attempt)
        n = rng.choice([2, 3, 3])
        requests = tuple((rng.randint(3, 8), rng.randint(1, 2)) for _ in range(n))
        lengths = [rng.randint(1, 3) for _ in range(3)]
        images = []
        for r, (prompt, _) in enumerate(requests):  # the last one also takes r0's item, after its own
            start = 0
            for item in [r % 3] + ([0] if r == n - 1 and r % 3 else [rng.randrange(3)] if rng.random() < 0.3 else []):
                offset = start + rng.randint(0, 1)
                if offset + lengths[item] <= prompt:
                    images.append((r, offset, lengths[item], item))
                    start = offset + lengths[item]
        largest, bs = max([n for _, _, n, _ in images] or [1]), rng.choice([1, 2])
        try:
            return SpecConfig(name=f"encoder-{seed}", requests=requests, batch_queue_depth=rng.choice([1, 2, 2, 3]),
                              token_budget=rng.choice([2, 3, 4, 6]), block_size=bs,
                              num_blocks=max(-(-(p + m) // bs) for p, m in requests) + rng.choice([0, 1, 2]),
                              enable_prefix_caching=False, images=tuple(images),
                              encoder_cache_size=largest + rng.choice([0, 1, 2]),
                              encoder_compute_budget=largest + rng.choice([0, 1, 3]), late_arrivals=rng.random() < 0.5,
                              aborts=rng.random() < 0.3, policy="priority" if rng.random() < 0.5 else "fcfs",
                              priorities=tuple(rng.randint(0, 2) for _ in range(n)),
                              long_prefill_token_threshold=rng.choice([0, 0, 2, 3]),
                              stale_mode=rng.choice(["deliver", "drop"]))
        except ConfigError:
            continue
    raise AssertionError(f"no valid config for seed {seed}")


ENCODER_SEEDS = [0, 1, 2, 3, 10, 231]
"""The default tier's encoder configs (seed 10 reaches ``encoder_evicted_reallocated``, 231 ``encoder_miss``);
the rest of 0-49 in slow."""


@pytest.mark.parametrize("seed", [*ENCODER_SEEDS, *(pytest.param(s, marks=pytest.mark.slow)
                                                    for s in range(50) if s not in ENCODER_SEEDS)])
def test_compiled_equals_plain_on_a_tight_encoder_config(seed: int) -> None:
    assert_same(encoder_config(seed), max_states=1000)


def test_the_random_configs_reach_every_witness_the_encoding_can_emit() -> None:
    """The cross-check is only as good as what the drawn configs exercise."""
    reached: set[str] = set()
    for cfg in ([random_config(seed) for seed in range(200)] + [tight_config(seed) for seed in range(40)]
                + [mamba_config(seed) for seed in range(20)] + [encoder_config(seed) for seed in ENCODER_SEEDS]):
        r = compiled.CompiledExplorer(cfg, max_states=1500).run()
        reached |= {e for e, hit in r.witnesses.items() if hit}
    assert reached == set(ALL_EVENTS)


def test_the_encoding_knows_every_property_of_the_spec() -> None:
    assert compiled._C is not None and set(compiled._C.PROPERTIES) == set(ALL_ALWAYS)


def test_configs_outside_the_encoding_are_refused_up_front() -> None:
    cfgs = named_configs()
    many = dataclasses.replace(cfgs["async-d2"], name="nine", requests=((1, 1),) * 9, num_blocks=9)
    assert "more than 8 requests" in str(compiled.not_covered(many))
    drafts = dataclasses.replace(cfgs["async-d2"], requests=((1, 1),) * 4, num_speculative_tokens=4, num_blocks=12)
    assert "acceptance choices" in str(compiled.not_covered(drafts))
    assert "--no-symmetry" in str(compiled.not_covered(cfgs["async-d2"], symmetry=False))
    long_jobs = dataclasses.replace(cfgs["kv-offloading"], requests=((17, 1),), block_size=2, num_blocks=9)
    assert "store jobs could pass the C encoding's bounds" in str(compiled.not_covered(long_jobs))
    assert compiled.not_covered(cfgs["async-d2-encoder"]) is None
    assert compiled.not_covered(cfgs["async-d2-mamba"]) is None
    assert compiled.not_covered(cfgs["async-d2-swa-hit"]) is None
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


@pytest.mark.parametrize("batch", [1, 7, 4096])
def test_parents_expanded_elsewhere_give_the_single_thread_result(batch: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """``--ray``'s path without a cluster: the expansions come from other C searches of the config,
    in slices of batches of 1, 7 and 4096 parents; stops by a violation and by ``--max-states``
    mid-batch included."""
    from asyncspec.checker import compiled_ray

    monkeypatch.setattr(compiled_ray, "RAY_BATCH", batch)
    for cfg, max_states in [(named_configs()["finding-d3-no-stagger"], None), (named_configs()["async-free"], 3001),
                            (named_configs()["finding-stream-paused-starves"], None)] + [
            (random_config(seed), 2000) for seed in range(8)]:
        actors = [compiled.c_search(cfg) for _ in range(3)]

        class Local:
            def run(self, c: Any, budget: int) -> int:
                return compiled_ray.run_batches(c, budget, len(actors),
                                                lambda parts: [a.expand(p) for a, p in zip(actors, parts)])

            def close(self) -> None:
                pass

        one = _untimed(compiled.CompiledExplorer(cfg, max_states=max_states).run())
        assert _untimed(compiled.CompiledExplorer(cfg, max_states=max_states, remote=Local()).run()) == one, cfg.name


def test_a_malformed_expansion_is_refused_before_it_is_read() -> None:
    cfg = named_configs()["async-d2"]
    c, actor = compiled.c_search(cfg), compiled.c_search(cfg)
    head, parents = c.frontier(4)
    good = actor.expand(parents)
    for bad in (b"", good[:-1], good[:4] + b"\xff" * 4 + good[8:], b"\xff\xff\xff\xff" + good[4:]):
        with pytest.raises(ValueError, match="malformed expansion"):
            c.integrate(head, bad)
    with pytest.raises(ValueError, match="other parents"):
        c.integrate(head + 1, good)
    assert c.integrate(head, good) == (0, len(parents))
