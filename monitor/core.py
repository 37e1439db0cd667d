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
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from asyncspec.checker.window_trace import WindowTrace, save_window
from asyncspec.spec import engine as eng
from asyncspec.spec.config import SpecConfig
from asyncspec.spec.engine import Action

from asyncspec.monitor.monitor_config import MonitorSettings, unmodelled_request_features
from asyncspec.monitor.observe import QUEUE_FIELDS, EngineReader, engine_payload
from asyncspec.monitor.resync import CannotResync, max_tokens_of, state_from_vllm
from asyncspec.monitor.twin import NotEnabled, SpecTwin, empty_state

logger = logging.getLogger("vllm.asyncspec.monitor")

EPISODE = 2  # sampled mode: schedule() calls checked after each re-synchronisation
FULL_EVERY = 16  # block tables are compared on every 16th comparison
DIVERGED, SAMPLING_GAP = "a divergence", "a sampling gap"


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
        self.in_flight_outputs: deque[Any] = deque()  # SchedulerOutputs whose output is unprocessed
        self.calls = 0
        self.schedules = 0
        self.episode_left = 0  # sampled mode: schedule() calls left in this checked episode
        self.unmodelled_ids: set[str] = set()  # live requests the spec does not cover
        self._writers: list[threading.Thread] = []
        self.twin = self._fresh_twin()
        self.reader = EngineReader(scheduler, self.twin)
        self.suspended: str | None = None  # why no step is checked now
        for feature in engine_unmodelled:
            self._unmodelled(feature)
        self.disabled = self.suspended is not None  # an engine setting: never checked
        if self.sampled and not self.disabled:
            self.suspended = SAMPLING_GAP

    # ---- states -----------------------------------------------------------------

    def _fresh_twin(self) -> SpecTwin:
        pool = self.sched.kv_cache_manager.block_pool
        free = tuple(b.block_id - 1 for b in pool.free_block_queue.get_all_free_blocks())
        hashed = [b.block_id - 1 for b in pool.blocks if not b.is_null and b.block_hash is not None]
        return SpecTwin(self.cfg, empty_state(self.cfg, free, hashed), self.settings.window)

    def _unmodelled(self, feature: str, req_id: str | None = None) -> None:
        if feature not in self.stats.unmodelled:
            logger.warning("asyncspec monitor: %s is not modelled by the spec; steps are unchecked "
                           "until no such request is left", feature)
        self.stats.unmodelled[feature] = self.stats.unmodelled.get(feature, 0) + 1
        if req_id is not None:
            self.unmodelled_ids.add(req_id)
        self.suspended = self.suspended or feature

    @property
    def sampled(self) -> bool:
        """Checking every Nth step: episodes of ``EPISODE`` schedule() calls, re-synchronised."""
        return self.settings.check_every > EPISODE

    def before_schedule(self) -> None:
        """Right before vLLM's ``schedule()``: start checking again when it is time."""
        start = time.perf_counter()
        self.schedules += 1
        self._sync_connector_flags()
        if self.suspended is not None and not self.disabled and self._resync_due():
            self._resync()
        self.stats.monitor_seconds += time.perf_counter() - start

    def _sync_connector_flags(self) -> None:
        """``Scheduler.defer_block_free`` / ``requires_kv_delivery``, which a KV connector sets on
        the scheduler after it is built: the spec models both (``defer_block_free``,
        ``stale_mode``); they may change only while the twin holds no request."""
        defer, drop = bool(self.sched.defer_block_free), bool(self.sched.requires_kv_delivery)
        stale = "drop" if drop else "deliver"
        if (defer, stale) == (self.cfg.defer_block_free, self.cfg.stale_mode):
            return
        if self.twin.state.params and not self.suspended:
            self._unmodelled("defer_block_free / requires_kv_delivery changed with requests in flight")
            return
        object.__setattr__(self.cfg, "defer_block_free", defer)
        object.__setattr__(self.cfg, "stale_mode", stale)

    def _resync_due(self) -> bool:
        period = self.settings.check_every if self.sampled else 1
        if self.suspended == DIVERGED:
            period = max(period, self.settings.window)
        if self.schedules % period:
            return False
        in_flight = {rid for so in self.in_flight_outputs for rid in so.num_scheduled_tokens}
        live = self.sched.requests
        self.unmodelled_ids = {r for r in self.unmodelled_ids if r in live or r in in_flight}
        self.reader.by_id = {r: v for r, v in self.reader.by_id.items() if r in live or r in in_flight}
        return not self.unmodelled_ids

    def _resync(self) -> None:
        """The twin re-read from vLLM's state (``resync.py``); checking resumes."""
        try:
            state, ids, previous = state_from_vllm(self.cfg, self.sched, self.in_flight_outputs, self.reader.by_id)
        except CannotResync as exc:
            self.stats.unmodelled[f"re-synchronisation: {exc}"] = 1 + self.stats.unmodelled.get(
                f"re-synchronisation: {exc}", 0)
            return
        by_id = {rid: self.sched.requests.get(rid) or self.reader.by_id[rid] for rid in ids}
        self.twin = SpecTwin(self.cfg, state, self.settings.window, ids, previous)
        self.reader = EngineReader(self.sched, self.twin)
        self.reader.by_id = by_id
        self.suspended = None
        self.episode_left = EPISODE
        self.stats.resyncs += 1

    # ---- hooks (called after vLLM's own call) -------------------------------------------

    def after_add(self, request: Any) -> None:
        start = time.perf_counter()
        self._sync_connector_flags()
        self.reader.by_id[request.request_id] = request  # for a re-synchronisation while it is in flight
        features = unmodelled_request_features(request)
        for f in features:
            self._unmodelled(f, request.request_id)
        if not self.suspended:
            self._add(request)
        self.stats.monitor_seconds += time.perf_counter() - start

    def _add(self, request: Any) -> None:
        if request.request_id in self.twin.index_of:
            self._unmodelled("a request id added twice (a streaming session)", request.request_id)
            return
        try:
            self.twin.add(request.request_id, int(request.num_prompt_tokens),
                          max_tokens_of(request, int(self.sched.max_model_len)))
        except NotEnabled as exc:
            self._diverged([{"field": "loop", "spec": str(exc), "engine": f"add_request {request.request_id}"}],
                           failed=Action(eng.ADD_REQUEST, len(self.twin.ids) - 1))
            return

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
        self._compare([twin.index_of[r] for r in ids if r in twin.index_of])

    def after_reset(self, reset_running: bool, succeeded: bool) -> None:
        """``reset_prefix_cache``: the spec's action preempts every running request; without
        ``reset_running_requests`` vLLM only clears the hashes when no block is held, which
        is the spec's action on an engine with nothing running."""
        start = time.perf_counter()
        if not self.suspended and (reset_running or succeeded):
            running = self.twin.state.running
            if self._step(Action(eng.RESET_PREFIX_CACHE), "reset_prefix_cache"):
                self._compare(running)
        self.stats.monitor_seconds += time.perf_counter() - start

    def after_schedule(self, scheduler_output: Any, throttled: bool, seconds: float) -> None:
        start = time.perf_counter()
        self.stats.scheduler_seconds += seconds
        self.in_flight_outputs.append(scheduler_output)
        if throttled and not self.suspended:
            self._unmodelled("schedule(throttle_prefills=True)")
        if self.suspended:
            self.stats.unchecked_steps += 1
        elif self._step(Action(eng.SCHEDULE), "schedule"):
            self._check_schedule(scheduler_output)
            self.episode_left -= 1
        self.stats.monitor_seconds += time.perf_counter() - start

    def _check_schedule(self, so: Any) -> None:
        index_of = self.twin.index_of
        hits = [n.req_id for n in so.scheduled_new_reqs if int(n.num_computed_tokens) > 0]
        if hits:
            for rid in hits:
                self._unmodelled("a prefix-cache hit on another request's blocks", rid)
            self.stats.unchecked_steps += 1
            return
        touched = [index_of.get(rid, -1) for rid in so.num_scheduled_tokens]
        self._compare(touched, self._full(), engine_payload(so, index_of))

    def after_update(self, result: Any, seconds: float) -> None:
        start = time.perf_counter()
        self.stats.scheduler_seconds += seconds
        if self.in_flight_outputs:
            self.in_flight_outputs.popleft()
        if self.suspended:
            self.stats.unchecked_steps += 1
        else:
            touched = self._learn_stops(result)
            oldest = self.twin.state.batch_queue[0].entries if self.twin.state.batch_queue else ()
            touched += [e.req for e in oldest]
            if self._step(Action(eng.UPDATE_FROM_OUTPUT), "update_from_output"):
                self._compare(touched, self._full())
                if self.twin.roll_if_full():
                    self.reader.prune()
            if self.sampled and self.episode_left <= 0 and not self.suspended:
                self.suspended = SAMPLING_GAP
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
        return self.calls % FULL_EVERY == 0

    def _step(self, action: Action, what: str) -> bool:
        try:
            self.twin.apply(action)
        except NotEnabled as exc:
            self._diverged([{"field": "loop", "spec": str(exc), "engine": what}], failed=action)
            return False
        return True

    def _compare(self, indices: Any, full: bool = False, payload: Any = None) -> None:
        """Compare the queues, the counters of ``indices`` and (after a schedule) the payload."""
        self.calls += 1
        spec_payload = self.twin.payload if payload is not None else None
        differences = self.reader.differences(QUEUE_FIELDS, indices, full, spec_payload, payload or ())
        if differences:
            self._diverged(differences)
        else:
            self.stats.checked_steps += 1

    # ---- divergences ------------------------------------------------------------------------

    def _diverged(self, differences: list[dict[str, Any]], failed: Action | None = None) -> None:
        self.stats.divergences += 1
        self.stats.unchecked_steps += 1
        first = differences[0]
        message = f"{first['field']}: spec={first['spec']!r} engine={first['engine']!r}"
        path = self._write_window(differences, message, failed)
        logger.error("asyncspec monitor: the engine left the spec: %s (replay: asyncspec replay %s)", message, path)
        self.suspended = DIVERGED
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
