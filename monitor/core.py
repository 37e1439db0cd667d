"""The monitor's hooks around a live scheduler's calls, and its counters.

``MonitorCore`` is called by the scheduler classes (``scheduler.py``) after
each real call: it steps the spec twin (``twin.py``) with the same action,
compares the fields the call touched (``observe.py``), and on the first
divergence writes the window as a replay file (``checker/window_trace.py``)
from a background thread, so the engine loop never waits on I/O.

States of the monitor: *checking*; *suspended* after a divergence or a request
or call the spec does not cover (every scheduler call then counts as
unchecked) until the engine is idle — no request, no step in flight — where
the twin is re-synchronised from vLLM's block pool and checking resumes.
"""
from __future__ import annotations

import copy
import logging
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from asyncspec.checker.window_trace import WindowTrace, save_window
from asyncspec.spec import engine as eng
from asyncspec.spec.config import SpecConfig
from asyncspec.spec.engine import Action

from .config import MonitorSettings, unmodelled_request_features
from .observe import QUEUE_FIELDS, EngineReader, engine_payload, request_fields
from .twin import NotEnabled, SpecTwin, empty_state

logger = logging.getLogger("vllm.asyncspec.monitor")


class MonitorDivergence(RuntimeError):
    """The engine left the spec (``ASYNCSPEC_MONITOR_ON_DIVERGENCE=fail``)."""


@dataclass
class MonitorStats:
    """What the monitor has seen; ``as_counts`` is what it adds to ``SchedulerStats``."""

    checked_steps: int = 0
    unchecked_steps: int = 0
    divergences: int = 0
    resyncs: int = 0
    scheduler_seconds: float = 0.0  # inside vLLM's own schedule() / update_from_output()
    monitor_seconds: float = 0.0  # inside the monitor's hooks
    unmodelled: dict[str, int] = field(default_factory=dict)  # feature -> requests or calls
    replay_files: list[str] = field(default_factory=list)

    def as_counts(self) -> dict[str, int]:
        return {"asyncspec_monitor_checked_steps": self.checked_steps,
                "asyncspec_monitor_unchecked_steps": self.unchecked_steps,
                "asyncspec_monitor_divergences": self.divergences}

    @property
    def overhead(self) -> float:
        """Monitor time as a ratio to the scheduler's own time."""
        return self.monitor_seconds / self.scheduler_seconds if self.scheduler_seconds else 0.0

    def summary(self) -> str:
        unmodelled = ", ".join(f"{k} x{n}" for k, n in sorted(self.unmodelled.items())) or "none"
        first = f"; first replay: {self.replay_files[0]}" if self.replay_files else ""
        return (f"asyncspec monitor: {self.checked_steps} steps checked, {self.unchecked_steps} unchecked, "
                f"{self.divergences} divergences, {self.resyncs} re-syncs, overhead {self.overhead:.1%} of "
                f"the scheduler's time; unmodelled: {unmodelled}{first}")


