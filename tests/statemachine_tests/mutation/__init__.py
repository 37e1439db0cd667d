"""Tests of ``statemachine_tests/mutation/``.
"""
