"""How a request stops, as a fuzz observation: the spec's stop position, status and ``stop_reason``.

A workload's ``stops`` (``core/stop_tokens.py``) become the spec's ``StopRule`` per request
(``spec/stop.py``); the spec's counters stop at :func:`spec_position` (its ``eos_position``), and
the observation renames the status and finish reason and adds the ``stop_reason`` vLLM's
``check_stop`` (vllm/v1/core/sched/utils.py) leaves, so that a stop at another position, under
another status or with another reason diverges.
"""
from __future__ import annotations

from asyncspec.spec import stop
from asyncspec.statemachine_tests.core.stop_tokens import stop_entry
from asyncspec.statemachine_tests.core.workload import Workload


def stop_rule(w: Workload, req: int, signal: int | None = None) -> stop.StopRule:
    """``req``'s rule; ``signal``: where its stop signal starts (default: its ``eos_position``)."""
    position = w.requests[req].eos_position if signal is None else signal
    entry = stop_entry(w, req)
    if entry is None:
        return stop.StopRule(stop.STOP_EOS, position)
    _, kind, min_tokens, low, high, count, period = entry
    return stop.StopRule(kind, position, min_tokens, low, high, count, period)


def length_cap(w: Workload, req: int) -> int:
    """The output length ``check_stop``'s cap ends ``req`` at: max_tokens, or max_model_len reached."""
    r = w.requests[req]
    return min(r.max_tokens, w.max_model_len - r.prompt_len)


def spec_position(w: Workload, req: int, signal: int | None = None) -> int:
    """The spec's ``eos_position`` of ``req``: where ``check_stop`` ends it by its rule (0: the cap)."""
    if not w.stops:
        return w.requests[req].eos_position if signal is None else signal
    return stop.stop_position(stop_rule(w, req, signal), length_cap(w, req))


def spec_positions(w: Workload) -> tuple[int, ...]:
    """``spec_position`` of every request, in order."""
    return tuple(spec_position(w, i) for i in range(len(w.requests)))