class MonitorCore:
    """The spec twin of one scheduler, and the checks after each of its calls."""

    def __init__(self, scheduler: Any, cfg: SpecConfig, settings: MonitorSettings,
                 engine_unmodelled: Iterable[str] = ()) -> None:
        self.sched = scheduler
        self.cfg = cfg
        self.settings = settings
        self.stats = MonitorStats()
        self.in_flight = 0  # schedule() calls whose output vLLM has not processed
        self.calls = 0
        self._writers: list[threading.Thread] = []
        self.twin = self._fresh_twin()
        self.reader = EngineReader(scheduler, self.twin)
        self.suspended: str | None = None  # why no step is checked now
        for feature in engine_unmodelled:
            self._unmodelled(feature)
        self.disabled = self.suspended is not None  # an engine setting: never checked

    # ---- states -----------------------------------------------------------------

    def _fresh_twin(self) -> SpecTwin:
        pool = self.sched.kv_cache_manager.block_pool
        free = tuple(b.block_id - 1 for b in pool.free_block_queue.get_all_free_blocks())
        hashed = [b.block_id - 1 for b in pool.blocks if not b.is_null and b.block_hash is not None]
        return SpecTwin(self.cfg, empty_state(self.cfg, free, hashed), self.settings.window)

    def _unmodelled(self, feature: str) -> None:
        if feature not in self.stats.unmodelled:
            logger.warning("asyncspec monitor: %s is not modelled by the spec; steps are unchecked "
                           "until the engine is idle", feature)
        self.stats.unmodelled[feature] = self.stats.unmodelled.get(feature, 0) + 1
        self.suspended = self.suspended or feature

    def _resync_if_idle(self) -> None:
        """Idle engine: a fresh twin from vLLM's pool, and checking resumes."""
        if self.disabled or self.suspended is None or self.in_flight or self.sched.requests:
            return
        self.twin = self._fresh_twin()
        self.reader = EngineReader(self.sched, self.twin)
        self.suspended = None
        self.stats.resyncs += 1

    # ---- hooks (called after vLLM's own call) -------------------------------------------

    def after_add(self, request: Any) -> None:
        start = time.perf_counter()
        if not self.suspended:
            features = unmodelled_request_features(request)
            for f in features:
                self._unmodelled(f)
            if not features:
                self._add(request)
        self.stats.monitor_seconds += time.perf_counter() - start

    def _add(self, request: Any) -> None:
        if request.request_id in self.twin.index_of:
            self._unmodelled("a request id added twice (a streaming session)")
            return
        prompt = int(request.num_prompt_tokens)
        limit = int(self.sched.max_model_len) - prompt
        max_tokens = int(request.max_tokens) if request.max_tokens is not None else limit
        try:
            self.twin.add(request.request_id, prompt, max(1, min(max_tokens, limit)))
        except NotEnabled as exc:
            self._diverged([{"field": "loop", "spec": str(exc), "engine": f"add_request {request.request_id}"}],
                           failed=Action(eng.ADD_REQUEST, len(self.twin.ids) - 1))
            return
        self.reader.by_id[request.request_id] = request

    def after_finish(self, ordered_ids: list[str], was_live: set[str], aborted: bool) -> None:
        """``finish_requests``: ``ordered_ids`` in the order vLLM freed them."""
        start = time.perf_counter()
        if not self.suspended and was_live:
            if not aborted:
                self._unmodelled("finish_requests with a status other than FINISHED_ABORTED")
            else:
                self._aborts([r for r in ordered_ids if r in was_live])
        self.stats.monitor_seconds += time.perf_counter() - start

    def _aborts(self, ids: list[str]) -> None:
        twin = self.twin
        for rid in ids:
            index = twin.index_of.get(rid)
            if index is None or not twin.is_live(index):
                continue
            if not self._step(Action(eng.ABORT, index), f"abort {rid}"):
                return
        self._compare(request_fields((twin.index_of[r] for r in ids if r in twin.index_of), False), ())

    def after_reset(self, reset_running: bool, succeeded: bool) -> None:
        """``reset_prefix_cache``: the spec's action preempts every running request; without
        ``reset_running_requests`` vLLM only clears the hashes when no block is held, which
        is the spec's action on an engine with nothing running."""
        start = time.perf_counter()
        if not self.suspended and (reset_running or succeeded):
            running = self.twin.state.running
            if self._step(Action(eng.RESET_PREFIX_CACHE), "reset_prefix_cache"):
                self._compare(list(QUEUE_FIELDS) + request_fields(running, False), ())
        self.stats.monitor_seconds += time.perf_counter() - start

    def after_schedule(self, scheduler_output: Any, throttled: bool, seconds: float) -> None:
        start = time.perf_counter()
        self.stats.scheduler_seconds += seconds
        self.in_flight += 1
        if throttled and not self.suspended:
            self._unmodelled("schedule(throttle_prefills=True)")
        if self.suspended:
            self.stats.unchecked_steps += 1
        elif self._step(Action(eng.SCHEDULE), "schedule"):
            self._check_schedule(scheduler_output)
        self.stats.monitor_seconds += time.perf_counter() - start

    def _check_schedule(self, so: Any) -> None:
        index_of = self.twin.index_of
        if any(int(n.num_computed_tokens) > 0 for n in so.scheduled_new_reqs):
            self._unmodelled("a prefix-cache hit on another request's blocks")
            self.stats.unchecked_steps += 1
            return
        touched = [index_of.get(rid, -1) for rid in so.num_scheduled_tokens]
        self._compare(list(QUEUE_FIELDS) + ["payload"] + request_fields(touched, self._full()),
                      engine_payload(so, index_of))

    def after_update(self, result: Any, seconds: float) -> None:
        start = time.perf_counter()
        self.stats.scheduler_seconds += seconds
        self.in_flight -= 1
        if self.suspended:
            self.stats.unchecked_steps += 1
        else:
            touched = self._learn_stops(result)
            oldest = self.twin.state.batch_queue[0].entries if self.twin.state.batch_queue else ()
            touched += [e.req for e in oldest]
            if self._step(Action(eng.UPDATE_FROM_OUTPUT), "update_from_output"):
                self._compare(list(QUEUE_FIELDS) + request_fields(touched, self._full()), ())
                if self.twin.roll_if_full():
                    self.reader.prune()
        self._resync_if_idle()
        self.stats.monitor_seconds += time.perf_counter() - start

    def _learn_stops(self, result: Any) -> list[int]:
        """EOS / stop-token positions vLLM just reported (``Scheduler.update_from_output``
        returns one ``EngineCoreOutputs`` per client): the twin learns them first."""
        touched = []
        for eco in result.values():
            for out in eco.outputs:
                index = self.twin.index_of.get(out.request_id)
                if index is None:
                    continue
                touched.append(index)
                reason = out.finish_reason
                if reason is not None and reason.name == "STOP":
                    self.twin.learn_eos(index, int(self.reader.request(index).num_output_tokens))
        return touched

    # ---- stepping and comparing -------------------------------------------------------------

    def _full(self) -> bool:
        return self.calls % (16 * self.settings.check_every) == 0

    def _step(self, action: Action, what: str) -> bool:
        try:
            self.twin.apply(action)
        except NotEnabled as exc:
            self._diverged([{"field": "loop", "spec": str(exc), "engine": what}], failed=action)
            return False
        return True

    def _compare(self, names: list[str], payload: Any) -> None:
        self.calls += 1
        if self.calls % self.settings.check_every:
            self.stats.unchecked_steps += 1
            return
        live = [n for n in names if "." not in n or self._comparable(n)]
        differences = self.reader.differences(live, self.twin.payload, payload)
        if differences:
            self._diverged(differences)
        else:
            self.stats.checked_steps += 1

    def _comparable(self, name: str) -> bool:
        """A finished request is compared on its status and output count only."""
        head, attr = name.split(".", 1)
        index = int(head[1:])
        if index < 0:
            return True
        return self.twin.is_live(index) or attr in ("status", "num_output_tokens")

    # ---- divergences ------------------------------------------------------------------------

    def _diverged(self, differences: list[dict[str, Any]], failed: Action | None = None) -> None:
        self.stats.divergences += 1
        self.stats.unchecked_steps += 1
        first = differences[0]
        message = f"{first['field']}: spec={first['spec']!r} engine={first['engine']!r}"
        path = self._write_window(differences, message, failed)
        logger.error("asyncspec monitor: the engine left the spec: %s (replay: asyncspec replay %s)", message, path)
        self.suspended = "a divergence"
        if self.settings.on_divergence == "fail":
            raise MonitorDivergence(f"asyncspec monitor: {message}; replay: asyncspec replay {path}")

    def _write_window(self, differences: list[dict[str, Any]], message: str, failed: Action | None) -> Path:
        twin = self.twin
        actions = list(twin.window.actions) + ([failed] if failed is not None else [])
        values = [] if failed is not None else [{"field": d["field"], "engine": d["engine"]} for d in differences]
        start = twin.window_start_state()
        cfg = copy.copy(twin.cfg)  # the twin's config grows with later arrivals: a snapshot
        object.__setattr__(cfg, "requests", tuple((p.num_prompt_tokens, p.max_tokens) for p in start.params))
        object.__setattr__(cfg, "eos_positions", tuple((p.eos_position,) for p in start.params))
        trace = WindowTrace(cfg, start, actions, values, message,
                            {"request_ids": list(twin.window.start_ids) + twin.ids[len(twin.window.start_ids):],
                             "previous_step": sorted(twin.window.previous_step),
                             "spec_values": differences})
        path = self.settings.out_dir / f"monitor-divergence-{self.stats.divergences}-{time.time_ns()}.json"
        self.stats.replay_files.append(str(path))
        writer = threading.Thread(target=save_window, args=(trace, path), daemon=True, name="asyncspec-monitor")
        writer.start()
        self._writers.append(writer)
        return path

    def flush(self, timeout: float = 10.0) -> None:
        """Wait for the replay files being written (at shutdown, in tests)."""
        for writer in self._writers:
            writer.join(timeout)
        self._writers = [w for w in self._writers if w.is_alive()]
