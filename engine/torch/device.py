"""The "device" of the torch engine: an in-order stream, the output thread, the KV connector.

* :class:`DeviceStream` executes device work strictly in submission order, like a CUDA
  stream.  On CPU it is one worker thread (the "device"); on CUDA the same thread launches
  kernels on a dedicated compute stream, and each step's sampled tokens are copied to pinned
  host memory on a separate copy stream after an event (non-blocking), so the launcher never
  waits for the GPU.  The stream records when each step starts and ends, to measure the time
  the device sits idle between steps.
* :class:`OutputThread` turns a step's device result into host token ids on its own thread
  and hands back a ``Future`` (vLLM's async output thread / ``AsyncModelRunnerOutput``).
* :class:`RecordingKVCache` is a paged cache that can record a step's KV writes, which the
  KV connector (:class:`LateKVWriter`) lands again *later*, when the step's output is
  processed: an out-of-order writer, as a KV-consumer connector is.  Landing the same values
  into blocks the request still owns is harmless; landing them into a block that was freed and
  reused by another request corrupts that request's KV.  ``defer_block_free`` (step fences)
  exists for exactly this.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, TypeVar, cast

import torch

from asyncspec.engine.torch.paged_kv import PagedKVCache

__all__ = [
    "DeviceResult",
    "DeviceStream",
    "KVWrite",
    "LateKVWriter",
    "OutputThread",
    "RecordingKVCache",
    "StepTiming",
]

T = TypeVar("T")


@dataclass(frozen=True)
class KVWrite:
    """One recorded ``write_slots`` call: layer, slots and the K/V written there."""

    layer: int
    slots: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor


class RecordingKVCache(PagedKVCache):
    """A :class:`PagedKVCache` that can record the writes of one step."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._recording: list[KVWrite] | None = None

    def start_recording(self) -> None:
        """Record every following ``write_slots`` call."""
        self._recording = []

    def stop_recording(self) -> list[KVWrite]:
        """Stop recording; the writes recorded since :meth:`start_recording`."""
        writes, self._recording = self._recording or [], None
        return writes

    def write_slots(
        self, layer: int, slots: torch.Tensor, k: torch.Tensor, v: torch.Tensor
    ) -> None:
        """Write (and record, when recording) one layer's K/V at ``slots``."""
        super().write_slots(layer, slots, k, v)
        if self._recording is not None:
            self._recording.append(KVWrite(layer, slots.clone(), k.clone(), v.clone()))

    def land(self, writes: list[KVWrite]) -> None:
        """Apply recorded writes again (the connector's late landing)."""
        for w in writes:
            PagedKVCache.write_slots(self, w.layer, w.slots, w.k, w.v)


@dataclass
class StepTiming:
    """Start and end of each step on the device (seconds, ``perf_counter`` or CUDA events)."""

    spans: list[tuple[float, float]] = field(default_factory=list)

    def idle_between_steps(self) -> float:
        """Total time the device waited between the end of a step and the start of the next."""
        ordered = sorted(self.spans)
        return sum(max(0.0, b[0] - a[1]) for a, b in zip(ordered, ordered[1:]))

    def busy(self) -> float:
        """Total time spent computing steps."""
        return sum(end - start for start, end in self.spans)


@dataclass
class DeviceResult:
    """What a step leaves on the device: its sampled tokens (and, on CUDA, the host copy)."""

    sampled: torch.Tensor
    host: torch.Tensor | None = None  # pinned host buffer being filled by the copy stream
    copied: torch.cuda.Event | None = None  # recorded on the copy stream after the copy
    late_writes: list[KVWrite] = field(default_factory=list)

    def to_host(self) -> list[int]:
        """The sampled token ids on the host (waits for the copy on CUDA)."""
        if self.copied is not None and self.host is not None:
            self.copied.synchronize()
            return [int(t) for t in self.host.tolist()]
        return [int(t) for t in self.sampled.tolist()]


