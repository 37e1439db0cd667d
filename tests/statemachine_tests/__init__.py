"""Tests of ``statemachine_tests/``, one folder per subpackage.
"""
