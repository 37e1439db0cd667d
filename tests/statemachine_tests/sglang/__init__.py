"""Tests of ``statemachine_tests/sglang/``.
"""
