"""The engines under test: ``engine/vllm/`` drives vLLM's production code on a CPU,
``engine/sglang/`` drives SGLang's scheduler (in SGLang's own venv, as a subprocess), and
``engine/torch/`` is a small real torch engine.  None of them imports another."""
