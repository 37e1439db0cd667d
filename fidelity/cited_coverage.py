"""Coverage by cited function: each vLLM function the spec cites, seen running during the events its spec function explains.

A citation (``spec/cites.py``) says spec function *s* models vLLM functions
*T*.  During a ``vllm-engine`` campaign every call is watched
(``sys.setprofile``): per engine event (one engine step, an arrival, an
abort, a reset) the set of cited spec functions the spec ran and the set of
cited vLLM functions vLLM ran.  A target *t* of *s* is **shown** when some
event ran both *s* and *t*: the vLLM code the spec claims to model ran at the
moment the spec ran its model of it.  Citations whose spec function the
engine target never runs (speculative decoding, properties, the worker
model) are listed apart, with the reason.

    python -m asyncspec.fidelity.cited_coverage [--examples N]
"""
from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from types import CodeType, FrameType
from typing import Any

from asyncspec.engine.vllm.vllm_environment import resolve_dotted
from asyncspec.spec.cites import CITATIONS, Citation

from asyncspec.fidelity.cited import SPEC_MODULES


def load_citations() -> dict[str, Citation]:
    """Every citation (they are recorded as the spec modules are imported)."""
    for name in SPEC_MODULES:
        importlib.import_module(f"asyncspec.spec.{name}")
    return CITATIONS


def code_of(obj: Any) -> CodeType | None:
    """The code object that runs when ``obj`` (function, method, property, class) is used."""
    for candidate in (obj, getattr(obj, "__func__", None), getattr(obj, "fget", None)):
        code = getattr(candidate, "__code__", None)
        if isinstance(code, CodeType):
            return code
    if isinstance(obj, type) and "__init__" in obj.__dict__:
        return code_of(obj.__dict__["__init__"])
    return None


def spec_code(citation: Citation) -> CodeType | None:
    module, _, qualname = citation.spec.partition(".")
    return code_of(resolve_dotted(f"asyncspec.spec.{module}.{qualname}"))


@dataclass
class Recorder:
    """Calls of cited code, grouped by event."""

    spec_codes: dict[CodeType, str]
    vllm_codes: dict[CodeType, str]
    events: list[tuple[set[str], set[str]]] = field(default_factory=list)
    paused: bool = False  # inside the spec's enabled(): guards evaluated, nothing applied

    def new_event(self) -> None:
        self.events.append((set(), set()))

    def __call__(self, frame: FrameType, event: str, arg: Any) -> None:
        if event != "call" or not self.events or self.paused:
            return
        code = frame.f_code
        if code in self.spec_codes:
            self.events[-1][0].add(self.spec_codes[code])
        elif code in self.vllm_codes:
            self.events[-1][1].add(self.vllm_codes[code])


def build_recorder() -> Recorder:
    """Code objects of every cited spec function and vLLM target (vLLM imported CPU/offline)."""
    from asyncspec.engine.vllm.vllm_environment import load_vllm

    load_vllm()  # the CPU/offline environment before any vLLM module is imported
    spec_codes: dict[CodeType, str] = {}
    vllm_codes: dict[CodeType, str] = {}
    for citation in load_citations().values():
        code = spec_code(citation)
        if code is not None:
            spec_codes[code] = citation.spec
        for target in citation.targets:
            target_code = code_of(resolve_dotted(target))
            if target_code is not None:
                vllm_codes[target_code] = target
    return Recorder(spec_codes, vllm_codes)


@contextmanager
def watching(recorder: Recorder) -> Iterator[None]:
    """Profile every call, one event per ``EngineRun.apply``."""
    from asyncspec.statemachine_tests.vllm_engine.engine_run import EngineRun
    from asyncspec.statemachine_tests.scheduler.spec_target import SpecTarget

    original, original_enabled = EngineRun.apply, SpecTarget.enabled

    def apply(self: EngineRun, event: Any) -> bool:
        recorder.new_event()
        return original(self, event)

    def enabled(self: SpecTarget) -> Any:
        recorder.paused = True
        try:
            return original_enabled(self)
        finally:
            recorder.paused = False

    EngineRun.apply = apply  # type: ignore[method-assign]
    SpecTarget.enabled = enabled  # type: ignore[method-assign]
    sys.setprofile(recorder)
    try:
        yield
    finally:
        sys.setprofile(None)
        EngineRun.apply = original  # type: ignore[method-assign]
        SpecTarget.enabled = original_enabled  # type: ignore[method-assign]


_SWA = ("sliding-window groups: the vllm target's `hybrid` and `swa` draws only; the engine target's runner "
        "reports no sliding-window layer")
_OFFLOAD = ("the offloading connector: the vllm target's `offload` part only; its worker half cannot run on a CPU "
            "(docs/fuzzing.md, Features tried on a CPU)")
