"""Differential fuzzing of the engines against the spec.

* ``harness.py`` — the workload, the event language, the ``Target`` protocol,
  the normalized ``Observation`` and the comparison;
* the targets, one file each — ``spec_target.py`` (the oracle),
  ``vllm_target.py`` (vLLM 0.33.0's real ``Scheduler``/``AsyncScheduler``),
  ``reference_target.py`` — and ``registry.py`` (targets by name);
* a campaign — ``profiles.py``, ``run.py``, ``campaign.py``, ``report.py``,
  ``replay_file.py``, and the entry points in ``fuzz.py``;
* ``test_*.py`` — the stateful tests of each target, in the CI tiers.

See ``docs/fuzzing.md``.
"""
