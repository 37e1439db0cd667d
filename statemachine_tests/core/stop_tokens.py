"""The oracle's tokens and sampling parameters of requests that stop otherwise than by EOS.

A workload's ``stops`` entry (``core/workload.py``) gives a request a stop kind: 1, a stop token
(``SamplingParams.stop_token_ids``) sampled at ``eos_position``; 2, repetition detection
(``SamplingParams.repetition_detection``) over a tail the model repeats from ``eos_position`` on,
with period ``pattern_len``; and ``min_tokens``.  The oracle only emits tokens: where vLLM's
``check_stop`` ends the request, and with which status and ``stop_reason``, is the spec's
prediction (``spec/stop.py``), not computed here.

Ids: sampled tokens lie in 3..999 (``harness.sampled_token``) and never repeat within a request;
stop tokens are 1000 + request, repeated tokens 1100 + 4 x request + phase, apart from both
(the scheduler never looks a token up in the vocabulary).
"""
from __future__ import annotations

from typing import Any

from asyncspec.statemachine_tests.core.harness import sampled_token
from asyncspec.statemachine_tests.core.workload import MAX_PATTERN_LEN, Workload

KIND_EOS, KIND_STOP_TOKEN, KIND_REPETITION = 0, 1, 2
STOP_TOKEN_BASE = 1000
REPEAT_TOKEN_BASE = 1100


def stop_entry(w: Workload, req: int) -> tuple[int, ...] | None:
    """``req``'s ``stops`` entry, or None (EOS at ``eos_position``, no min_tokens)."""
    return next((s for s in w.stops if s[0] == req), None)


def stop_token_id(req: int) -> int:
    """The stop token of request ``req`` (its only ``stop_token_ids`` entry)."""
    return STOP_TOKEN_BASE + req


def repeated_token(req: int, phase: int) -> int:
    """The token at ``phase`` (0-based) of ``req``'s repeated pattern."""
    return REPEAT_TOKEN_BASE + MAX_PATTERN_LEN * req + phase


def oracle_token(w: Workload, req: int, position: int) -> int:
    """The token the model samples at output ``position`` (1-based) of request ``req``."""
    r = w.requests[req]
    entry = stop_entry(w, req)
    kind = entry[1] if entry is not None else KIND_EOS
    if kind == KIND_EOS:
        return sampled_token(req, position, r.eos_position)
    if kind == KIND_STOP_TOKEN:
        return stop_token_id(req) if position == r.eos_position else sampled_token(req, position, 0)
    assert entry is not None
    start, period = r.eos_position, entry[6]
    if start > 0 and position >= start:
        return repeated_token(req, (position - start) % period)
    return sampled_token(req, position, 0)


def sampling_of(w: Workload, req: int) -> dict[str, Any]:
    """The keyword arguments of ``SchedulerDriver.add_request`` for ``req``'s stop: ``stop_token_ids``,
    ``min_tokens`` and ``repetition`` (min_pattern_size, max_pattern_size, min_count) where set."""
    entry = stop_entry(w, req)
    if entry is None:
        return {}
    _, kind, min_tokens, low, high, count, _ = entry
    out: dict[str, Any] = {"min_tokens": min_tokens}
    if kind == KIND_STOP_TOKEN:
        out["stop_token_ids"] = [stop_token_id(req)]
    if kind == KIND_REPETITION:
        out["repetition"] = (low, high, count)
    return out
