"""One case of the ``dp`` part: a drawn DP config and a random run of the DP spec (``spec/dp.py``) on it,
read as what each rank's ``run_busy_loop`` must do, iteration by iteration.

A case draws the ranks (two, three a quarter of the time), ``dp_sync_interval`` and up to five
requests (rank, model steps), then walks the spec from its initial state, one enabled action at a
time, uniformly, to a state without successors.  Beside the spec's own environment (requests
stamped with the coordinator's wave, its ``START_DP_WAVE`` broadcasts) the walk sometimes stamps a
request with a newer wave (``add_request`` takes it) and sometimes puts a ``START_DP_WAVE`` of a
drawn wave and excluded engine into a rank's inbox, as a stale or early coordinator message would
(it can wake a rank alone: the spec then ends with that rank in the all-reduce, a hang vLLM must
show too).

``rank_script`` turns the walk into each rank's iterations: the messages it read before each pass
(``add`` with the request's steps and wave, ``start`` with the wave and the excluded engine), and
what the iteration leaves (``Expected``: the batch kind, ``step_counter``, ``current_wave``,
``engines_running``, the outputs the rank put on its queue); messages read while idle with no pass
after them are one idle iteration; a pass still in the all-reduce at the end is the rank's hang.
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import NamedTuple

from asyncspec.spec import dp
from asyncspec.spec.dp import DPConfig, DPState, Rank

Message = tuple[str, int, int]
INJECTED = "dp_start_wave_injected"  # the walk put a START_DP_WAVE the coordinator did not send


@dataclass(frozen=True)
class Expected:
    """One iteration of one rank, as the spec has it (compared with ``dp_driver.Iteration``)."""

    kind: str
    step_counter: int
    current_wave: int
    engines_running: bool
    outputs: tuple[tuple[str, int], ...]


@dataclass
class RankScript:
    """A rank's iterations: the messages each reads, what each must leave, whether the last hangs."""

    inputs: list[list[Message]] = field(default_factory=list)
    expected: list[Expected] = field(default_factory=list)
    hangs: bool = False


@dataclass
class DPCase:
    """The drawn config, the walk (actions as text, injected messages named ``inject``), its events."""

    cfg: DPConfig
    actions: list[str]
    events: set[str]
    scripts: list[RankScript]


def draw_config(rng: random.Random, name: str) -> DPConfig:
    """Two or three ranks, a sync interval, one to five requests of one to four steps."""
    size = 3 if rng.random() < 0.25 else 2
    interval = rng.choice((1, 2, 2, 3, 4, 16))
    requests = tuple((rng.randrange(size), rng.randint(1, 4)) for _ in range(rng.randint(1, 5)))
    return DPConfig(name=name, requests=requests, dp_size=size, dp_sync_interval=interval)


def draw_case(seed: int, index: int, bump: float = 0.15, inject: float = 0.25) -> DPCase:
    """Case ``index`` of the campaign seeded ``seed``."""
    rng = random.Random(seed * 1_000_003 + index)
    cfg = draw_config(rng, f"dp-case-{seed}-{index}")
    s = dp.initial_state(cfg)
    steps: list[Walked] = []
    inject_at = rng.randrange(30) if rng.random() < inject else -1  # one injected message in a quarter of the cases
    while True:
        options = dp.next_states(cfg, s)
        if len(steps) == inject_at:
            s2, text = _inject(rng, cfg, s)
            steps.append(Walked(text, s, s2, frozenset({INJECTED})))
            s = s2
            continue
        if not options:
            break
        t = rng.choice(options)
        stamp = s.coordinator_wave
        if t.action.name == dp.ADD_REQUEST and rng.random() < bump:
            stamp += 1
            t = dp.add_request_transition(cfg, s, stamp)
        steps.append(Walked(str(t.action), s, t.state, t.events, stamp))
        s = t.state
    events = set().union(*(w.events for w in steps)) if steps else set()
    return DPCase(cfg, [w.text for w in steps], events, rank_scripts(cfg, steps))


class Walked(NamedTuple):
    """One step of the walk: the action's text, the states around it, its events, a request's wave."""

    text: str
    before: DPState
    after: DPState
    events: frozenset[str]
    stamp: int = 0  # add_request: the wave the request carries


def _inject(rng: random.Random, cfg: DPConfig, s: DPState) -> tuple[DPState, str]:
    """A ``START_DP_WAVE`` of a drawn wave and excluded engine, into a drawn rank's inbox."""
    rank = rng.randrange(cfg.dp_size)
    wave = max(0, s.ranks[rank].current_wave + rng.choice((-1, 0, 0, 1)))
    excluded = rng.choice((*range(cfg.dp_size), -1))
    r = s.ranks[rank]
    ranks = s.ranks[:rank] + (r._replace(inbox=r.inbox + ((wave, excluded),)),) + s.ranks[rank + 1:]
    return s._replace(ranks=ranks), f"inject rank{rank} ({wave}, {excluded})"


def _expected(kind: str, r: Rank, outputs: list[tuple[str, int]]) -> Expected:
    return Expected(kind, r.step_counter, r.current_wave, r.running, tuple(outputs))


def rank_scripts(cfg: DPConfig, steps: list[Walked]) -> list[RankScript]:
    """Each rank's iterations of the walk ``steps``."""
    scripts = [RankScript() for _ in range(cfg.dp_size)]
    pending: list[list[Message]] = [[] for _ in range(cfg.dp_size)]
    outputs: list[list[tuple[str, int]]] = [[] for _ in range(cfg.dp_size)]
    open_kind: list[str | None] = [None] * cfg.dp_size
    for text, before, after, _, stamp in steps:
        action = dp.parse_dp_action(text) if not text.startswith("inject") else None
        if action is None:
            continue
        i = action.arg
        if action.name == dp.ADD_REQUEST and i is not None:
            rank, steps_needed = cfg.requests[i]
            pending[rank].append(("add", steps_needed, stamp))
            if not before.ranks[rank].running:
                outputs[rank].append(("start_wave", after.ranks[rank].current_wave))
        elif action.name == dp.START_DP_WAVE and i is not None:
            wave, excluded = before.ranks[i].inbox[0]
            pending[i].append(("start", wave, excluded))
        elif action.name == dp.STEP and i is not None:
            scripts[i].inputs.append(pending[i])
            pending[i] = []
            kind = after.ranks[i].last_batch
            if after.ranks[i].at_sync:
                open_kind[i] = kind
            else:
                scripts[i].expected.append(_expected(kind, after.ranks[i], outputs[i]))
                outputs[i] = []
        elif action.name == dp.END_ITERATION and i is not None:
            r = before.ranks[i]
            if i == 0 and r.after_sync == "stop":
                outputs[i].append(("wave_complete", r.current_wave))
            elif i == 0 and r.woken:
                outputs[i].append(("start_wave", r.current_wave))
            scripts[i].expected.append(_expected(str(open_kind[i]), after.ranks[i], outputs[i]))
            outputs[i], open_kind[i] = [], None
    final = steps[-1].after if steps else None
    for i, script in enumerate(scripts):
        if open_kind[i] is not None:
            script.hangs = True
        elif pending[i] and final is not None:
            script.inputs.append(pending[i])
            script.expected.append(_expected("idle", final.ranks[i], outputs[i]))
    return scripts
