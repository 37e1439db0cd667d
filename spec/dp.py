"""Data parallelism's waves: the lockstep loop of ``DPEngineCoreProc`` over a few ranks.

Each DP rank runs its own engine loop (``DPEngineCoreProc.run_busy_loop``, vllm/v1/engine/core.py);
the ranks step their forward passes in lockstep so that an MoE model's collectives line up.  The
spec abstracts a rank's scheduler to the model steps its requests still need (``work``): a rank
with work runs a real step (one step less), a running rank without work runs a dummy batch
(``execute_dummy_batch``), an idle rank (``engines_running`` false, no work) waits on its input
queue.  Every rank counts its passes (``step_counter``); at step 1 and every ``dp_sync_interval``-th
step it calls the all-reduce of ``_has_global_unfinished_reqs`` (``ParallelConfig.sync_dp_state``:
the OR of every rank's "has unfinished requests"), where it waits until every rank has called it.
A sync that finds no rank with work ends the wave on every rank: ``wave_complete`` to the
coordinator (rank 0), ``current_wave += 1``, ``step_counter = 0``.  A request reaching an idle rank
(``DPEngineCoreProc.add_request``) wakes it and sends ``start_wave`` to the coordinator, which,
for a wave newer than its own or its own while it believes the engines idle, broadcasts it as
``START_DP_WAVE(wave, excluded)`` (``DPCoordinatorProc.process_input_socket``,
vllm/v1/engine/coordinator.py); ``_handle_client_request`` wakes an idle engine with it when the
wave is not older than its own and it is not the excluded one.  A rank leaves the all-reduce on its
own (``end_iteration``): rank 0's ``wave_complete`` reaches the coordinator then, and a rank 0 that
was idle when the iteration began and is running at its end tells the coordinator ``start_wave``.

Not modelled: the two-phase pause (``pending_pause``, the pause consensus of ``sync_dp_state``),
prefill throttling (``prefill_schedule_interval``), elastic EP; the coordinator reads an engine's
output at once, its broadcast is in transit until a rank reads it (the inbox; the excluded engine,
which ignores it, gets none).

Example:
    >>> cfg = DPConfig(name="one", requests=((0, 1),), dp_sync_interval=2)
    >>> s = initial_state(cfg)
    >>> [str(t.action) for t in next_states(cfg, s)]
    ['add_request r0']
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from asyncspec.spec.cites import models

CORE = "vllm.v1.engine.core.DPEngineCoreProc"
COORDINATOR = "vllm.v1.engine.coordinator.DPCoordinatorProc.process_input_socket"

MAX_RANKS = 4
"""Ranks of a checked model: each one multiplies the states to explore."""

# ---- events (witnesses)
STEP_EXECUTED = "dp_step_executed"
DUMMY_BATCH = "dp_dummy_batch"
SYNC_SKIPPED = "dp_sync_skipped"
DUMMY_KEEPS_WAVE = "dp_dummy_keeps_wave"  # a sync where one rank had no work and the wave went on
WAVE_COMPLETE = "dp_wave_complete"
START_WAVE_SENT = "dp_start_wave_sent"
START_WAVE_WAKES = "dp_start_wave_wakes"
START_WAVE_STALE = "dp_start_wave_stale"
START_WAVE_RUNNING = "dp_start_wave_running"  # a current START_DP_WAVE to an engine already running
REQUEST_WAVE_BUMPS = "dp_request_wave_bumps"
REQUEST_TO_RUNNING = "dp_request_to_running"
START_WAVE_DEDUPED = "dp_start_wave_deduped"  # the coordinator already runs that wave: no broadcast
WAVE_COMPLETE_LATE = "dp_wave_complete_late"  # rank 0's wave_complete after a newer wave started
DP_EVENTS = (STEP_EXECUTED, DUMMY_BATCH, SYNC_SKIPPED, DUMMY_KEEPS_WAVE, WAVE_COMPLETE, START_WAVE_SENT,
             START_WAVE_WAKES, START_WAVE_STALE, START_WAVE_RUNNING, REQUEST_WAVE_BUMPS, REQUEST_TO_RUNNING,
             START_WAVE_DEDUPED, WAVE_COMPLETE_LATE)

# ---- actions
ADD_REQUEST = "add_request"
START_DP_WAVE = "start_dp_wave"
STEP = "step"
ALL_REDUCE = "all_reduce"
END_ITERATION = "end_iteration"
DP_ACTIONS = (ADD_REQUEST, START_DP_WAVE, STEP, ALL_REDUCE, END_ITERATION)


class DPConfigError(ValueError):
    """A DP config that cannot be checked; the message is one line."""


@dataclass(frozen=True)
class DPConfig:
    """Constants of one DP model: the ranks, the sync interval, the requests in arrival order."""

    name: str
    requests: tuple[tuple[int, int], ...]  # (rank it is sent to, model steps it needs), arriving in order
    dp_size: int = 2  # ParallelConfig.data_parallel_size
    dp_sync_interval: int = 16  # ParallelConfig.dp_sync_interval (vLLM's default)
    description: str = ""

    def __post_init__(self) -> None:
        if not 2 <= self.dp_size <= MAX_RANKS:
            raise DPConfigError(f"{self.name}: dp_size must be 2..{MAX_RANKS} (got {self.dp_size})")
        if not 1 <= self.dp_sync_interval <= 64:
            raise DPConfigError(f"{self.name}: dp_sync_interval must be 1..64 (got {self.dp_sync_interval})")
        if not 1 <= len(self.requests) <= 6:
            raise DPConfigError(f"{self.name}: give 1..6 requests (got {len(self.requests)})")
        for i, (rank, steps) in enumerate(self.requests):
            if not 0 <= rank < self.dp_size or not 1 <= steps <= 8:
                raise DPConfigError(f"{self.name}: request {i} must be [rank 0..{self.dp_size - 1}, steps 1..8] "
                                    f"(got [{rank}, {steps}])")


class Rank(NamedTuple):
    """One DP rank's engine: what ``DPEngineCoreProc`` keeps, its scheduler abstracted to ``work``."""

    work: int = 0  # model steps its unfinished requests still need (Scheduler.has_unfinished_requests: > 0)
    running: bool = False  # engines_running
    at_sync: bool = False  # waiting in the all-reduce of _has_global_unfinished_reqs
    unfinished_at_sync: bool = False  # what it passed to the all-reduce (local_unfinished_reqs)
    after_sync: str = ""  # "run" / "stop": what the all-reduce returned, the iteration not yet ended
    woken: bool = False  # idle when this iteration began (was_running false), running since
    step_counter: int = 0
    current_wave: int = 0
    inbox: tuple[tuple[int, int], ...] = ()  # START_DP_WAVE (wave, excluded engine index) in transit
    last_batch: str = ""  # "step", "dummy" or "" (none since the last request or wave end)


