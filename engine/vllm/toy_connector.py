"""A small KV connector of ours, written against vLLM's public connector interface
(``vllm/distributed/kv_transfer/kv_connector/v1/base.py``: ``KVConnectorBase_V1``,
``SupportsHMA``), for the scheduler target: only its scheduler half ever runs.

A request asks for it in ``SamplingParams.extra_args["kv_transfer_params"]``:

* ``{"load": True}`` — at its first admission the connector claims every prompt
  token but the last as external (``get_num_new_matched_tokens`` returns
  (P - 1 - C, True): an asynchronous load), once per request: after the load
  (finished or failed) or a preemption it is computed locally;
* ``{"send": True}`` — when it finishes having computed something, the connector
  keeps its blocks (``request_finished_all_groups`` returns True) until the
  worker reports the send in ``finished_sending``; never while its load is
  still pending (the scheduler already holds those blocks for the load, and a
  second release report would trip ``_update_from_kv_xfer_finished``).

The worker half is the fuzz harness: it reports each started load
(``finished_recving``, with ``failed_recving`` too when it fails, or with the
load's blocks from block j on in ``invalid_block_ids`` when some of them failed:
``KVConnectorBase_V1.get_block_ids_with_load_errors``) and each pending send
(``finished_sending``) whenever its choices say so, late or never.  ``started_loads`` / ``pending_loads`` / ``pending_sends`` show what it
may report.  Loaded by ``KVTransferConfig(kv_connector="AsyncSpecToyConnector",
kv_connector_module_path=__name__)``.
"""
from __future__ import annotations

from typing import Any

from vllm.distributed.kv_transfer.kv_connector.v1.base import (
    KVConnectorBase_V1,
    KVConnectorMetadata,
    SupportsHMA,
)

CONNECTOR_NAME = "AsyncSpecToyConnector"


def _params(request: Any) -> dict[str, Any]:
    return request.kv_transfer_params or {}


class ToyMetadata(KVConnectorMetadata):
    """What one ``SchedulerOutput`` tells the worker: loads started, sends to make."""

    def __init__(self, loads: list[str], sends: list[str]) -> None:
        self.loads = loads
        self.sends = sends


class AsyncSpecToyConnector(KVConnectorBase_V1, SupportsHMA):
    """Scheduler half of a connector whose loads and sends complete when the worker says."""

    def __init__(self, vllm_config: Any, role: Any, kv_cache_config: Any = None) -> None:
        super().__init__(vllm_config, role, kv_cache_config)
        self.started_loads: set[str] = set()  # a load was started once: never again
        self.pending_loads: set[str] = set()  # started, finished_recving not yet seen
        self.pending_sends: set[str] = set()  # blocks held until finished_sending
        self._new_loads: list[str] = []
        self._new_sends: list[str] = []

    # ---- scheduler side ---------------------------------------------------------

    def get_num_new_matched_tokens(self, request: Any, num_computed_tokens: int) -> tuple[int, bool]:
        if not _params(request).get("load") or request.request_id in self.started_loads:
            return 0, False
        external = int(request.num_prompt_tokens) - 1 - num_computed_tokens
        return (external, True) if external > 0 else (0, False)

    def update_state_after_alloc(self, request: Any, blocks: Any, num_external_tokens: int) -> None:
        if num_external_tokens > 0:
            self.started_loads.add(request.request_id)
            self.pending_loads.add(request.request_id)
            self._new_loads.append(request.request_id)

    def build_connector_meta(self, scheduler_output: Any) -> KVConnectorMetadata:
        meta = ToyMetadata(self._new_loads, self._new_sends)
        self._new_loads, self._new_sends = [], []
        return meta

    def update_connector_output(self, connector_output: Any) -> None:
        for rid in connector_output.finished_recving or ():
            self.pending_loads.discard(rid)
        for rid in connector_output.finished_sending or ():
            self.pending_sends.discard(rid)

    def request_finished(self, request: Any, block_ids: list[int]) -> tuple[bool, dict[str, Any] | None]:
        return self.request_finished_all_groups(request, (block_ids,))

    def request_finished_all_groups(self, request: Any,
                                    block_ids: tuple[list[int], ...]) -> tuple[bool, dict[str, Any] | None]:
        rid = request.request_id
        if not _params(request).get("send") or rid in self.pending_loads or not request.num_computed_tokens:
            return False, None
        self.pending_sends.add(rid)
        self._new_sends.append(rid)
        return True, None

    # ---- worker side: never built here --------------------------------------------

    def start_load_kv(self, forward_context: Any, **kwargs: Any) -> None:
        raise NotImplementedError("the toy connector has no worker half")

    def wait_for_layer_load(self, layer_name: str) -> None:
        raise NotImplementedError("the toy connector has no worker half")

    def save_kv_layer(self, layer_name: str, kv_layer: Any, attn_metadata: Any, **kwargs: Any) -> None:
        raise NotImplementedError("the toy connector has no worker half")

    def wait_for_save(self) -> None:
        raise NotImplementedError("the toy connector has no worker half")
