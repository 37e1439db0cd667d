"""Tests of ``statemachine_tests/scheduler/``.
"""
