"""A small but real torch engine: paged KV cache, batch-invariant tiny transformer,
device-side token feedback, the ``step_with_batch_queue`` loop, and its oracle.

Reading order: ``weights.py``, ``kernels.py``, ``batch.py``, ``paged_kv.py``,
``model.py`` (the model); ``device.py``, ``worker.py`` (the worker);
``scheduler_api.py``, ``reference_scheduler.py`` (the scheduler it runs);
``engine.py`` (the loop); ``oracle.py`` (async vs sync tokens, wasted passes).
"""
