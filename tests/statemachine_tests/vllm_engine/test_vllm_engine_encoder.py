"""Encoder inputs on the ``vllm-engine`` target (issue 28, item 3, where it reaches the worker).

Requests with images run through vLLM's real path: the scheduler's ``_try_schedule_encoder_inputs`` and
``EncoderCacheManager``, the V1 runner's ``_execute_mm_encoder`` and ``_gather_mm_embeddings``, vLLM's
``SupportsMultiModal.embed_input_ids``; only the encoder's forward pass and the text embedding table are
the oracle's (``engine/vllm/oracle_encoder.py``), each embedding naming its item and its index.  Default
tier: a case's images round-trip through JSON and are checked; the image embeddings change the expected
stream (what makes the encoder cache observable in sampled tokens); a hand case of two requests sharing
an image, chunked inside it, is followed by the spec, the second request's image read from the runner's
encoder cache; 20 cases of the ``encoder`` part are clean.  Slow: the part's 100 cases on seeds 0-2,
clean, every category reached; the runner-side mutant ``runner_mm_chunk_from_image_start`` dies in the
encoder stage of ``mutate-vllm --target vllm-engine``.
"""
from __future__ import annotations

import json
from dataclasses import replace

import pytest

from asyncspec.engine.vllm import oracle_model as om
from asyncspec.engine.vllm.engine_config import EngineDriverConfig
from asyncspec.statemachine_tests.vllm_engine import engine_case as ec
from asyncspec.statemachine_tests.vllm_engine.engine_campaign import run_fixed
from asyncspec.statemachine_tests.vllm_engine.engine_parts import ENGINE_PARTS
from asyncspec.statemachine_tests.vllm_engine.engine_profile import ENCODER_ENGINE_PROFILE
from tests.statemachine_tests.vllm_engine.drive_case import drive, engine_kill

STEP = ec.EngineEvent(ec.STEP)
CONFIG = EngineDriverConfig(depth=2, block_size=4, num_blocks=8, max_num_seqs=3, max_num_batched_tokens=4,
                            enable_chunked_prefill=True, enable_prefix_caching=False, max_model_len=24, images=True)
SHARED = (1, 3, 0)  # offset 1, 3 positions, item 0


def _case(config: EngineDriverConfig = CONFIG) -> ec.EngineCase:
    first = ec.EngineRequest((900, 901, 902, 903, 904, 905), 3, images=(SHARED,))
    second = ec.EngineRequest((910, 911, 912, 913), 3, images=(SHARED,))
    return ec.EngineCase(config, (first, second), encoder_cache_size=3, encoder_compute_budget=3)


def test_images_round_trip_and_are_checked() -> None:
    case = _case()
    assert ec.EngineCase.from_json(json.loads(json.dumps(case.to_json()))) == case
    assert ec.case_problem(case) is None
    w = case.workload()
    assert w.images == ((0, 1, 3, 0), (1, 1, 3, 0)) and w.encoder_cache_size == 3
    assert case.encoder_settings() == (3, 3, 3)
    assert "engine.images" in (ec.case_problem(_case(replace(CONFIG, images=False))) or "")
    assert "prefix caching" in (ec.case_problem(_case(replace(CONFIG, enable_prefix_caching=True))) or "")
    small = replace(case, encoder_cache_size=2)
    assert "largest image" in (ec.case_problem(small) or "")


def test_the_image_embeddings_decide_the_stream() -> None:
    r = _case().requests[0]
    plain = om.expected_stream(r.prompt, r.max_tokens)
    shifted = om.expected_stream(om.embedded_prompt(r.prompt, [(2, 3, 0)]), r.max_tokens)
    other = om.expected_stream(om.embedded_prompt(r.prompt, [(1, 3, 1)]), r.max_tokens)
    assert len({tuple(plain), tuple(shifted), tuple(other), r.stream}) == 4


def test_a_shared_image_chunked_inside_is_read_from_the_encoder_cache() -> None:
    pytest.importorskip("vllm")
    events = [ec.EngineEvent(ec.ADD_REQUEST, 0), ec.EngineEvent(ec.ADD_REQUEST, 1), STEP, STEP, STEP]
    run, _ = drive(_case(), events)
    assert not run.diverged, run.result.rows[-1].differences
    coverage = run.result.coverage
    assert coverage.get("encoder_output_reused", 0) > 0, coverage  # a later chunk, and r1's hit on item 0
    fed = [row for rows in run.result.fed.values() for row in rows]
    assert any(row.startswith("r1@0:910,") and str(om.image_token(0, 0)) in row for row in fed), fed
    delivered: dict[int, list[int]] = {0: [], 1: []}
    for row in run.result.rows:
        for req, tokens in row.actual.delivered:
            delivered[req].extend(tokens)
    assert delivered == {i: list(r.stream) for i, r in enumerate(_case().requests)}


def test_the_encoder_part_is_in_the_default_campaign_and_clean_on_a_few_cases() -> None:
    pytest.importorskip("vllm")
    part = next(p for p in ENGINE_PARTS if p.name == "encoder")
    assert part.profile is ENCODER_ENGINE_PROFILE and part.examples == 100
    assert all(c.images and not c.enable_prefix_caching for c in part.profile.configs())
    summary = run_fixed(20, 0, ENCODER_ENGINE_PROFILE.depths, ENCODER_ENGINE_PROFILE)
    assert summary["divergences"] == 0, summary["first_divergence"]
    assert summary["coverage"]["encoder_cache_eviction"] > 0 and summary["coverage"]["encoder_output_reused"] > 0


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_encoder_part_is_clean_and_reaches_its_categories(seed: int) -> None:
    pytest.importorskip("vllm")
    summary = run_fixed(100, seed, ENCODER_ENGINE_PROFILE.depths, ENCODER_ENGINE_PROFILE)
    assert summary["divergences"] == 0, summary["first_divergence"]
    missing = [c for c in ENCODER_ENGINE_PROFILE.categories() if summary["coverage"].get(c, 0) == 0]
    assert not missing, missing


@pytest.mark.slow
def test_a_runner_side_encoder_mutant_dies_on_the_engine() -> None:
    pytest.importorskip("vllm")
    result = engine_kill("runner_mm_chunk_from_image_start")
    assert result["killed"] and "(encoder profile)" in result["detail"], result
