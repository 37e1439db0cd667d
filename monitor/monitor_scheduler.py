"""``MonitoredAsyncScheduler`` and ``MonitoredScheduler``: vLLM's schedulers with a spec twin.

Each subclasses vLLM's own class (vllm/v1/core/sched/async_scheduler.py
``AsyncScheduler``, vllm/v1/core/sched/scheduler.py ``Scheduler``), runs the
real method first and then hands the call to ``MonitorCore``.  The hooks:

* ``add_request`` — ``EngineCore.add_request`` (a request from the input queue);
* ``finish_requests`` — client aborts (``EngineCore.abort_requests`` and
  ``_process_aborts_queue``);
* ``schedule`` / ``update_from_output`` — the engine loop
  (``EngineCore.step`` / ``step_with_batch_queue``);
* ``reset_prefix_cache`` — the utility call;
* ``make_stats`` — adds the monitor's counts to ``SchedulerStats``, which the
  engine-core process sends to the front end's stat loggers;
* ``shutdown`` — logs the one-line summary.

A custom ``scheduler_cls`` replaces vLLM's async/sync choice
(``SchedulerConfig.get_scheduler_cls``), so each class refuses an engine whose
``async_scheduling`` setting is the other one.
"""
from __future__ import annotations

import time
from typing import Any

from vllm.v1.core.sched.async_scheduler import AsyncScheduler
from vllm.v1.core.sched.scheduler import Scheduler
from vllm.v1.request import RequestStatus

from asyncspec.monitor.monitor_config import settings_from_env, spec_config, unmodelled_engine_features
from asyncspec.monitor.core import MonitorCore, logger


class _Monitored:
    """The hooks, mixed into a vLLM scheduler class (listed first in the bases)."""

    expects_async: bool = False
    monitor: MonitorCore

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        sched: Any = self
        vllm_config = sched.vllm_config
        wants_async = bool(vllm_config.scheduler_config.async_scheduling)
        if wants_async != self.expects_async:
            other = "MonitoredAsyncScheduler" if wants_async else "MonitoredScheduler"
            setting = "on" if wants_async else "off"
            raise ValueError(f"{type(self).__name__} cannot run an engine with async scheduling {setting}: "
                             f"use --scheduler-cls asyncspec.monitor.{other}")
        num_blocks = int(sched.kv_cache_config.num_blocks) - 1  # vLLM's null block
        depth = 2 if self.expects_async else 1
        self.monitor = MonitorCore(self, spec_config(vllm_config, num_blocks, depth), settings_from_env(),
                                   unmodelled_engine_features(vllm_config))

    def add_request(self, request: Any) -> None:
        super().add_request(request)  # type: ignore[misc]
        self.monitor.after_add(request)

    def finish_requests(self, request_ids: Any, finished_status: Any) -> Any:
        requests: Any = getattr(self, "requests")
        ids = (request_ids,) if isinstance(request_ids, str) else \
            set(request_ids) if request_ids is not None else list(requests)
        ordered = list(ids)  # the order Scheduler.finish_requests frees them in
        live = {r for r in ordered if r in requests and not requests[r].is_finished()}
        result = super().finish_requests(request_ids, finished_status)  # type: ignore[misc]
        self.monitor.after_finish(ordered, live, finished_status == RequestStatus.FINISHED_ABORTED)
        return result

    def schedule(self, throttle_prefills: bool = False) -> Any:
        self.monitor.before_schedule()
        start = time.perf_counter()
        out = super().schedule(throttle_prefills)  # type: ignore[misc]
        self.monitor.after_schedule(out, throttle_prefills, time.perf_counter() - start)
        return out

    def update_from_output(self, scheduler_output: Any, model_runner_output: Any) -> Any:
        start = time.perf_counter()
        result = super().update_from_output(scheduler_output, model_runner_output)  # type: ignore[misc]
        self.monitor.after_update(result, time.perf_counter() - start)
        return result

    def reset_prefix_cache(self, reset_running_requests: bool = False, reset_connector: bool = False) -> bool:
        ok = bool(super().reset_prefix_cache(reset_running_requests, reset_connector))  # type: ignore[misc]
        self.monitor.after_reset(reset_running_requests, ok)
        return ok

    def make_stats(self, *args: Any, **kwargs: Any) -> Any:
        stats = super().make_stats(*args, **kwargs)  # type: ignore[misc]
        return add_monitor_counts(stats, self.monitor)

    def shutdown(self) -> None:
        super().shutdown()  # type: ignore[misc]
        self.monitor.flush()
        logger.info("%s", self.monitor.stats.summary())


def add_monitor_counts(stats: Any, monitor: MonitorCore) -> Any:
    """The monitor's counts in ``SchedulerStats.num_kv_fetch_reqs_by_stage``: a ``str -> int``
    map that vLLM serialises from the engine-core process to the front end's stat loggers
    (vllm/v1/metrics/stats.py); vLLM's own loggers read only their stage keys from it."""
    if stats is not None:
        stats.num_kv_fetch_reqs_by_stage.update(monitor.stats.as_counts())
    return stats


class MonitoredAsyncScheduler(_Monitored, AsyncScheduler):
    """vLLM's ``AsyncScheduler`` (async scheduling on) with the spec following every call."""

    expects_async = True


class MonitoredScheduler(_Monitored, Scheduler):
    """vLLM's ``Scheduler`` (async scheduling off) with the spec following every call."""

    expects_async = False
