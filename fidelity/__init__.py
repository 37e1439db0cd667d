"""Fidelity to vLLM: the spec's citations resolved and fingerprinted, drift across releases."""
