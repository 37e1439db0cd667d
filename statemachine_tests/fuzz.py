"""The differential fuzz runner: Hypothesis drives a workload and events through the
spec and a target, stops at the first difference, shrinks it, saves a replay file.

One Hypothesis example is a ``Workload`` (``workloads()``) and a list of
*choices* (integers 0..999).  The run starts with ``add_request r0``; each
choice then picks one of the events the spec enables (``pick``: mostly the
engine loop, sometimes an arrival, an abort or a ``reset_prefix_cache``);
after the choices the engine is drained (arrivals and the engine loop only).
Both sides are compared after every event (``harness.compare``).  A
difference raises ``Divergence``; Hypothesis shrinks the example (fewer
requests, smaller settings, fewer and simpler events) and the minimal run is
printed as a side-by-side table and saved as a replay file that
``replay(path, target)`` re-executes.

Entry points for the CLI: ``fuzz_main`` and ``replay_vllm``.
"""
from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, Phase, given, seed, settings
from hypothesis import strategies as st
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from asyncspec.spec import events as ev

from .harness import (
    ABORT,
    ADD_REQUEST,
    DELIVER,
    RESET_PREFIX_CACHE,
    SCHEDULE,
    Event,
    RequestSpec,
    Row,
    RunResult,
    Workload,
    first_events,
    parse_event,
    run_one,
    workload_problem,
)
from .targets import SpecTarget, TargetUnavailable, load_target, make_target

EXIT_OK, EXIT_DIVERGENCE, EXIT_USAGE = 0, 1, 2
REPLAY_VERSION = 1
MAX_CHOICES = 120  # events picked by Hypothesis per example
MAX_DRAIN = 600  # engine events after the choices (a run ends when nothing is enabled)

COVERAGE: dict[str, tuple[str, ...]] = {
    "preemption_with_output_in_flight": (ev.PREEMPT_IN_FLIGHT_DELIVER, ev.PREEMPT_IN_FLIGHT_DROP),
    "stale_delivery": (ev.STALE_DELIVERY,),
    "stale_drop": (ev.STALE_DROP,),
    "deferred_free": (ev.DEFERRED_FREE,),
    "wasted_step": (ev.WASTED_STEP,),
    "max_tokens_guard": (ev.MAX_TOKENS_GUARD,),
    "chunked_prefill": (ev.CHUNKED_PREFILL,),
    "abort_in_flight": (ev.ABORT_IN_FLIGHT,),
}
"""The reported coverage categories and the spec events (``spec/events.py``) each counts."""


# --------------------------------------------------------------------------- profiles


@dataclass(frozen=True)
class Profile:
    """What the fuzzer may draw: every mode a category of coverage needs."""

    depths: tuple[int, ...] = (2, 1)
    block_sizes: tuple[int, ...] = (4, 16)
    num_blocks: tuple[int, ...] = (4, 6, 8, 12, 32)
    token_budgets: tuple[int, ...] = (16, 8, 32, 64)
    max_num_seqs: tuple[int, ...] = (4, 2)
    max_requests: int = 6
    max_output: int = 10
    chunked_prefill: tuple[bool, ...] = (True, False)
    prefix_caching: tuple[bool, ...] = (False,)
    defer_block_free: tuple[bool, ...] = (False, True)
    stale_modes: tuple[str, ...] = ("deliver", "drop")
    loops: tuple[str, ...] = ("exact", "free")
    aborts: tuple[bool, ...] = (True, False)
    resets: tuple[int, ...] = (0, 1, 2)
    reset_with_deferral: bool = False  # see docs/findings_vllm.md, finding 1

    def enabled_categories(self) -> list[str]:
        """The coverage categories this profile can reach (so a zero there is vacuous)."""
        cats = ["chunked_prefill"] if True in self.chunked_prefill else []
        if 2 in self.depths:
            cats += ["wasted_step", "max_tokens_guard"]
        if True in self.aborts:
            cats.append("abort_in_flight")
        if True in self.defer_block_free:
            cats.append("deferred_free")
        stale_possible = False in self.defer_block_free or any(self.resets)
        if stale_possible and 2 in self.depths:
            cats.append("preemption_with_output_in_flight")
            if "deliver" in self.stale_modes:
                cats.append("stale_delivery")
            if "drop" in self.stale_modes or any(self.resets):
                cats.append("stale_drop")
        return [c for c in COVERAGE if c in cats]


