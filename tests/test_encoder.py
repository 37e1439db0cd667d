"""Encoder inputs in the spec (``spec/encoder.py``): the cut before an image, allocation and FIFO
eviction of freeable entries, release at C - H while a step is in flight, the waiting pass's skip
and its free on a failed admission, the priority undo (finding V10), the configs and their refusals (the seeded
mutants: tests/test_mutants.py)."""
from __future__ import annotations

import pytest

from asyncspec.checker.compiled import NOT_BUILT, not_covered
from asyncspec.checker.configs import config_from_dict, named_configs
from asyncspec.checker.fast_explorer import explore_fast
from asyncspec.spec import encoder
from asyncspec.spec import engine as eng
from asyncspec.spec import request as rq
from asyncspec.spec.config import ConfigError, SpecConfig
from asyncspec.spec.properties import always_for
from asyncspec.spec.state import EngineState, initial_state


def _cfg(**kw: object) -> SpecConfig:
    base: dict[str, object] = dict(name="e", requests=((6, 1),), token_budget=3, block_size=2, num_blocks=8,
                                   enable_prefix_caching=False, images=((0, 2, 3, 0),), encoder_cache_size=3,
                                   encoder_compute_budget=3)
    base.update(kw)
    return SpecConfig(**base)  # type: ignore[arg-type]


def _run(cfg: SpecConfig, actions: list[str]) -> tuple[EngineState, list[frozenset[str]]]:
    s = initial_state(cfg, (0,) * len(cfg.requests))
    seen = []
    for text in actions:
        action = eng.parse_action(text)
        assert action in eng.enabled_actions(cfg, s), (text, [str(a) for a in eng.enabled_actions(cfg, s)])
        s, events = eng.apply(cfg, s, action)
        seen.append(events)
        for p in always_for(cfg):
            assert p.check(cfg, s) is None, (text, p.name, p.check(cfg, s))
    return s, seen


def test_a_chunk_overlapping_an_image_computes_it_and_the_release_waits_for_c_minus_h() -> None:
    """Image at 2..5, budget 3: step 0 [0, 3) computes it, step 1 [3, 6) reads the rest from the cache;
    step 0's output releases it (C - H = 6 - 1 = 5 >= 5) while step 1 still reads it: freeable, kept."""
    s, events = _run(_cfg(), ["schedule", "schedule"])
    assert s.batch_queue[0].encoder_inputs == ((0, (0,)),) and s.batch_queue[1].encoder_inputs == ()
    assert (s.enc_entries, s.enc_inputs, s.worker_encoder) == ((0,), ((0,),), (0,))
    s, events = _run(_cfg(), ["schedule", "schedule", "update_from_output"])
    assert (s.enc_entries, s.enc_freeable, s.enc_inputs) == ((0,), (0,), ((),))
    assert "encoder_released_in_flight" in events[-1]


def test_a_full_cache_cuts_the_chunk_before_the_image_and_a_freeable_entry_is_evicted_in_a_later_step() -> None:
    cfg = _cfg(requests=((5, 1), (4, 1)), images=((0, 1, 3, 0), (1, 1, 2, 1)), token_budget=4,
               late_arrivals=True)
    s, _ = _run(cfg, ["schedule", "add_request r1", "schedule"])  # r0 [0, 4) holds item 0; r1 cut to [0, 1)
    assert [(e.req, e.num_tokens) for e in s.batch_queue[1].entries] == [(0, 1), (1, 1)]
    s, events = _run(cfg, ["schedule", "add_request r1", "schedule", "update_from_output", "schedule"])
    step = s.batch_queue[-1]
    assert step.freed_encoder == (0,) and step.encoder_inputs == ((1, (0,)),)  # item 0 evicted for item 1
    assert "encoder_cache_eviction" in events[-1] and s.worker_encoder == (1,)


