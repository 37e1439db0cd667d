"""The one place test modules decide whether the vLLM target must be there.

CI installs vLLM 0.33.0 (``.ci/install-vllm``), so a module that needs it
fails loudly at collection when it is missing or not the pinned release;
``ASYNCSPEC_ALLOW_NO_VLLM=1`` turns that into a skip for local runs.
"""
from __future__ import annotations

import os

import pytest


def require_pinned_vllm() -> None:
    """Call at module level in a test module that drives vLLM."""
    from asyncspec.engine.vllm import vllm_environment

    if os.environ.get("ASYNCSPEC_ALLOW_NO_VLLM") == "1":
        vllm_environment.prepare_environment()
        pytest.importorskip("vllm")
    try:
        vllm_environment.check_vllm_version(allow_other=False)
    except vllm_environment.VllmUnavailable as exc:  # fail loudly: CI must really run these tests
        pytest.fail(f"{exc} (or set ASYNCSPEC_ALLOW_NO_VLLM=1 to skip)", pytrace=False)
