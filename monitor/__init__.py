"""A live monitor: vLLM's schedulers with the spec stepped alongside (docs/monitor.md).

``vllm serve ... --scheduler-cls asyncspec.monitor.MonitoredAsyncScheduler``
or ``LLM(..., scheduler_cls="asyncspec.monitor.MonitoredAsyncScheduler")``.
The two classes subclass vLLM's, so they are imported on first use: the
rest of the package (``twin``, ``observe``) loads without vLLM.
"""
from __future__ import annotations

from typing import Any

__all__ = ["MonitoredAsyncScheduler", "MonitoredScheduler"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from asyncspec.monitor import monitor_scheduler as scheduler

        return getattr(scheduler, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
