"""Differential fuzzing of the engines against the spec, one subpackage per concern.

* ``core/`` — the workload, the event language and the ``Target`` protocol
  (``harness.py``), side-by-side reports, replay files, the end of a run;
* ``scheduler/`` — the ``spec``, ``reference`` and ``vllm`` targets, the profiles,
  one example (``fuzz_example.py``), the campaign, its shards, the entry points;
* ``vllm_engine/`` — the ``vllm-engine`` target (EngineCore over the model runner);
* ``sglang/`` — the ``sglang`` target;
* ``mutation/`` — ``asyncspec mutate-vllm``.

The tests live in ``tests/statemachine_tests/``, one folder per subpackage. See ``docs/fuzzing.md``.
"""