class DPState(NamedTuple):
    """The ranks, the requests sent so far, the coordinator's wave (what the front end stamps)."""

    ranks: tuple[Rank, ...]
    sent: int = 0  # requests added so far (they arrive in config order)
    coordinator_wave: int = 0  # DPCoordinatorProc's current_wave (the front end stamps requests with it)
    coordinator_running: bool = False  # DPCoordinatorProc's engines_running
    waves_completed: int = 0


class DPAction(NamedTuple):
    """An action label: its name and the rank (``step``, ``start_dp_wave``) or request it is for."""

    name: str
    arg: int | None = None

    def __str__(self) -> str:
        if self.arg is None:
            return self.name
        return f"{self.name} {'r' if self.name == ADD_REQUEST else 'rank'}{self.arg}"


def parse_dp_action(text: str) -> DPAction:
    """The ``DPAction`` ``str`` wrote; ``ValueError`` for anything else."""
    name, _, arg = text.partition(" ")
    if name not in DP_ACTIONS:
        raise ValueError(f"unknown DP action {text!r}")
    if not arg:
        return DPAction(name)
    prefix = "r" if name == ADD_REQUEST else "rank"
    if not arg.startswith(prefix) or not arg[len(prefix):].isdigit():
        raise ValueError(f"bad DP action argument {text!r}")
    return DPAction(name, int(arg[len(prefix):]))


class DPTransition(NamedTuple):
    """One edge: the action, the state it leads to, the events it exercised."""

    action: DPAction
    state: DPState
    events: frozenset[str]


def initial_state(cfg: DPConfig) -> DPState:
    """Every rank idle at wave 0, no request sent."""
    return DPState(tuple(Rank() for _ in range(cfg.dp_size)))


# ---------------------------------------------------------------- the engine's functions


@models(f"{CORE}._has_global_unfinished_reqs")
def is_sync_step(step_counter: int, dp_sync_interval: int) -> bool:
    """Whether ``_has_global_unfinished_reqs`` all-reduces at this (already incremented) count:
    step 1, then every ``dp_sync_interval``-th step."""
    return step_counter == 1 or step_counter % dp_sync_interval == 0


