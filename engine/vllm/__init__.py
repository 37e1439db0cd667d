"""Drivers of vLLM's production code (0.30.0 to 0.33.0; 0.33.0 is the reference), on a CPU-only host.

A leaf adapter: nothing here imports the spec.  ``vllm_environment.py``
(supported releases, offline environment, imports), ``vllm_identity.py`` (the
version and package folder driven), ``capabilities.py`` / ``surfaces.py`` (the
capability probe: what each driver needs of vLLM, ``MissingCapability``),
``vllm_config.py`` (the tiny offline model and vLLM configs), ``records.py``
(what a driver returns), ``grammar.py`` (a recording grammar stand-in for
structured output), ``scheduler_driver.py`` (the real scheduler objects driven
step by step).
"""
