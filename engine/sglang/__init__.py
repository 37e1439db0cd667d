"""Drivers of SGLang 0.5.23's real scheduler on a CPU (``--target sglang``).

A leaf adapter like ``engine/vllm``: nothing here imports the spec.  Two sides:

* in the SGLang venv (``.ci/install-sglang``): ``bootstrap.py`` (entry), ``stubs.py``
  (import-only stand-ins), ``environment.py`` (the Scheduler), ``worker.py`` (the fake
  model worker), ``recorder.py`` (observers), ``driver.py`` (one case on the real event
  loop), ``mutants.py`` (one-line SGLang mutants), ``server.py`` (JSON lines);
* in the project venv: ``client.py`` (finds the venv, runs the driver as a subprocess);
* both: ``case.py``, ``environment_config.py``, ``oracle.py`` (pure Python).
"""