@models("vllm.config.parallel.ParallelConfig.sync_dp_state")
def global_unfinished(contributions: tuple[bool, ...]) -> bool:
    """``sync_dp_state``'s first answer: a SUM all-reduce greater than 0, the OR of every rank's."""
    return any(contributions)


@models(f"{CORE}._handle_client_request")
def accepts_start_wave(rank: Rank, wave: int, excluded: int, engine_index: int) -> bool:
    """``_handle_client_request(START_DP_WAVE)``: the wave is taken when this engine is not the
    excluded one and the wave is not older than its own."""
    return excluded != engine_index and wave >= rank.current_wave


@models(f"{CORE}.add_request", "vllm.v1.engine.core.EngineCore.add_request")
def add_request(rank: Rank, steps: int, request_wave: int) -> tuple[Rank, bool, frozenset[str]]:
    """``DPEngineCoreProc.add_request`` (with a coordinator): the request's work, a newer wave taken,
    an idle engine woken.  Returns (rank, whether it sends ``start_wave`` to the coordinator, events)."""
    events: set[str] = set()
    wave = rank.current_wave
    if request_wave > wave:
        wave = request_wave
        events.add(REQUEST_WAVE_BUMPS)
    wakes = not rank.running
    if not wakes:
        events.add(REQUEST_TO_RUNNING)
    return rank._replace(work=rank.work + steps, current_wave=wave, running=True, last_batch="",
                         woken=rank.woken or wakes), wakes, frozenset(events)


@models(f"{CORE}._handle_client_request")
def handle_start_wave(rank: Rank, engine_index: int) -> tuple[Rank, frozenset[str]]:
    """The oldest ``START_DP_WAVE`` of ``rank``'s inbox, read by ``_handle_client_request``."""
    (wave, excluded), rest = rank.inbox[0], rank.inbox[1:]
    rank = rank._replace(inbox=rest)
    if not accepts_start_wave(rank, wave, excluded, engine_index):
        return rank, frozenset({START_WAVE_STALE})
    event = START_WAVE_RUNNING if rank.running else START_WAVE_WAKES
    return rank._replace(current_wave=wave, running=True, woken=rank.woken or not rank.running), frozenset({event})


@models(f"{CORE}.run_busy_loop", f"{CORE}._has_global_unfinished_reqs", "vllm.v1.engine.core.EngineCore.execute_dummy_batch")
def step(rank: Rank, dp_sync_interval: int) -> tuple[Rank, frozenset[str]]:
    """One pass of ``run_busy_loop`` on a running rank: a real step where it has work
    (``_process_engine_step``), else ``execute_dummy_batch``; then ``_has_global_unfinished_reqs``
    counts the pass and, at a sync step, enters the all-reduce with ``local_unfinished_reqs``."""
    executed = rank.work > 0
    work = rank.work - 1 if executed else rank.work
    counter = rank.step_counter + 1
    events = {STEP_EXECUTED if executed else DUMMY_BATCH}
    sync = is_sync_step(counter, dp_sync_interval)
    if not sync:
        events.add(SYNC_SKIPPED)
    rank = rank._replace(work=work, step_counter=counter, at_sync=sync, unfinished_at_sync=sync and work > 0,
                         last_batch="step" if executed else "dummy")
    return (rank if sync else rank._replace(woken=False)), frozenset(events)  # (a woken rank's first pass syncs)


@models(f"{CORE}.run_busy_loop")
def end_sync(rank: Rank, has_unfinished: bool) -> Rank:
    """After the all-reduce: keep running, or end the wave (``current_wave += 1``, ``step_counter = 0``)."""
    if has_unfinished:
        return rank._replace(after_sync="", woken=False)
    return rank._replace(after_sync="", woken=False, running=False, current_wave=rank.current_wave + 1,
                         step_counter=0, last_batch="")


@models(COORDINATOR, "vllm.v1.engine.coordinator.DPCoordinatorProc._send_start_wave")
def coordinator_start_wave(s: DPState, wave: int, engine: int) -> tuple[DPState, frozenset[str]]:
    """The coordinator reads an engine's ``start_wave``: a newer wave, or its own while it believes the
    engines idle, is broadcast as ``START_DP_WAVE(wave, excluded=engine)``; any other is dropped."""
    if not (wave > s.coordinator_wave or (wave == s.coordinator_wave and not s.coordinator_running)):
        return s, frozenset({START_WAVE_DEDUPED})
    ranks = tuple(r if i == engine else r._replace(inbox=r.inbox + ((wave, engine),)) for i, r in enumerate(s.ranks))
    return s._replace(ranks=ranks, coordinator_wave=wave, coordinator_running=True), frozenset({START_WAVE_SENT})