DEFAULT_PROFILE = Profile()
PREFIX_CACHING_PROFILE = Profile(prefix_caching=(False, True))
"""Prefix caching on as well: use once the spec models hits (``EngineState.block_hashes``)."""


@st.composite
def workloads(draw: st.DrawFn, profile: Profile = DEFAULT_PROFILE) -> Workload:
    """A workload the spec and vLLM can both take (see ``workload_problem``)."""
    block_size = draw(st.sampled_from(profile.block_sizes))
    num_blocks = draw(st.sampled_from(profile.num_blocks))
    budget = draw(st.sampled_from(profile.token_budgets))
    chunked = draw(st.sampled_from(profile.chunked_prefill))
    defer = draw(st.sampled_from(profile.defer_block_free))
    capacity = num_blocks * block_size
    if not chunked:
        capacity = min(capacity, budget)
    n = draw(st.integers(1, profile.max_requests))
    requests = tuple(draw(_request(capacity, profile.max_output)) for _ in range(n))
    resets = draw(st.sampled_from(profile.resets))
    if defer and not profile.reset_with_deferral:
        resets = 0
    return Workload(
        requests=requests,
        depth=draw(st.sampled_from(profile.depths)),
        block_size=block_size,
        num_blocks=num_blocks,
        token_budget=budget,
        max_num_seqs=draw(st.sampled_from(profile.max_num_seqs)),
        chunked_prefill=chunked,
        prefix_caching=draw(st.sampled_from(profile.prefix_caching)),
        defer_block_free=defer,
        stale_mode=draw(st.sampled_from(profile.stale_modes)),  # type: ignore[arg-type]
        loop=draw(st.sampled_from(profile.loops)),  # type: ignore[arg-type]
        aborts=draw(st.sampled_from(profile.aborts)),
        reset_prefix_cache=resets,
    )


def _request(capacity: int, max_output: int) -> st.SearchStrategy[RequestSpec]:
    """P + M <= capacity (the request fits the pool alone, and the budget without chunking)."""

    @st.composite
    def build(draw: st.DrawFn) -> RequestSpec:
        max_tokens = draw(st.integers(1, min(max_output, capacity - 1)))
        prompt = draw(st.integers(1, capacity - max_tokens))
        eos = draw(st.integers(0, max_tokens))
        return RequestSpec(prompt, max_tokens, eos)

    return build()


CHOICES = st.lists(st.integers(0, 999), max_size=MAX_CHOICES)


# --------------------------------------------------------------------------- one run


def pick(enabled: Sequence[Event], choice: int) -> Event:
    """The event ``choice`` selects; 0 (what Hypothesis shrinks to) is the engine loop.

    0-849: the engine loop (schedule/deliver; in the free loop the choice picks
    one), 850-939: the next arrival, 940-979: an abort, 980-999: a
    ``reset_prefix_cache``.  A group with nothing enabled falls back to the
    first non-empty one in that order.
    """
    groups = (
        [e for e in enabled if e.kind in (SCHEDULE, DELIVER)],
        [e for e in enabled if e.kind == ADD_REQUEST],
        [e for e in enabled if e.kind == ABORT],
        [e for e in enabled if e.kind == RESET_PREFIX_CACHE],
    )
    index = 0 if choice < 850 else 1 if choice < 940 else 2 if choice < 980 else 3
    group = groups[index] or next(g for g in groups if g)
    return group[choice % len(group)]


def drain_pick(enabled: Sequence[Event]) -> Event | None:
    """After the choices: every arrival, then the engine loop, until nothing is enabled."""
    for kind in (ADD_REQUEST, SCHEDULE, DELIVER):
        for e in enabled:
            if e.kind == kind:
                return e
    return None


@dataclass
class Stats:
    """What a fuzz campaign did."""

    events: int = 0
    examples: int = 0
    coverage: dict[str, int] = field(default_factory=dict)  # spec event -> transitions
    timing: dict[str, float] = field(default_factory=dict)


