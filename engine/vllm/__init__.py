"""Drivers of vLLM 0.33.0's production code, runnable on a CPU-only host.

A leaf adapter: nothing here imports the spec.  ``environment.py`` (version pin,
offline environment, imports), ``config.py`` (the tiny offline model and vLLM
configs), ``records.py`` (what a driver returns), ``grammar.py`` (a recording
grammar stand-in for structured output), ``scheduler_driver.py`` (the real
scheduler objects driven step by step).
"""
