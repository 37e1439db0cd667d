"""The engines under test: ``engine/vllm/`` drives vLLM's production code on a CPU,
``engine/torch/`` is a small real torch engine.  The two never import each other."""
