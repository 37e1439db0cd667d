"""Tests of ``statemachine_tests/core/``.
"""
