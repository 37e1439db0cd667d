"""The worker half of vLLM's OffloadingConnector for ``--target vllm``: job completions, what is pending.

The scheduler half is vLLM's own (``OffloadingConnectorScheduler``,
vllm/distributed/kv_transfer/kv_connector/v1/offloading/scheduler.py); this plays
``OffloadingConnectorWorker`` (offloading/worker.py) as the harness's events say:
a step's store jobs are submitted at the next step's start, or before its own
forward pass when a later step lists them in ``jobs_to_flush``; ``stored=rN``
reports every store job of rN the worker can have finished by the step being
delivered (``OffloadingWorkerMetadata.completed_jobs``); ``recv=rN`` reports rN's
load job done (``completed_jobs`` and ``finished_recving``, as ``get_finished``
does).  Block ids are read as the spec's (vLLM block b is spec block b - 1).
"""
from __future__ import annotations

from typing import Any


class OffloadWorker:
    """What the worker knows of each job: its step, its blocks, the step that flushed it."""

    def __init__(self, scheduler: Any) -> None:
        self._connector = scheduler.connector.connector_scheduler  # OffloadingConnectorScheduler
        self._issued: dict[int, int] = {}  # store job -> index of the step whose metadata issued it
        self._flushed: dict[int, int] = {}  # store job -> index of the step that flushed it
        self._blocks: dict[int, tuple[int, ...]] = {}  # store job -> spec block ids it reads
        self._loads: dict[int, int] = {}  # load job -> its request (index)

    def scheduled(self, index: int, scheduler_output: Any) -> None:
        """Read step ``index``'s ``OffloadingConnectorMetadata``."""
        meta = scheduler_output.kv_connector_metadata
        for job_id, job in meta.store_jobs.items():
            self._issued[job_id] = index
            self._blocks[job_id] = tuple(int(b) - 1 for b in job.src_spec.block_ids)
        for job_id in meta.jobs_to_flush:
            self._flushed.setdefault(job_id, index)
        for job_id, job in meta.load_jobs.items():
            self._loads[job_id] = int(str(job.req_id)[1:])

    def _pending_stores(self) -> list[tuple[int, Any]]:
        return [(j, st) for j, st in sorted(self._connector._jobs.items()) if st.is_store]

    def output(self, kind: str, req: int, index: int) -> Any:
        """The ``KVConnectorOutput`` of a ``stored``/``recv`` report on step ``index``'s output."""
        from vllm.distributed.kv_transfer.kv_connector.v1.offloading.common import OffloadingWorkerMetadata
        from vllm.v1.outputs import KVConnectorOutput

        rid = f"r{req}"
        if kind == "recv":
            jobs = {j: 1 for j, r in self._loads.items() if r == req and j in self._connector._jobs}
            return KVConnectorOutput(finished_recving={rid},
                                     kv_connector_worker_meta=OffloadingWorkerMetadata(completed_jobs=jobs))
        done = {j: 1 for j, st in self._pending_stores() if st.req_id == rid
                and (self._issued.get(j, index) < index or self._flushed.get(j, index + 1) <= index)}
        return KVConnectorOutput(kv_connector_worker_meta=OffloadingWorkerMetadata(completed_jobs=done))

    def store_jobs(self) -> tuple[tuple[int, tuple[int, ...], bool], ...]:
        """The unfinished store jobs, sorted: (request, blocks read, flushed).  Sorted, not in issue
        order: the stores of requests that finished together follow ``finished_req_ids``, a set."""
        return tuple(sorted((int(str(st.req_id)[1:]), self._blocks.get(j, ()), j in self._flushed)
                            for j, st in self._pending_stores()))
