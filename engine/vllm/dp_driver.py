"""vLLM's data-parallel wave loop driven on a CPU: ``DPEngineCoreProc.run_busy_loop`` on a few ranks, one
thread each, in this process (issue 28 item 7; ``feature_attempts_dp.py`` records why a whole
``DPEngineCoreProc`` cannot be built here).

Each rank is a ``DPEngineCoreProc`` made without its ``__init__`` (which needs a front end), carrying
the fields its wave logic reads, and runs vLLM's own ``run_busy_loop``: ``_has_global_unfinished_reqs``
(``step_counter``, the sync at step 1 and every ``dp_sync_interval``, ``ParallelConfig.sync_dp_state``),
the dummy-batch branch, the wave's end, rank 0's ``wave_complete`` and ``start_wave``,
``DPEngineCoreProc.add_request`` over ``EngineCore.add_request``, ``_handle_client_request`` for
``START_DP_WAVE``.  What stands in, and only that:

* the input queue (``_process_input_queue``): each iteration reads the messages the case gives it;
* the scheduler and the model (``_process_engine_step``, ``scheduler.has_unfinished_requests``,
  ``model_executor.execute_dummy_batch``): a rank's requests are the model steps they need, one per
  executed step (``run_dummy_batch`` in ``feature_attempts_dp.py`` runs the runner's dummy batch);
* the shutdown check (``_handle_shutdown``): the loop ends after the case's iterations;
* with ``gloo=False`` (the fuzz part's default), the all-reduce under ``sync_dp_state``
  (``vllm.distributed.utils.cpu_all_reduce_``): a SUM over the ranks' tensors in this process
  (``Rendezvous``), which also tells a rank waiting for ranks that have left the loop (a hang
  becomes ``DPHang``, where gloo's point-to-point waits would block or time out and leave the
  group unusable).  ``gloo=True`` runs vLLM's own all-reduce over one gloo group per driver.
"""
from __future__ import annotations

import importlib
import queue
import socket
import threading
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any, Callable

from asyncspec.engine.vllm.vllm_config import DriverConfig, configs_for
from asyncspec.engine.vllm.vllm_environment import load_vllm

Message = tuple[str, int, int]  # ("add", steps, request_wave) or ("start", wave, excluded engine index)


class DPHang(RuntimeError):
    """A rank waits in the all-reduce for ranks that have left the loop."""


@dataclass(frozen=True)
class Iteration:
    """What one iteration of ``run_busy_loop`` did on one rank, read after it."""

    kind: str  # "step" (a real step), "dummy" (execute_dummy_batch) or "idle" (the idle `continue`)
    step_counter: int
    current_wave: int
    engines_running: bool
    outputs: tuple[tuple[str, int], ...]  # ("wave_complete" | "start_wave", wave) put on the output queue


@dataclass
class RankRun:
    """One rank's case: its iterations' inputs; what it did; how it ended."""

    inputs: list[list[Message]]
    seen: list[Iteration] = field(default_factory=list)
    error: str | None = None  # a DPHang or any exception, as one line


class Rendezvous:
    """The stand-in all-reduce: every rank's tensor summed, each rank's call matched with the others'
    by order; a rank waiting while every other rank still missing has left the loop raises ``DPHang``."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.cond = threading.Condition()
        self.arrived: dict[int, Any] = {}
        self.result: Any = None
        self.generation = 0
        self.left: set[int] = set()

    def all_reduce(self, rank: int, tensor: Any) -> None:
        with self.cond:
            generation = self.generation
            self.arrived[rank] = tensor.clone()
            if len(self.arrived) == self.size:
                total = self.arrived[0].clone()
                for r in range(1, self.size):
                    total += self.arrived[r]
                self.result, self.arrived, self.generation = total, {}, generation + 1
                self.cond.notify_all()
            while self.generation == generation:
                missing = set(range(self.size)) - set(self.arrived)
                if missing <= self.left:
                    raise DPHang(f"rank {rank} waits in the all-reduce for rank(s) {sorted(missing)}, which left the loop")
                self.cond.wait()
            tensor.copy_(self.result)

    def leave(self, rank: int) -> None:
        with self.cond:
            self.left.add(rank)
            self.cond.notify_all()


class _Scheduler:
    """The stand-in scheduler: model steps still needed by the rank's requests."""

    def __init__(self) -> None:
        self.work = 0
        from vllm.v1.core.sched.interface import PauseState

        self.pause_state = PauseState.UNPAUSED

    def add_request(self, request: Any) -> None:
        self.work += int(request.steps)

    def has_unfinished_requests(self) -> bool:
        return self.work > 0

    def has_requests(self) -> bool:
        return self.work > 0

    def get_kv_connector(self) -> None:
        return None

    def get_ec_connector(self) -> None:
        return None


