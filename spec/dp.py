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
(``DPEngineCoreProc.add_request``) wakes it, and the coordinator forwards its ``start_wave`` to the
other ranks as ``START_DP_WAVE(wave, excluded)`` (``_handle_client_request``), which wakes an idle
engine when the wave is not older than its own and it is not the excluded one.

Not modelled: the two-phase pause (``pending_pause``, the pause consensus of ``sync_dp_state``),
prefill throttling (``prefill_schedule_interval``), elastic EP; the coordinator forwards at once
(its messages are in transit until a rank reads them: the inbox).

Example:
    >>> cfg = DPConfig(name="one", requests=((0, 1),), dp_sync_interval=2)
    >>> s = initial_state(cfg)
    >>> [str(t.action) for t in next_states(cfg, s)]
    ['add_request r0']
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

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
DP_EVENTS = (STEP_EXECUTED, DUMMY_BATCH, SYNC_SKIPPED, DUMMY_KEEPS_WAVE, WAVE_COMPLETE, START_WAVE_SENT,
             START_WAVE_WAKES, START_WAVE_STALE, START_WAVE_RUNNING, REQUEST_WAVE_BUMPS, REQUEST_TO_RUNNING)

# ---- actions
ADD_REQUEST = "add_request"
START_DP_WAVE = "start_dp_wave"
STEP = "step"
ALL_REDUCE = "all_reduce"
DP_ACTIONS = (ADD_REQUEST, START_DP_WAVE, STEP, ALL_REDUCE)


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
    step_counter: int = 0
    current_wave: int = 0
    inbox: tuple[tuple[int, int], ...] = ()  # START_DP_WAVE (wave, excluded engine index) in transit
    last_batch: str = ""  # "step", "dummy" or "" (none since the last request or wave end)


class DPState(NamedTuple):
    """The ranks, the requests sent so far, the coordinator's wave (what the front end stamps)."""

    ranks: tuple[Rank, ...]
    sent: int = 0  # requests added so far (they arrive in config order)
    coordinator_wave: int = 0  # DPCoordinator's current_wave: the last wave_complete + 1
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


def is_sync_step(step_counter: int, dp_sync_interval: int) -> bool:
    """Whether ``_has_global_unfinished_reqs`` all-reduces at this (already incremented) count:
    step 1, then every ``dp_sync_interval``-th step."""
    return step_counter == 1 or step_counter % dp_sync_interval == 0


def global_unfinished(contributions: tuple[bool, ...]) -> bool:
    """``sync_dp_state``'s first answer: a SUM all-reduce greater than 0, the OR of every rank's."""
    return any(contributions)


def accepts_start_wave(rank: Rank, wave: int, excluded: int, engine_index: int) -> bool:
    """``_handle_client_request(START_DP_WAVE)``: the wave is taken when this engine is not the
    excluded one and the wave is not older than its own."""
    return excluded != engine_index and wave >= rank.current_wave


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
    return rank._replace(work=rank.work + steps, current_wave=wave, running=True, last_batch=""), wakes, \
        frozenset(events)


def handle_start_wave(rank: Rank, engine_index: int) -> tuple[Rank, frozenset[str]]:
    """The oldest ``START_DP_WAVE`` of ``rank``'s inbox, read by ``_handle_client_request``."""
    (wave, excluded), rest = rank.inbox[0], rank.inbox[1:]
    rank = rank._replace(inbox=rest)
    if not accepts_start_wave(rank, wave, excluded, engine_index):
        return rank, frozenset({START_WAVE_STALE})
    event = START_WAVE_RUNNING if rank.running else START_WAVE_WAKES
    return rank._replace(current_wave=wave, running=True), frozenset({event})


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
    return rank._replace(work=work, step_counter=counter, at_sync=sync, unfinished_at_sync=sync and work > 0,
                         last_batch="step" if executed else "dummy"), frozenset(events)


def end_sync(rank: Rank, has_unfinished: bool) -> Rank:
    """After the all-reduce: keep running, or end the wave (``current_wave += 1``, ``step_counter = 0``)."""
    if has_unfinished:
        return rank._replace(at_sync=False, unfinished_at_sync=False)
    return rank._replace(at_sync=False, unfinished_at_sync=False, running=False, current_wave=rank.current_wave + 1,
                         step_counter=0, last_batch="")


# ---------------------------------------------------------------- the next-state relation


def _with_rank(s: DPState, i: int, rank: Rank) -> tuple[Rank, ...]:
    return s.ranks[:i] + (rank,) + s.ranks[i + 1:]


def _add_request(cfg: DPConfig, s: DPState) -> DPTransition:
    """The next request, stamped with the coordinator's wave, reaches its rank; a woken rank's
    ``start_wave`` is forwarded to every other rank as ``START_DP_WAVE(wave, excluded=it)``."""
    target, steps = cfg.requests[s.sent]
    rank, wakes, events = add_request(s.ranks[target], steps, s.coordinator_wave)
    ranks = _with_rank(s, target, rank)
    if wakes:
        message = (rank.current_wave, target)
        ranks = tuple(r if i == target else r._replace(inbox=r.inbox + (message,)) for i, r in enumerate(ranks))
        events |= {START_WAVE_SENT}
    return DPTransition(DPAction(ADD_REQUEST, s.sent), s._replace(ranks=ranks, sent=s.sent + 1), events)


def _all_reduce(s: DPState) -> DPTransition:
    """Every rank is in the all-reduce: each leaves it with the OR; a wave without work ends."""
    result = global_unfinished(tuple(r.unfinished_at_sync for r in s.ranks))
    ranks = tuple(end_sync(r, result) for r in s.ranks)
    if result:
        idle = any(not r.unfinished_at_sync for r in s.ranks)
        return DPTransition(DPAction(ALL_REDUCE), s._replace(ranks=ranks),
                            frozenset({DUMMY_KEEPS_WAVE} if idle else ()))
    done = s.ranks[0].current_wave  # rank 0's wave_complete: the coordinator moves to the next wave
    return DPTransition(DPAction(ALL_REDUCE), s._replace(ranks=ranks, coordinator_wave=done + 1,
                                                         waves_completed=s.waves_completed + 1),
                        frozenset({WAVE_COMPLETE}))


def next_states(cfg: DPConfig, s: DPState) -> list[DPTransition]:
    """Every enabled action, in a fixed order: the next request, each rank's input, each rank's
    pass, the all-reduce.  A rank in the all-reduce reads no input and runs no pass."""
    out: list[DPTransition] = []
    if s.sent < len(cfg.requests) and not s.ranks[cfg.requests[s.sent][0]].at_sync:
        out.append(_add_request(cfg, s))
    for i, r in enumerate(s.ranks):
        if r.inbox and not r.at_sync:
            rank, events = handle_start_wave(r, i)
            out.append(DPTransition(DPAction(START_DP_WAVE, i), s._replace(ranks=_with_rank(s, i, rank)), events))
    for i, r in enumerate(s.ranks):
        if r.running and not r.at_sync:
            rank, events = step(r, cfg.dp_sync_interval)
            out.append(DPTransition(DPAction(STEP, i), s._replace(ranks=_with_rank(s, i, rank)), events))
    if all(r.at_sync for r in s.ranks):
        out.append(_all_reduce(s))
    return out


def apply(cfg: DPConfig, s: DPState, action: DPAction) -> DPTransition:
    """The transition of ``action`` from ``s``; ``ValueError`` when it is not enabled."""
    for t in next_states(cfg, s):
        if t.action == action:
            return t
    raise ValueError(f"action '{action}' is not enabled")
