"""Tests of ``statemachine_tests/vllm_engine/``.
"""