class DPDriver:
    """``size`` ranks of ``DPEngineCoreProc.run_busy_loop``; ``run`` plays one case on them."""

    def __init__(self, size: int = 2, gloo: bool = False) -> None:
        load_vllm()
        self.size, self.gloo = size, gloo
        self.vllm_config = configs_for(DriverConfig())[0]
        self.groups: list[Any] = self._gloo_groups() if gloo else []

    def _gloo_groups(self) -> list[Any]:
        """One gloo group of ``size`` ranks (``stateless_init_torch_distributed_process_group``), built once."""
        from vllm.distributed.utils import stateless_init_torch_distributed_process_group

        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = int(sock.getsockname()[1])
        groups: dict[int, Any] = {}

        def init(rank: int) -> None:
            groups[rank] = stateless_init_torch_distributed_process_group("127.0.0.1", port, rank, self.size, "gloo")

        _on_threads(self.size, init)
        return [groups[r] for r in range(self.size)]

    def close(self) -> None:
        from vllm.distributed.utils import stateless_destroy_torch_distributed_process_group

        for group in self.groups:
            stateless_destroy_torch_distributed_process_group(group)
        self.groups = []

    def run(self, inputs: list[list[list[Message]]], dp_sync_interval: int) -> list[RankRun]:
        """Each rank's iterations with their inputs (``inputs[rank][iteration]``), all ranks at once."""
        runs = [RankRun(list(per_rank)) for per_rank in inputs]
        rendezvous = Rendezvous(self.size)
        engines = [self._engine(rank, dp_sync_interval, runs[rank], rendezvous) for rank in range(self.size)]
        with _stand_in_all_reduce(None if self.gloo else rendezvous):
            _on_threads(self.size, lambda rank: _loop(engines[rank], runs[rank], rendezvous))
        return runs

    def _engine(self, rank: int, dp_sync_interval: int, run: RankRun, rendezvous: Rendezvous) -> Any:
        """A ``DPEngineCoreProc`` with what its busy loop reads; its input queue, scheduler, model and
        shutdown check the stand-ins above."""
        from vllm.v1.engine.core import DPEngineCoreProc

        engine: Any = DPEngineCoreProc.__new__(DPEngineCoreProc)
        engine.vllm_config = self.vllm_config
        engine.dp_group = self.groups[rank] if self.gloo else _StandInGroup(rank, self.size)
        engine.dp_rank = engine.engine_index = rank
        engine.dp_sync_interval, engine.step_counter, engine.current_wave = dp_sync_interval, 0, 0
        engine.pending_pause = engine.ignore_start_dp_wave = engine.engines_running = False
        engine.has_coordinator, engine.publish_dp_lb_stats, engine.log_stats = True, False, False
        engine.enable_fault_tolerance, engine.eep_scaling_state = False, None
        engine.output_queue = queue.Queue()
        engine.scheduler = _Scheduler()
        _attach_stand_ins(engine, run)
        return engine


class _StandInGroup:
    """What ``sync_dp_state`` asks of the group besides the all-reduce: its size (and this rank)."""

    def __init__(self, rank: int, size: int) -> None:
        self._rank, self._size = rank, size

    def size(self) -> int:
        return self._size

    def rank(self) -> int:
        return self._rank