@models(COORDINATOR)
def coordinator_wave_complete(s: DPState, wave: int) -> tuple[DPState, frozenset[str]]:
    """The coordinator reads rank 0's ``wave_complete``: unless a newer wave has started, the next wave."""
    done = s._replace(waves_completed=s.waves_completed + 1)
    if s.coordinator_wave > wave:
        return done, frozenset({WAVE_COMPLETE, WAVE_COMPLETE_LATE})
    return done._replace(coordinator_wave=wave + 1, coordinator_running=False), frozenset({WAVE_COMPLETE})


# ---------------------------------------------------------------- the next-state relation


def _with_rank(s: DPState, i: int, rank: Rank) -> DPState:
    return s._replace(ranks=s.ranks[:i] + (rank,) + s.ranks[i + 1:])


def busy(rank: Rank) -> bool:
    """Inside an iteration past its input: in the all-reduce, or leaving it."""
    return rank.at_sync or rank.after_sync != ""


def add_request_transition(cfg: DPConfig, s: DPState, request_wave: int | None = None) -> DPTransition:
    """The next request reaches its rank, stamped with the coordinator's wave (the front end's;
    ``request_wave`` another); a woken rank's ``start_wave`` reaches the coordinator."""
    target, steps = cfg.requests[s.sent]
    wave = s.coordinator_wave if request_wave is None else request_wave
    rank, wakes, events = add_request(s.ranks[target], steps, wave)
    s = _with_rank(s, target, rank)._replace(sent=s.sent + 1)
    if wakes:
        s, sent = coordinator_start_wave(s, rank.current_wave, target)
        events |= sent
    return DPTransition(DPAction(ADD_REQUEST, s.sent - 1), s, events)


def _all_reduce(s: DPState) -> DPTransition:
    """Every rank is in the all-reduce: each leaves it with the OR of their answers."""
    result = global_unfinished(tuple(r.unfinished_at_sync for r in s.ranks))
    ranks = tuple(r._replace(at_sync=False, unfinished_at_sync=False, after_sync="run" if result else "stop")
                  for r in s.ranks)
    idle = result and any(not r.unfinished_at_sync for r in s.ranks)
    return DPTransition(DPAction(ALL_REDUCE), s._replace(ranks=ranks), frozenset({DUMMY_KEEPS_WAVE} if idle else ()))


@models(f"{CORE}.run_busy_loop")
def end_iteration(s: DPState, i: int) -> tuple[DPState, frozenset[str]]:
    """The rest of rank ``i``'s ``run_busy_loop`` iteration: the wave's end (rank 0's ``wave_complete``
    first), or, on a rank 0 idle when the iteration began and running now, its ``start_wave``."""
    r = s.ranks[i]
    ended = end_sync(r, r.after_sync == "run")
    s = _with_rank(s, i, ended)
    if r.after_sync == "stop":
        return coordinator_wave_complete(s, r.current_wave) if i == 0 else (s, frozenset())
    if i == 0 and r.woken:
        return coordinator_start_wave(s, r.current_wave, 0)
    return s, frozenset()


def next_states(cfg: DPConfig, s: DPState) -> list[DPTransition]:
    """Every enabled action, in a fixed order: the next request, each rank's input, each rank's
    pass, the all-reduce, each rank's iteration end.  A rank inside an iteration reads no input."""
    out: list[DPTransition] = []
    if s.sent < len(cfg.requests) and not busy(s.ranks[cfg.requests[s.sent][0]]):
        out.append(add_request_transition(cfg, s))
    for i, r in enumerate(s.ranks):
        if r.inbox and not busy(r):
            rank, events = handle_start_wave(r, i)
            out.append(DPTransition(DPAction(START_DP_WAVE, i), _with_rank(s, i, rank), events))
    for i, r in enumerate(s.ranks):
        if r.running and not busy(r):
            rank, events = step(r, cfg.dp_sync_interval)
            out.append(DPTransition(DPAction(STEP, i), _with_rank(s, i, rank), events))
    if all(r.at_sync for r in s.ranks):
        out.append(_all_reduce(s))
    for i, r in enumerate(s.ranks):
        if r.after_sync:
            nxt, events = end_iteration(s, i)
            out.append(DPTransition(DPAction(END_ITERATION, i), nxt, events))
    return out


def apply(cfg: DPConfig, s: DPState, action: DPAction) -> DPTransition:
    """The transition of ``action`` from ``s``; ``ValueError`` when it is not enabled."""
    for t in next_states(cfg, s):
        if t.action == action:
            return t
    raise ValueError(f"action '{action}' is not enabled")