class DeviceStream:
    """In-order executor of device work (see the module docstring).

    Args:
        device: ``"cpu"`` or a CUDA device.
    """

    def __init__(self, device: torch.device | str = "cpu") -> None:
        self.device = torch.device(device)
        self.is_cuda = self.device.type == "cuda"
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="device")
        self.timing = StepTiming()
        self._events: list[tuple[torch.cuda.Event, torch.cuda.Event]] = []
        self._lock = threading.Lock()
        self.compute: torch.cuda.Stream | None = None
        self.copy: torch.cuda.Stream | None = None
        if self.is_cuda:
            self.compute = cast(Any, torch.cuda).Stream(device=self.device)
            self.copy = cast(Any, torch.cuda).Stream(device=self.device)

    def submit(self, fn: Callable[[], T]) -> Future[T]:
        """Run ``fn`` on the device thread after everything submitted before it."""
        return self._pool.submit(self._in_stream, fn)

    def _in_stream(self, fn: Callable[[], T]) -> T:
        """Run ``fn`` with the compute stream current (CUDA) and inference mode on."""
        with torch.inference_mode():
            if self.compute is None:
                return fn()
            with torch.cuda.device(self.device), torch.cuda.stream(self.compute):
                return fn()

    def timed(self, fn: Callable[[], T]) -> T:
        """Call ``fn`` (on the device thread) and record its span as one step."""
        if self.compute is not None:
            start = cast(Any, torch.cuda).Event(enable_timing=True)
            end = cast(Any, torch.cuda).Event(enable_timing=True)
            start.record(self.compute)
            out = fn()
            end.record(self.compute)
            with self._lock:
                self._events.append((start, end))
            return out
        t0 = time.perf_counter()
        out = fn()
        with self._lock:
            self.timing.spans.append((t0, time.perf_counter()))
        return out

    def copy_to_host(self, sampled: torch.Tensor) -> DeviceResult:
        """Start the device-to-host copy of ``sampled`` (CUDA: copy stream, pinned, event)."""
        if self.compute is None or self.copy is None:
            return DeviceResult(sampled)
        done = cast(Any, torch.cuda).Event()
        done.record(self.compute)
        host = torch.empty(sampled.shape, dtype=sampled.dtype, pin_memory=True)
        copied = cast(Any, torch.cuda).Event()
        with torch.cuda.stream(self.copy):
            self.copy.wait_event(done)
            host.copy_(sampled, non_blocking=True)
            copied.record(self.copy)
        return DeviceResult(sampled, host, copied)

    def finish_timing(self) -> StepTiming:
        """Synchronise and convert CUDA event pairs into spans (CPU: the recorded spans)."""
        self.submit(lambda: None).result()
        if self.is_cuda:
            torch.cuda.synchronize(self.device)
            with self._lock:
                pairs, self._events = self._events, []
            if pairs:
                origin = pairs[0][0]
                for start, end in pairs:
                    t0 = origin.elapsed_time(start) / 1000.0
                    t1 = origin.elapsed_time(end) / 1000.0
                    self.timing.spans.append((t0, t1))
        return self.timing

    def close(self) -> None:
        """Wait for queued work and stop the device thread."""
        self._pool.shutdown(wait=True)


class OutputThread:
    """Copies step outputs to the host on a separate thread, in order, as futures."""

    def __init__(self) -> None:
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="output")

    def submit(self, device_future: Future[DeviceResult]) -> Future[list[int]]:
        """A future of the step's sampled token ids on the host."""
        return self._pool.submit(lambda: device_future.result().to_host())

    def close(self) -> None:
        """Wait for pending copies and stop the thread."""
        self._pool.shutdown(wait=True)


class LateKVWriter:
    """A KV connector whose copy of a step's KV lands when the step's output is processed."""

    def __init__(self, stream: DeviceStream, kv: RecordingKVCache) -> None:
        self.stream = stream
        self.kv = kv
        self.landed = 0

    def land(self, writes: list[KVWrite]) -> None:
        """Queue the late landing of a step's writes behind the steps already submitted."""
        if writes:
            self.landed += 1
            self.stream.submit(lambda: self.kv.land(writes))
