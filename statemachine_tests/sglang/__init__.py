"""The ``sglang`` target: SGLang's real scheduler loop, followed by the spec.
"""
