"""The ``vllm-engine`` target: vLLM's ``EngineCore`` over the V1 / MRV2 model runner, followed
by the spec after every scheduler call.
"""