def drive(w: Workload, target_name: str, choices: Sequence[int], stats: Stats) -> RunResult:
    """One example: build both sides, apply r0's arrival, the choices, then drain."""
    oracle = SpecTarget(w)
    t0 = time.perf_counter()
    target = make_target(target_name, w)
    stats.timing["target_build"] = stats.timing.get("target_build", 0.0) + time.perf_counter() - t0
    result = RunResult(w, [], stats.coverage)
    plan: list[Callable[[], Event | None]] = [lambda e=e: e for e in first_events(w)]
    plan += [lambda c=c: _pick_enabled(oracle.enabled(), c) for c in choices]
    plan += [lambda: drain_pick(oracle.enabled())] * MAX_DRAIN
    for next_event in plan:
        event = next_event()
        if event is None:
            break
        stats.events += 1
        if not run_one(w, oracle, target, event, result, stats.timing):
            break
    return result


def _pick_enabled(enabled: Sequence[Event], choice: int) -> Event | None:
    return pick(enabled, choice) if enabled else None


class Divergence(AssertionError):
    """The target and the spec differ; carries the run up to the difference."""

    def __init__(self, result: RunResult) -> None:
        row = result.rows[-1]
        first = row.differences[0]
        super().__init__(
            f"event {row.index} '{row.event}': {first.field}: spec={first.expected!r} "
            f"target={first.actual!r}"
        )
        self.result = result


# --------------------------------------------------------------------------- campaign


@dataclass
class Campaign:
    """A time-bounded fuzz of one target; ``found`` is the minimal divergence, if any."""

    target: str
    seconds: float
    seed: int
    profile: Profile = DEFAULT_PROFILE
    batch: int = 20
    max_batches: int | None = None  # a fixed amount of work (deterministic), else time-bounded
    stats: Stats = field(default_factory=Stats)
    found: RunResult | None = None

    def run(self) -> RunResult | None:
        """Fuzz in seeded batches of ``batch`` examples until the time (or ``max_batches``)
        is used up or a divergence is found."""
        deadline = time.monotonic() + self.seconds
        index = 0
        while self.found is None and self._more(index, deadline):
            self._batch(self.seed * 1_000_003 + index, deadline)
            index += 1
        return self.found

    def _more(self, index: int, deadline: float) -> bool:
        if self.max_batches is not None:
            return index < self.max_batches
        return time.monotonic() < deadline

    def _batch(self, batch_seed: int, deadline: float) -> None:
        stats, target = self.stats, self.target
        last_failure: list[RunResult] = []

        @seed(batch_seed)
        @settings(max_examples=self.batch, deadline=None, database=None, derandomize=False,
                  phases=(Phase.generate, Phase.shrink), suppress_health_check=list(HealthCheck),
                  report_multiple_bugs=False)
        @given(workloads(self.profile), CHOICES)
        def example(w: Workload, choices: list[int]) -> None:
            if self.max_batches is None and time.monotonic() >= deadline and not last_failure:
                return
            stats.examples += 1
            result = drive(w, target, choices, stats)
            if result.diverged:
                last_failure.append(result)
                raise Divergence(result)

        try:
            example()
        except Divergence as exc:
            self.found = exc.result


def coverage_counts(spec_events: dict[str, int]) -> dict[str, int]:
    """The reported categories from the spec-event counts."""
    return {cat: sum(spec_events.get(e, 0) for e in names) for cat, names in COVERAGE.items()}


# --------------------------------------------------------------------------- reports


_WIDTH = 160  # wide enough for four events side by side, also in CI logs
SHOWN_EVENTS = 4  # events in the side-by-side table: the diverging one and those before it
_REQUEST_FIELDS = ("status", "num_tokens", "num_computed_tokens", "num_output_placeholders",
                   "num_in_flight_tokens", "num_stale_output_tokens", "drop_stale_output")


def table_fields(row: Row) -> list[str]:
    """The differing fields first, then the counters of the requests they name."""
    fields = [d.field for d in row.differences]
    reqs = sorted({f.split(".")[0] for f in fields if f.startswith("r") and "." in f})
    for r in reqs:
        fields += [f"{r}.{k}" for k in _REQUEST_FIELDS]
    fields += ["scheduled", "delivered", "preempted", "num_free_blocks"]
    return list(dict.fromkeys(fields))