_ALIGN = ("Mamba mode `align` (prefix caching): the vllm target's `mamba` part only; on the engine target align stops "
          "at the runner (get_mamba_state_copy_funcs), and mode `none` neither splits nor caches states")
_TOY = ("the engine target's connector is the toy connector, whose own get_num_new_matched_tokens runs; the base "
        "class's is abstract and Nixl's runs on the vllm target")
_SPEC_KERNELS = ("the CPU runner's greedy rejection sampling is a stand-in for the Triton kernel "
                 "(engine/vllm/runner_stubs.py), unless ASYNCSPEC_TRITON_REJECTION=1")
NOT_PER_EVENT: dict[tuple[str, str], str] = {
    ("blocks.allocate_slots", "vllm.config.vllm.VllmConfig.num_lookahead_tokens"):
        "a configuration read once, when the scheduler is built",
    ("engine.at_call_boundary", "vllm.v1.engine.core.EngineCoreProc.run_busy_loop"):
        "the harness plays EngineCoreProc's busy loop (docs/vllm-engine.md)",
    ("output.takes_acceptance", "vllm.v1.sample.rejection_sampler.rejection_greedy_sample_kernel"): _SPEC_KERNELS,
    ("output.takes_acceptance", "vllm.v1.sample.rejection_sampler.rejection_random_sample_kernel"):
        "random sampling: the engine target samples greedily",
    ("request.initial_counters", "vllm.v1.request.Request.__init__"):
        "the spec declares every request's counters when a case starts, vLLM builds a Request on arrival",
    ("blocks.admission_fits", "vllm.v1.kv_cache_interface.SlidingWindowSpec.max_admission_blocks_per_request"): _SWA,
    ("blocks.remove_skipped_blocks", "vllm.v1.core.single_type_kv_cache_manager.SlidingWindowManager.get_num_skipped_tokens"):
        _SWA,
    ("swa.cut_hit", "vllm.v1.core.kv_cache_coordinator.HybridKVCacheCoordinator.find_longest_cache_hit"): _SWA,
    ("swa.cut_hit", "vllm.v1.core.kv_cache_coordinator.HybridKVCacheCoordinator.verify_and_split_kv_cache_groups"):
        _SWA,
    ("swa.record_hashes", "vllm.v1.core.single_type_kv_cache_manager.SlidingWindowManager.reachable_block_mask"): _SWA,
    ("draft.has_requests", "vllm.distributed.kv_transfer.kv_connector.v1.offloading.scheduler."
     "OffloadingConnectorScheduler.has_pending_push_work"): _OFFLOAD,
    **{("offload." + spec, "vllm.distributed.kv_transfer.kv_connector.v1.offloading." + target): _OFFLOAD
       for spec, target in (
           ("build_connector_meta", "scheduler.OffloadingConnectorScheduler.build_connector_meta"),
           ("build_connector_meta", "scheduler.OffloadingConnectorScheduler._build_store_jobs"),
           ("check_store_reads", "scheduler.OffloadingConnectorScheduler._build_connector_meta"),
           ("check_store_reads", "worker.OffloadingConnectorWorker.handle_preemptions"),
           ("lookup_delayed", "scheduler.OffloadingConnectorScheduler.get_num_new_matched_tokens"),
           ("preempted", "scheduler.OffloadingConnectorScheduler._build_connector_meta"),
           ("request_finished", "scheduler.OffloadingConnectorScheduler.request_finished"),
           ("update_connector_output", "scheduler.OffloadingConnectorScheduler.update_connector_output"),
           ("update_connector_output", "scheduler.OffloadingConnectorScheduler._update_connector_output"))},
    ("mamba.aligned_split", "vllm.v1.core.sched.scheduler.Scheduler._mamba_block_aligned_split"): _ALIGN,
    ("mamba.aligned_split", "vllm.v1.kv_cache_interface.get_mamba_prefill_checkpoint_position"): _ALIGN,
    ("mamba.cut_hit", "vllm.v1.core.kv_cache_coordinator.HybridKVCacheCoordinator.find_longest_cache_hit"): _ALIGN,
    ("mamba.cut_hit", "vllm.v1.core.single_type_kv_cache_manager.MambaManager.find_longest_cache_hit"): _ALIGN,
    ("mamba.record_hashes", "vllm.v1.core.single_type_kv_cache_manager.MambaManager.cache_blocks"): _ALIGN,
    ("connector.external_tokens", "vllm.distributed.kv_transfer.kv_connector.v1.base.KVConnectorBase_V1."
     "get_num_new_matched_tokens"): _TOY,
    ("connector.external_tokens", "vllm.distributed.kv_transfer.kv_connector.v1.nixl.pull_scheduler."
     "NixlPullConnectorScheduler.get_num_new_matched_tokens"): _TOY,
    ("connector.starts_load", "vllm.distributed.kv_transfer.kv_connector.v1.base.KVConnectorBase_V1."
     "get_num_new_matched_tokens"): _TOY,
    ("connector.keeps_blocks", "vllm.distributed.kv_transfer.kv_connector.v1.base.SupportsHMA."
     "request_finished_all_groups"):
        "the toy connector implements request_finished_all_groups itself; SupportsHMA's is the abstract one",
    ("policy.order_queues", "vllm.v1.core.sched.request_queue.PriorityRequestQueue.add_request"):
        "the priority policy: the vllm target's priority draws only; the engine target schedules FCFS",
    ("policy.order_queues", "vllm.v1.core.sched.request_queue.PriorityRequestQueue.__iter__"):
        "the priority policy: the vllm target's priority draws only; the engine target schedules FCFS",
    ("stop.stop_position", "vllm.v1.core.sched.utils.check_stop"):
        "the harness computes a request's stop position when its case is built (statemachine_tests/scheduler/"
        "stop_obs.py), vLLM checks each output token",
    ("stop.stop_position", "vllm.v1.core.sched.utils.check_sequence_repetition"):
        "the harness computes a request's stop position when its case is built (stop_obs.py); vLLM checks "
        "repetition on each output token",
    ("engine.stream_input", "vllm.v1.core.sched.scheduler.Scheduler.finish_requests"):
        "the engine target ends a stream as AsyncLLM does, with a final non-resumable request "
        "(Scheduler.add_request); finish_requests is the abort path the vllm target drives",
    ("output.shift_in_flight", "vllm.v1.worker.gpu.input_batch.post_update"):
        "Model Runner V2's: its parts run in a process of their own (cli/mrv2_reexec.py), outside this recorder",
}
"""(spec function, vLLM target) pairs the engine target cannot show per event, with the reason."""


