"""The scheduler targets (``spec``, ``reference``, ``vllm``): their observers, the profiles a
campaign draws from, one example, the campaign, its shards and the ``fuzz`` entry points.
"""
