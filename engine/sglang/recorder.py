"""What the driver records of each loop iteration, by observing SGLang without changing it.

Per iteration, in the order they happened: ``arrive``/``abort`` (the intake), ``retract``
(``ScheduleBatch.retract_decode``'s returned requests, ``managers/schedule_batch.py``),
``forward`` (the fake worker's rows), ``process`` (``Scheduler.process_batch_result``: per
row, whether ``process_batch_result_decode`` skipped it because the request was already
finished or retracted, ``scheduler_components/batch_result_processor.py``).  At the end of
the iteration: every request's ``output_ids``, finish reason, ``kv.kv_committed_len`` and
``is_retracted`` (a queued request that ``abort_request`` drops through ``send_abort_output``
keeps no finish reason: it counts as aborted), and the pool (``available_size``, the radix cache's evictable and
protected sizes).
"""
from __future__ import annotations

from typing import Any

from asyncspec.engine.sglang import case as cs

FINISH_NAMES = {"FINISH_MATCHED_TOKEN": "stop", "FINISH_LENGTH": "length", "FINISH_ABORT": "abort"}


def finish_name(req: Any) -> str | None:
    """``req.finished_reason`` as stop / length / abort (None while unfinished)."""
    reason = req.finished_reason
    return None if reason is None else FINISH_NAMES.get(type(reason).__name__, type(reason).__name__)


class Recorder:
    """Collects the iterations of one case; wraps two SGLang methods with pure observers."""

    def __init__(self) -> None:
        self.iterations: list[dict[str, Any]] = []
        self.reqs: dict[str, Any] = {}
        self.aborted: set[str] = set()
        self._current: dict[str, Any] | None = None
        self._undo: list[tuple[Any, str, Any]] = []

    # ---- wrapping ---------------------------------------------------------------------

    def wrap(self, scheduler: Any) -> None:
        """Observe result processing, retraction and request intake."""
        from sglang.srt.managers.schedule_batch import ScheduleBatch

        process = scheduler.process_batch_result
        send_abort = scheduler.send_abort_output
        add = scheduler._add_request_to_queue
        retract = ScheduleBatch.retract_decode
        recorder = self

        def process_batch_result(batch: Any, result: Any) -> Any:
            rows = [{"rid": r.rid, "skipped": bool(r.finished() or r.is_retracted)} for r in batch.reqs]
            out = process(batch, result)
            for row, r in zip(rows, batch.reqs):
                row.update(out=len(r.output_ids), finished=finish_name(r))
            recorder.add({"op": "process", "rows": rows})
            return out

        def send_abort_output(abort: Any, req: Any, *args: Any, **kwargs: Any) -> Any:
            recorder.aborted.add(req.rid)  # a queued request is dropped without a finish reason
            return send_abort(abort, req, *args, **kwargs)

        def add_request_to_queue(req: Any, *args: Any, **kwargs: Any) -> Any:
            recorder.reqs[req.rid] = req
            return add(req, *args, **kwargs)

        def retract_decode(batch: Any) -> Any:
            result = retract(batch)
            for r in result[0]:
                recorder.add({"op": "retract", "rid": r.rid})
            for r in result[2]:
                recorder.add({"op": "retract_abort", "rid": r.rid})
            return result

        scheduler.process_batch_result = process_batch_result
        scheduler._add_request_to_queue = add_request_to_queue
        scheduler.send_abort_output = send_abort_output
        ScheduleBatch.retract_decode = retract_decode
        self._undo = [(scheduler, "process_batch_result", None), (scheduler, "_add_request_to_queue", None),
                      (ScheduleBatch, "retract_decode", retract)]

    def unwrap(self) -> None:
        """Restore the class-level method (instance attributes go with their scheduler)."""
        for owner, name, original in self._undo:
            if original is not None:
                setattr(owner, name, original)
        self._undo = []

    # ---- iterations -------------------------------------------------------------------

    def start(self, case: cs.Case) -> None:
        self.iterations = []
        self.reqs = {}
        self.aborted = set()
        self._current = None

    def open_iteration(self, index: int) -> None:
        self._current = {"it": index, "ops": []}

    def add(self, record: dict[str, Any]) -> None:
        if self._current is not None:
            self._current["ops"].append(record)

    def note(self, op: str, req: int) -> None:
        self.add({"op": op, "rid": cs.rid(req)})

    def close_iteration(self, scheduler: Any) -> None:
        """Snapshot every request the scheduler has seen, and the pool."""
        if self._current is None:
            return
        self._current["reqs"] = {
            rid: {"out": list(map(int, r.output_ids)),
                  "finished": finish_name(r) or ("abort" if rid in self.aborted else None),
                  "committed": int(r.kv.kv_committed_len), "retracted": bool(r.is_retracted)}
            for rid, r in sorted(self.reqs.items())
        }
        tree = scheduler.tree_cache
        held: set[int] = set()
        table = scheduler.req_to_token_pool.req_to_token
        for r in self.reqs.values():
            if not r.finished() and r.kv.req_pool_idx is not None:
                held.update(table[r.kv.req_pool_idx, : r.kv.kv_allocated_len].tolist())
        self._current["pool"] = {"held": len(held),
            "available": int(scheduler.token_to_kv_pool_allocator.available_size()),
            "evictable": int(tree.evictable_size()), "protected": int(tree.protected_size()),
        }
        self.iterations.append(self._current)
        self._current = None
