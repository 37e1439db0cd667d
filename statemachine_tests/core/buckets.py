"""Divergence buckets: every distinct divergence of a campaign, by signature, one representative each.

A campaign keeps going after a divergence (``--max-divergences N`` distinct
ones, default 20; ``--stop-at-first`` for bisecting).  Each divergent example
gets a *key* from its first sighting: the profile part it was drawn from, the
kind of the event at which spec and target first differ, and the first
differing field (request ids written ``r*``; a crash as ``error:`` and the
exception's type).  Examples with equal keys are one bucket; its
representative is shrunk *within* the key (Hypothesis keeps only smaller
examples with the same key, so shrinking never slips into another bucket).
The *signature* shown is the key plus the configuration features the shrunk
representative still has (``features``): deterministic, since the shrink is
a function of the shard's seed and the key alone.  Nothing here imports vLLM.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from asyncspec.statemachine_tests.core.harness import RunResult, Workload

DEFAULT_MAX_DIVERGENCES = 20
"""``--max-divergences``: the distinct divergences (buckets) after which a campaign stops."""

_REQUEST = re.compile(r"^r\d+\.")


def first_field(result: RunResult) -> str:
    """The first differing field of ``result``'s last row, request ids as ``r*``; a crash of the
    target as ``error:<exception type>`` (of the spec: ``error:spec:<type>``)."""
    d = result.rows[-1].differences[0]
    if d.field == "error":
        side, value = ("spec:", d.expected) if d.expected is not None else ("", d.actual)
        return f"error:{side}{str(value).partition(':')[0].strip() or 'None'}"
    return _REQUEST.sub("r*.", d.field)


def divergence_key(result: RunResult, part: str) -> str:
    """The bucket of a divergent example: ``part | event kind | first field``.

    >>> from asyncspec.statemachine_tests.core.harness import (
    ...     Difference, Event, Observation, RequestSpec, Row)
    >>> o = Observation((), (), (), (), (), (), (), 0, False, (), 0, 0, ())
    >>> row = Row(3, Event("deliver"), o, o, frozenset(), [Difference("r2.num_tokens", 5, 6)])
    >>> divergence_key(RunResult(Workload((RequestSpec(1, 1),)), [row], {}), "base")
    'base | deliver | r*.num_tokens'
    """
    return f"{part} | {result.rows[-1].event.kind} | {first_field(result)}"


def features(w: Workload) -> list[str]:
    """The configuration features of ``w``: its depth and every mode switched from its default."""
    on = [f"depth={w.depth}"]
    flags = (("prefix-caching", w.prefix_caching), ("defer-block-free", w.defer_block_free),
             ("stale-drop", w.stale_mode == "drop"), ("free-loop", w.loop == "free"),
             ("no-chunked-prefill", not w.chunked_prefill), ("reset-prefix-cache", w.reset_prefix_cache > 0),
             ("spec-decode", w.num_speculative_tokens > 0), ("structured-output", bool(w.structured_output)),
             ("sliding-window", w.sliding_window > 0), ("remote-loads", bool(w.remote_loads)),
             ("remote-sends", bool(w.remote_sends)), ("load-failure-fail", w.kv_load_failure_policy == "fail"),
             ("long-prefill", w.long_prefill_token_threshold > 0), ("adaptive", w.long_prefill_adaptive),
             ("max-model-len", w.model_len > 0))
    on += [name for name, flag in flags if flag]
    on += [f"connector={w.kv_connector}"] if w.kv_connector else []
    on += [f"policy={w.policy}"] if w.policy != "fcfs" else []
    return on


def signature(key: str, representative: RunResult | None) -> str:
    """The signature shown and listed: the key, then the representative's features in brackets."""
    if representative is None:
        return key
    return f"{key} [{', '.join(features(representative.workload))}]"


@dataclass
class Bucket:
    """The divergent examples of one key: how many, where first seen, and the shrunk representative."""

    key: str
    count: int
    first_example: int  # the campaign's example number (0-based) of the first sighting
    shard: int  # the shard (batch) of the first sighting
    representative: RunResult | None = None  # shrunk within the key (None until shrunk)
    replay_file: Path | None = None
    sighting: RunResult | None = None  # the first sighting, unshrunk (what an interrupt leaves)

    @property
    def signature(self) -> str:
        """``signature(key, representative)``."""
        return signature(self.key, self.representative)

    def to_json(self) -> dict[str, Any]:
        """One entry of ``--json``'s ``buckets``."""
        return {"signature": self.signature, "count": self.count,
                "replay_file": str(self.replay_file) if self.replay_file else None,
                "first_example": self.first_example}


def add_sighting(buckets: dict[str, Bucket], key: str, example: int, shard: int,
                 result: RunResult | None = None) -> None:
    """Count one divergent example (in campaign order: the first one of a key stays its sighting,
    ``result`` its run)."""
    if key in buckets:
        buckets[key].count += 1
    else:
        buckets[key] = Bucket(key, 1, example, shard, sighting=result)


def replay_path(out_dir: Path, target: str, seed: int, number: int) -> Path:
    """Bucket ``number``'s (1-based) replay file: the first as before, ``-2``, ``-3``... after it."""
    suffix = "" if number == 1 else f"-{number}"
    return out_dir / f"fuzz-{target}-seed{seed}{suffix}.json"
