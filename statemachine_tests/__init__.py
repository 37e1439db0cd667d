"""Differential fuzzing of schedulers against the spec (issue 4).

* ``harness.py`` — the workload, the event language, the ``Target`` protocol,
  the normalized ``Observation`` and the comparison;
* ``targets.py`` — the targets: ``spec`` (the oracle), ``vllm`` (vLLM 0.33.0's
  real ``Scheduler``/``AsyncScheduler``), and the hooks for ``reference`` and
  ``torch``;
* ``fuzz.py`` — the Hypothesis-driven fuzz runner, replay files and reports
  (``fuzz_main``, ``replay_vllm``);
* ``test_vllm_conformance.py`` — the CI tiers.

See ``docs/fuzzing.md``.
"""
