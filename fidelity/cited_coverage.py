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


NOT_PER_EVENT: dict[tuple[str, str], str] = {
    ("blocks.allocate_slots", "vllm.config.vllm.VllmConfig.num_lookahead_tokens"):
        "a configuration read once, when the scheduler is built",
    ("engine.at_call_boundary", "vllm.v1.engine.core.EngineCoreProc.run_busy_loop"):
        "the harness plays EngineCoreProc's busy loop (docs/vllm-engine.md)",
    ("output.takes_acceptance", "vllm.v1.sample.rejection_sampler.rejection_greedy_sample_kernel"):
        "speculative decoding: not on the engine target (the scheduler target fabricates acceptance)",
    ("output.takes_acceptance", "vllm.v1.sample.rejection_sampler.rejection_random_sample_kernel"):
        "speculative decoding: not on the engine target (the scheduler target fabricates acceptance)",
    ("request.deliver_tokens", "vllm.v1.core.sched.scheduler.Scheduler.update_draft_token_ids"):
        "speculative decoding: not on the engine target",
    ("request.initial_counters", "vllm.v1.request.Request.__init__"):
        "the spec declares every request's counters when a case starts, vLLM builds a Request on arrival",
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
    """A fixed ``vllm-engine`` campaign under the recorder; the coverage table."""
    from asyncspec.statemachine_tests.vllm_engine.engine_campaign import run_fixed

    recorder = build_recorder()
    with watching(recorder):
        summary = run_fixed(examples, seed)
    if summary["divergences"]:
        raise RuntimeError(f"the campaign diverged: {summary['first_divergence']}")
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
