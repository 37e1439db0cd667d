"""Default tier: requests with images over Model Runner V2 (the ``mrv2-encoder`` part, short).

Twenty cases of ``--runner mrv2 --profile encoder`` (depths 2 and 1, seed 0) in MRV2's
environment (``mrv2_runner.mrv2_environment``, Triton's interpreter): vLLM's scheduler sends
``encoder_input_updates`` (``Scheduler._get_encoder_input_updates``, MRV2 only), MRV2's
``EncoderCache`` and ``EncoderRunner`` encode and gather over the stand-in encoder
(``oracle_encoder.py``, through ``mrv2_oracle.mrv2_oracle_class(True)``).  They must be clean and
reach the encoder categories, the spec's payload drop (``encoder_input_dropped``, compared as
``encoder.updates`` / ``encoder.held``) among them (about 20 s); in the slow tier each mutant of MRV2's
encoder-input path (``mutants_mrv2.py``) must be caught in them.  Skipped where the private Triton is not installed (``mrv2_runner.triton_dir``).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from asyncspec.engine.vllm.mrv2_runner import mrv2_environment, triton_dir

CAMPAIGN = """
import json, sys
mutant, examples = sys.argv[1], int(sys.argv[2])
finder = None
if mutant:
    from asyncspec.engine.vllm.vllm_mutants import MUTANTS_BY_ID
    from asyncspec.engine.vllm.overlay import install
    finder = install(MUTANTS_BY_ID[mutant])
from asyncspec.statemachine_tests.vllm_engine.engine_campaign import run_fixed
from asyncspec.statemachine_tests.vllm_engine.engine_profile import MRV2_ENCODER_ENGINE_PROFILE as P
result = run_fixed(examples, 0, P.depths, P)
result["loaded"] = finder.loaded if finder else None
result["first_divergence"] = str(result["first_divergence"])
print(json.dumps(result))
"""


def mrv2_encoder_campaign(mutant: str = "", examples: int = 20) -> dict[str, object]:
    """``examples`` cases of the MRV2 encoder profile (seed 0) in MRV2's environment, ``mutant`` (a corpus
    id) loaded through the overlay first; ``run_fixed``'s summary."""
    folder = triton_dir()
    if not (folder / "triton").is_dir():
        pytest.skip(f"no private Triton in {folder} (test_vllm_engine_triton.triton_folder installs it)")
    env = mrv2_environment(dict(os.environ), folder)
    p = subprocess.run([sys.executable, "-c", CAMPAIGN, mutant, str(examples)], capture_output=True, text=True,
                       env=env, timeout=900)
    assert p.returncode == 0, p.stderr[-3000:]
    result: dict[str, object] = json.loads(p.stdout.strip().splitlines()[-1])
    return result


def test_twenty_mrv2_encoder_cases_are_clean_and_reach_the_encoder_categories() -> None:
    result = mrv2_encoder_campaign()
    assert result["examples"] == 20 and result["depths"] == [1, 2]
    assert result["divergences"] == 0, result["first_divergence"]
    coverage = result["coverage"]
    assert isinstance(coverage, dict)
    for name in ("encoder_cache_eviction", "encoder_released_in_flight", "encoder_cache_revived",
                 "encoder_output_reused", "fed_after_preemption", "encoder_payload_dropped",
                 "encoder_input_dropped"):
        assert coverage[name] > 0, name


@pytest.mark.slow  # the divergence is shrunk: up to about 2 minutes each
@pytest.mark.parametrize(("mutant", "first"), [
    # example 14 of seed 0: before the payloads were compared, MRV2 raised "Encoder cache miss" there; now
    # the reinstall without the dropped image's data shows first, in encoder.held
    ("mrv2_encoder_cache_shares_features", "encoder.held"),
    ("mrv2_mm_chunk_from_image_start", "delivered"),  # example 5 of seed 0
    ("sched_payload_drop_ignores_in_flight", "encoder.updates"),  # example 1 of seed 0
    ("sched_payload_drop_at_image_start", "encoder.updates"),  # example 1 of seed 0
])
def test_mrv2_encoder_mutants_are_caught(mutant: str, first: str) -> None:
    """``mrv2_encoder_cache_shares_features``: a payload ``encoder_input_updates`` drops is dropped in the
    scheduler's ``Request`` too; a preempted request comes back without its data (``encoder.held``: the
    spec has it hold the image again), and where the image was evicted MRV2 raises ``Encoder cache miss``.  ``mrv2_mm_chunk_from_image_start``: MRV2's gather feeds a chunk
    that starts inside an image the image's first rows again.  ``sched_payload_drop_ignores_in_flight`` and
    ``sched_payload_drop_at_image_start``: the scheduler drops an image's payload early; the tokens stay right
    (the payload is sent again), the spec's ``encoder.updates`` (``spec/encoder.payload_updates``) does not."""
    result = mrv2_encoder_campaign(mutant)
    assert result["loaded"] is True
    assert result["divergences"] == 1 and first in str(result["first_divergence"]), result
