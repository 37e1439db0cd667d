"""``asyncspec mutate-vllm``: one-line vLLM mutants, the kill table and the hand traces.
"""
