"""Tests of ``fidelity/``: the back-test over vLLM releases."""