def test_a_waiting_request_left_no_token_is_skipped_and_a_failed_admission_gives_its_references_back() -> None:
    cfg = _cfg(requests=((3, 1), (3, 1)), images=((0, 0, 3, 0), (1, 0, 2, 1)), token_budget=6,
               encoder_cache_size=3, encoder_compute_budget=3)
    s, events = _run(cfg, ["schedule"])  # r1's image cannot be allocated at offset 0: 0 tokens, skipped
    assert [e.req for e in s.batch_queue[0].entries] == [0] and s.waiting == (1,)
    assert "encoder_input_blocked" in events[0]
    shared = _cfg(requests=((3, 1), (3, 1)), images=((0, 0, 2, 0), (1, 0, 2, 0)), token_budget=6, num_blocks=3)
    s, _ = _run(shared, ["schedule"])  # r1 hits r0's entry, then its blocks do not fit: the hit is given back
    assert s.waiting == (1,) and s.enc_inputs == ((0,), ())


def test_finding_v10_the_priority_undo_leaves_an_allocated_entry_no_step_computes() -> None:
    cfg = named_configs()["finding-encoder-undo-miss"]
    r = explore_fast(cfg)
    assert [v.property for v in r.violations] == ["encoder_output_available"] == [cfg.expect_violation]


def test_the_encoder_config_is_pinned_reaches_its_witnesses_and_the_compiled_explorer_checks_it() -> None:
    cfg = named_configs()["async-d2-encoder"]
    r = explore_fast(cfg)
    assert r.distinct_states == 8920 and r.violations == []
    assert all(r.witnesses[w] for w in ("encoder_cache_revived", "encoder_cache_eviction", "encoder_input_blocked",
                                        "encoder_released_in_flight"))
    assert not r.witnesses["encoder_miss"]
    assert not_covered(cfg) in (None, NOT_BUILT)  # csrc/encoder.c (tests/test_compiled_explorer.py)


@pytest.mark.parametrize("bad, message", [
    (dict(images=((0, 5, 3, 0),)), "inside its prompt"),
    (dict(images=((0, 0, 2, 0), (0, 3, 2, 0))), "names an image item twice"),
    (dict(images=((0, 0, 3, 0), (0, 2, 2, 1))), "overlap"),
    (dict(encoder_cache_size=2), "hold the largest image"),
    (dict(enable_prefix_caching=True), "without prefix caching"),
    (dict(images=(), encoder_cache_size=3, encoder_compute_budget=3), "need 'images'"),
])
def test_bad_images_are_one_line_config_errors(bad: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message) as err:
        _cfg(**bad)
    assert "\n" not in str(err.value)


def test_a_config_file_takes_images() -> None:
    cfg = config_from_dict({"name": "f", "requests": [[4, 1]], "enable_prefix_caching": False,
                            "images": [[0, 1, 2, 7]], "encoder_cache_size": 2, "encoder_compute_budget": 2})
    assert encoder.images_of(cfg, 0) == (encoder.Image(1, 2, 7),)
    with pytest.raises(ConfigError, match="images"):
        config_from_dict({"name": "f", "requests": [[4, 1]], "images": [[0, 1, 2]]})


def test_mrv2_payloads_are_dropped_once_the_image_ends_below_the_confirmed_progress() -> None:
    """``encoder.payload_updates`` (``Scheduler._get_encoder_input_updates``): r0 (image 2..5, budget 3) is
    installed by step 0, which encodes the image (held, not dropped); step 2 starts at 6 with step 1's 3
    tokens in flight (6 - max(H 1, 3) = 3 < 5: kept); step 3 starts at 7 with 1 in flight (6 >= 5: dropped).
    Reading the placeholders alone (6 - 1 = 5) would drop it at step 2, the image's start (2) at step 1."""
    cfg = _cfg(requests=((6, 4),))
    s = initial_state(cfg, (0,) * len(cfg.requests))
    held: encoder.Payloads = {}
    seen = []
    for text in ["schedule", "schedule", "update_from_output", "schedule", "update_from_output", "schedule"]:
        before = s
        s, _ = eng.apply(cfg, s, eng.parse_action(text))
        if text == "schedule":
            step = s.batch_queue[-1]
            installed = frozenset(e.req for e in step.entries if before.counters[e.req].status != rq.RUNNING)
            held, updates = encoder.payload_updates(cfg, before, step, installed, held)
            seen.append((updates, dict(held)))
    assert seen == [((), {0: frozenset({0})}), ((), {0: frozenset({0})}), ((), {0: frozenset({0})}),
                    (((0, ((0, False),)),), {0: frozenset()})]