@dataclass(frozen=True)
class CitedRow:
    """One citation's coverage: events where the spec function ran, and per target how many also ran it."""

    spec: str
    spec_events: int
    targets: tuple[tuple[str, int], ...]

    @property
    def shown(self) -> bool:
        """Every target ran in an event where the spec function ran (pairs in NOT_PER_EVENT aside)."""
        return self.spec_events > 0 and not self.unshown

    @property
    def unshown(self) -> list[str]:
        return [t for t, n in self.targets if n == 0 and (self.spec, t) not in NOT_PER_EVENT]


def coverage(recorder: Recorder) -> list[CitedRow]:
    rows = []
    for citation in sorted(load_citations().values()):
        ran = [vllm for spec, vllm in recorder.events if citation.spec in spec]
        rows.append(CitedRow(citation.spec, len(ran),
                             tuple((t, sum(1 for vllm in ran if t in vllm)) for t in citation.targets)))
    return rows


def run(examples: int, seed: int = 0) -> list[CitedRow]:
    """Every in-process part of the ``vllm-engine`` default campaign (``engine_parts.ENGINE_PARTS`` on the V1
    runner: the default cases, drafts with grammars, pauses, streaming input, KV-load recovery, encoder
    inputs, Mamba groups, the synchronous scheduler), ``examples`` cases each at most, under the recorder;
    the coverage table.  A feature's spec functions run (as no-ops) in every event, its vLLM functions only
    where the feature is on, so each feature's part must be among the events."""
    from asyncspec.statemachine_tests.vllm_engine.engine_campaign import run_fixed
    from asyncspec.statemachine_tests.vllm_engine.engine_parts import ENGINE_PARTS

    recorder = build_recorder()
    with watching(recorder):
        for part in ENGINE_PARTS:
            if part.runner != "v1":  # MRV2's parts run in a process of their own; DP's cases are not EngineCases
                continue
            summary = run_fixed(min(examples, part.examples), seed, depths=part.profile.depths, profile=part.profile)
            if summary["divergences"]:
                raise RuntimeError(f"the {part.name} part diverged: {summary['first_divergence']}")
    return coverage(recorder)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="coverage by cited function (vllm-engine target)")
    parser.add_argument("--examples", type=int, default=40)
    args = parser.parse_args(argv)
    rows = run(args.examples)
    for row in rows:
        mark = "shown" if row.shown else ("not run by the spec" if not row.spec_events else "NOT SHOWN")
        mark += "*" if any((row.spec, t) in NOT_PER_EVENT for t, _ in row.targets) else ""
        print(f"{mark:20} {row.spec:45} {row.spec_events:6}  " +
              ", ".join(f"{t.removeprefix('vllm.')}={n}" for t, n in row.targets))
    shown = sum(r.shown for r in rows)
    ran = sum(1 for r in rows if r.spec_events)
    print(f"{shown} of {ran} citations whose spec function ran are shown; {len(rows) - ran} not run by the spec "
          "(* a target the engine target cannot show per event: fidelity/cited_coverage.NOT_PER_EVENT)")
    return 0 if shown == ran else 1


if __name__ == "__main__":
    sys.exit(main())