_SHORT = {
    "num_tokens": "N", "num_output_tokens": "O", "num_computed_tokens": "C",
    "num_output_placeholders": "H", "num_in_flight_tokens": "F", "num_stale_output_tokens": "X",
    "drop_stale_output": "D", "last_sched_seq": "L", "is_prefill_chunk": "chunk",
    "block_table": "blocks", "output_tokens": "tokens",
}


def short_name(name: str) -> str:
    """``r1.num_computed_tokens`` -> ``r1.C`` (the letters of docs/spec.md)."""
    head, _, tail = name.partition(".")
    return f"{head}.{_SHORT.get(tail, tail)}" if tail else name


def divergence_table(result: RunResult, target: str) -> Table:
    """Spec vs target, field by field, for the diverging event and the ones before it.

    Rows are fields (request counters with the letters of docs/spec.md), two
    columns per event (spec, target); a cell where they differ is red.
    """
    rows = result.rows[-SHOWN_EVENTS:]
    fields = table_fields(result.rows[-1])
    table = Table(title=f"first divergence: spec vs {target}", header_style="bold")
    table.add_column("field", no_wrap=True)
    for row in rows:
        table.add_column(f"#{row.index} {row.event}\nspec", overflow="fold")
        table.add_column(f"\n{target}", overflow="fold")
    for name in fields:
        cells: list[str] = []
        for row in rows:
            e, a = row.expected.flat().get(name, "-"), row.actual.flat().get(name, "-")
            style = "bold red" if e != a else ""
            cells += [_cell(e, style), _cell(a, style)]
        table.add_row(short_name(name), *cells)
    return table


def _cell(value: Any, style: str) -> str:
    text = escape(str(value))
    return f"[{style}]{text}[/{style}]" if style else text


def event_list(result: RunResult) -> str:
    """``1 add_request r0, 2 schedule, ...`` on one line."""
    return ", ".join(f"{r.index} {r.event}" for r in result.rows)


def print_divergence(result: RunResult, target: str, console: Console) -> None:
    """The workload, the events, the differences and the side-by-side table."""
    row = result.rows[-1]
    console.print(f"[bold red]DIVERGENCE[/bold red] at event {row.index} '{row.event}' "
                  f"(spec vs {target})")
    console.print(f"workload: {escape(json.dumps(result.workload.to_json()))}")
    console.print(f"events: {escape(event_list(result))}")
    for d in row.differences:
        console.print(f"  {d.field}: spec={escape(repr(d.expected))} {target}={escape(repr(d.actual))}")
    console.print(divergence_table(result, target))


def replay_json(result: RunResult, target: str) -> dict[str, Any]:
    """The replay file: workload and events (JSON), plus the differences seen."""
    row = result.rows[-1]
    return {
        "asyncspec_fuzz_replay": REPLAY_VERSION,
        "target": target,
        "workload": result.workload.to_json(),
        "events": [str(r.event) for r in result.rows],
        "divergence": {
            "event": row.index,
            "differences": [{"field": d.field, "spec": _jsonable(d.expected), target: _jsonable(d.actual)}
                            for d in row.differences],
        },
    }


def _jsonable(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str))


def save_replay(result: RunResult, target: str, path: Path) -> None:
    from asyncspec.checker.trace import write_atomically

    write_atomically(path, json.dumps(replay_json(result, target), indent=2) + "\n")


class ReplayError(ValueError):
    """A replay file that cannot be read (one line)."""


def load_replay(path: Path) -> tuple[Workload, list[Event]]:
    """The workload and events of a replay file; ``ReplayError`` if unusable."""
    try:
        data = json.loads(path.read_text())
    except OSError as exc:
        raise ReplayError(f"cannot read {path}: {exc.strerror}") from exc
    except json.JSONDecodeError as exc:
        raise ReplayError(f"{path} is not valid JSON (line {exc.lineno})") from exc
    if not isinstance(data, dict) or data.get("asyncspec_fuzz_replay") != REPLAY_VERSION:
        raise ReplayError(f"{path} is not an asyncspec fuzz replay file (version {REPLAY_VERSION})")
    try:
        w = Workload.from_json(data["workload"])
        events = [parse_event(str(e)) for e in data["events"]]
    except (KeyError, TypeError, ValueError) as exc:
        raise ReplayError(f"corrupt replay file {path}: {exc}") from exc
    problem = workload_problem(w)
    if problem:
        raise ReplayError(f"corrupt replay file {path}: {problem}")
    return w, events


