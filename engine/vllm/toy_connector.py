"""A small KV connector of ours, written against vLLM's public connector interface
(``vllm/distributed/kv_transfer/kv_connector/v1/base.py``: ``KVConnectorBase_V1``,
``SupportsHMA``).  The scheduler target runs its scheduler half only (the harness plays
the worker); the engine target runs both halves, the worker half in vLLM's runner.

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

Under ``--target vllm`` the worker half is the fuzz harness: it reports each started load
(``finished_recving``, with ``failed_recving`` too when it fails, or with the
load's blocks from block j on in ``invalid_block_ids`` when some of them failed:
``KVConnectorBase_V1.get_block_ids_with_load_errors``) and each pending send
(``finished_sending``) whenever its choices say so, late or never.  ``started_loads`` / ``pending_loads`` / ``pending_sends`` show what it
may report.

Under ``--target vllm-engine`` the worker half below runs inside vLLM's model runner
(``KVConnectorModelRunnerMixin._get_kv_connector_output``, vllm/v1/worker/
kv_connector_model_runner_mixin.py: ``bind_connector_metadata``, ``start_load_kv``,
``wait_for_save``, ``get_transfer_results``, ``get_block_ids_with_load_errors``,
``clear_connector_metadata``, with or without a forward pass).  It moves no KV: each
load the scheduler half started (the metadata carries its request id and block ids)
is reported in ``finished_recving`` one runner step later, one load per step, the
oldest first; what the report says comes from the request's ``kv_transfer_params``:
``{"load": True, "report": "recv" | "fail" | "invalid@j"}`` (``fail``: in
``failed_recving`` too; ``invalid@j``: the load's blocks from block index j on in
``invalid_block_ids``).  A load whose request finished before its report is reported
done (``recv``).  Loaded by ``KVTransferConfig(kv_connector="AsyncSpecToyConnector",
kv_connector_module_path=__name__)``.
"""
from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any, NamedTuple

from vllm.distributed.kv_transfer.kv_connector.v1.base import (
    KVConnectorBase_V1,
    KVConnectorMetadata,
    KVConnectorTransferResults,
    SupportsHMA,
)

CONNECTOR_NAME = "AsyncSpecToyConnector"
RECV, FAIL, INVALID = "recv", "fail", "invalid"  # the worker half's report kinds (invalid@j)


def _params(request: Any) -> dict[str, Any]:
    return request.kv_transfer_params or {}


def _report_of(request: Any) -> str:
    """What the worker half reports for the request's load (``kv_transfer_params["report"]``)."""
    return str(_params(request).get("report", RECV))


class ToyLoad(NamedTuple):
    """A load the scheduler half started: the request, its KV blocks (first group), its report,
    and the prompt tokens it loads (what the remote prefill computed)."""

    req_id: str
    block_ids: tuple[int, ...]
    report: str
    token_ids: tuple[int, ...] = ()


class ToyMetadata(KVConnectorMetadata):
    """What one ``SchedulerOutput`` tells the worker: loads started, sends to make."""

    def __init__(self, loads: list[ToyLoad], sends: list[str]) -> None:
        self.loads = loads
        self.sends = sends


class AsyncSpecToyConnector(KVConnectorBase_V1, SupportsHMA):
    """Scheduler half of a connector whose loads and sends complete when the worker says."""

    def __init__(self, vllm_config: Any, role: Any, kv_cache_config: Any = None) -> None:
        super().__init__(vllm_config, role, kv_cache_config)
        self.started_loads: set[str] = set()  # a load was started once: never again
        self.pending_loads: set[str] = set()  # started, finished_recving not yet seen
        self.pending_sends: set[str] = set()  # blocks held until finished_sending
        self._new_loads: list[ToyLoad] = []
        self._new_sends: list[str] = []
        # worker side
        self._bound_loads: deque[ToyLoad] = deque()  # started in an earlier runner step, oldest first
        self._this_step: list[ToyLoad] = []
        self._finished: set[str] = set()  # requests the scheduler has finished
        self._invalid: set[int] = set()
        self.transfer: Callable[[ToyLoad, set[int]], None] | None = None
        """Writes a reported load's KV but the invalid blocks (the engine target's oracle model)."""

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
            (block_ids, *_) = blocks.get_block_ids()
            loaded = tuple(request.prompt_token_ids[request.num_computed_tokens:][:num_external_tokens])
            self._new_loads.append(ToyLoad(request.request_id, tuple(block_ids), _report_of(request), loaded))

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

    # ---- worker side (the engine target): reports, moves nothing -------------------

    def start_load_kv(self, forward_context: Any, **kwargs: Any) -> None:
        meta = self._get_connector_metadata()
        assert isinstance(meta, ToyMetadata)
        self._this_step = list(meta.loads)

    def wait_for_layer_load(self, layer_name: str) -> None:
        pass

    def save_kv_layer(self, layer_name: str, kv_layer: Any, attn_metadata: Any, **kwargs: Any) -> None:
        pass

    def wait_for_save(self) -> None:
        pass

    def get_transfer_results(self, finished_req_ids: set[str]) -> KVConnectorTransferResults:
        """The oldest load started in an earlier step, done, failed or with invalid blocks."""
        self._finished |= set(finished_req_ids)
        self._invalid = set()
        results = KVConnectorTransferResults()
        if self._bound_loads:
            load = self._bound_loads.popleft()
            results.finished_recving.add(load.req_id)
            report = RECV if load.req_id in self._finished else load.report
            if report == FAIL:
                results.failed_recving.add(load.req_id)
            elif report.startswith(INVALID + "@"):
                self._invalid = set(load.block_ids[int(report.split("@", 1)[1]):])
            if report != FAIL and self.transfer is not None:
                self.transfer(load, self._invalid)
        self._bound_loads.extend(self._this_step)
        self._this_step = []
        return results

    def get_block_ids_with_load_errors(self) -> set[int]:
        invalid, self._invalid = self._invalid, set()
        return invalid