@dataclass
class _LoopState:
    """Where a rank's loop is in its case: the iteration's batch kind, whether one began, the next input."""

    kind: str = "idle"
    started: bool = False
    next: int = 0

    def note_dummy_batch(self) -> None:
        self.kind = "dummy"


def _attach_stand_ins(engine: Any, run: RankRun) -> None:
    """The input queue, the model steps and the loop's end, as instance attributes over vLLM's methods."""
    from vllm.v1.engine import EngineCoreRequestType

    state = _LoopState()
    engine.model_executor = SimpleNamespace(is_sleeping=False, execute_dummy_batch=state.note_dummy_batch)

    def handle_shutdown() -> bool:
        if state.started:
            run.seen.append(_read(engine, state.kind))
        state.started, state.kind = True, "idle"
        return state.next < len(run.inputs)

    def process_input_queue() -> None:
        messages = run.inputs[state.next]
        state.next += 1
        for kind, a, b in messages:
            if kind == "add":
                request = SimpleNamespace(request_id=f"req-{state.next}-{a}", pooling_params=None,
                                          kv_transfer_params=None, ec_transfer_params=None, abort_immediately=False,
                                          steps=a)
                engine.add_request(request, b)
            else:
                engine._handle_client_request(EngineCoreRequestType.START_DP_WAVE, (a, b))

    def process_engine_step() -> bool:
        if engine.scheduler.work <= 0:
            return False
        engine.scheduler.work -= 1
        state.kind = "step"
        return True

    engine._handle_shutdown = handle_shutdown
    engine._process_input_queue = process_input_queue
    engine._process_engine_step = process_engine_step


def _read(engine: Any, kind: str) -> Iteration:
    outputs = []
    while not engine.output_queue.empty():
        _, out = engine.output_queue.get_nowait()
        if out.wave_complete is not None:
            outputs.append(("wave_complete", int(out.wave_complete)))
        if out.start_wave is not None:
            outputs.append(("start_wave", int(out.start_wave)))
    return Iteration(kind, int(engine.step_counter), int(engine.current_wave), bool(engine.engines_running),
                     tuple(outputs))


def _loop(engine: Any, run: RankRun, rendezvous: Rendezvous) -> None:
    """vLLM's busy loop on this rank until its iterations are done (``SystemExit``) or it fails."""
    try:
        engine.run_busy_loop()
    except SystemExit:
        pass
    except Exception as exc:  # a hang or whatever vLLM raises: the case's outcome on this rank
        run.error = f"{type(exc).__name__}: {exc}".splitlines()[0]
    finally:
        rendezvous.leave(engine.dp_rank)


class _stand_in_all_reduce:
    """``cpu_all_reduce_`` as ``sync_dp_state`` calls it, replaced by ``rendezvous`` (None: vLLM's own)."""

    def __init__(self, rendezvous: Rendezvous | None) -> None:
        self.rendezvous = rendezvous
        self.saved: Any = None

    def __enter__(self) -> None:
        if self.rendezvous is None:
            return
        parallel: Any = importlib.import_module("vllm.config.parallel")
        self.saved = parallel.cpu_all_reduce_
        rendezvous = self.rendezvous

        def all_reduce(tensor: Any, group: Any, timeout: Any = None) -> Any:
            rendezvous.all_reduce(group.rank(), tensor)
            return tensor

        parallel.cpu_all_reduce_ = all_reduce

    def __exit__(self, *exc: object) -> None:
        if self.saved is not None:
            parallel: Any = importlib.import_module("vllm.config.parallel")
            parallel.cpu_all_reduce_ = self.saved


def _on_threads(size: int, work: Callable[[int], None]) -> None:
    """``work(rank)`` for every rank, one thread each; ``RuntimeError`` if one does not end."""
    threads = [threading.Thread(target=work, args=(rank,), daemon=True) for rank in range(size)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    if any(thread.is_alive() for thread in threads):
        raise RuntimeError("a DP rank's thread did not end within 120 s")