# --------------------------------------------------------------------------- entry points


def fuzz_main(target: str, seconds: float, seed: int, json_out: bool, allow_version: bool,
              out_dir: Path, profile: Profile = DEFAULT_PROFILE) -> int:
    """``asyncspec fuzz``: 0 no divergence, 1 divergence (replay file written), 2 usage/load."""
    err = Console(stderr=True)
    if seconds <= 0:
        err.print("fuzz: --seconds must be > 0")
        return EXIT_USAGE
    try:
        load_target(target, allow_version)
    except TargetUnavailable as exc:
        err.print(f"fuzz: {escape(str(exc))}")
        return EXIT_USAGE
    campaign = Campaign(target, seconds, seed, profile)
    start = time.monotonic()
    found = campaign.run()
    elapsed = time.monotonic() - start
    replay_path = out_dir / f"fuzz-{target}-seed{seed}.json" if found else None
    if found and replay_path:
        save_replay(found, target, replay_path)
    summary = _summary(campaign, found, elapsed, replay_path)
    out = Console(stderr=json_out, highlight=False, width=_WIDTH)
    if found:
        print_divergence(found, target, out)
        out.print(f"replay with: asyncspec replay {replay_path} --target {target}")
    if json_out:
        sys.stdout.write(json.dumps(summary) + "\n")
    else:
        _print_summary(summary, out)
    return EXIT_DIVERGENCE if found else EXIT_OK


def _summary(c: Campaign, found: RunResult | None, elapsed: float, replay_path: Path | None) -> dict[str, Any]:
    coverage = coverage_counts(c.stats.coverage)
    zero = [k for k in c.profile.enabled_categories() if coverage[k] == 0]
    return {
        "target": c.target,
        "seed": c.seed,
        "seconds": round(elapsed, 2),
        "events": c.stats.events,
        "examples": c.stats.examples,
        "events_per_s": round(c.stats.events / elapsed, 1) if elapsed > 0 else 0.0,
        "divergences": 1 if found else 0,
        "coverage": coverage,
        "zero_coverage": zero,
        "spec_events": dict(sorted(c.stats.coverage.items())),
        "replay_file": str(replay_path) if replay_path else None,
    }


def _print_summary(s: dict[str, Any], out: Console) -> None:
    out.print(f"fuzz {s['target']}: {s['examples']} examples, {s['events']} events in "
              f"{s['seconds']} s ({s['events_per_s']} events/s), {s['divergences']} divergences")
    for name, count in s["coverage"].items():
        out.print(f"  {name:34} {count}")
    if s["zero_coverage"]:
        out.print(f"[bold yellow]VACUOUS[/bold yellow]: no coverage of {', '.join(s['zero_coverage'])} "
                  "although the configuration enables it; this run is not a pass for those")


def replay(trace_path: Path, target: str, allow_version: bool = False, console: Console | None = None) -> int:
    """Re-run a replay file on the spec and ``target``: 1 if it still diverges, 0 if not, 2 if unusable."""
    out = console or Console(highlight=False, width=_WIDTH)
    try:
        w, events = load_replay(trace_path)
        load_target(target, allow_version)
    except (ReplayError, TargetUnavailable) as exc:
        Console(stderr=True).print(f"replay: {escape(str(exc))}")
        return EXIT_USAGE
    oracle, tgt = SpecTarget(w), make_target(target, w)
    result = RunResult(w, [], {})
    try:
        for event in events:
            if not run_one(w, oracle, tgt, event, result):
                break
    except ValueError as exc:
        Console(stderr=True).print(f"replay: {escape(str(exc))}")
        return EXIT_USAGE
    if result.diverged:
        print_divergence(result, target, out)
        return EXIT_DIVERGENCE
    out.print(f"replay: {len(result.rows)} events, spec and {target} agree after every event")
    return EXIT_OK


def replay_vllm(trace_path: Path) -> int:
    """``asyncspec replay FILE --target vllm``."""
    return replay(trace_path, "vllm")
