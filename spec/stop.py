"""What ends a request at its stop position: EOS, a stop token or a detected repetition.

``check_stop`` (vllm/v1/core/sched/utils.py, vLLM 0.33.0) tests, after each token it appends:
the EOS token, then the request's ``stop_token_ids`` (``stop_reason`` = that token), then the
length cap (``max_tokens``, or ``max_model_len`` reached), then ``min_tokens`` (fewer output
tokens: no stop), then repetition detection (``check_sequence_repetition``: the last
``l * min_count`` tokens repeat a pattern of ``l`` tokens, for the first ``l`` in
``[min_pattern_size, max_pattern_size]`` that does; ``FINISHED_REPETITION``, ``stop_reason``
``"repetition_detected"``).

On the counters every one of these stops acts alike (``Scheduler._update_request_with_output``
trims, frees and reports them the same way): ``spec/request.first_stop`` stops at one output
position, with ``FINISHED_STOPPED`` ahead of the length cap at the same position.  This module
says where that position is for a request's :class:`StopRule` and what vLLM reports there
(finish status and ``stop_reason``); the counter arithmetic, the z3 proofs and the compiled
explorer are unchanged, since a rule only moves the position and renames the status.

A rule's ``position`` is where its signal starts in the output: the EOS or stop token sampled
there, or the first token of a tail of period ``pattern_len`` that the model repeats from there
on (distinct tokens before it).  The detector matches that tail once it holds ``min_count``
periods of the first pattern length it tries that is a multiple of ``pattern_len``
(:func:`detected_length`), no earlier: a window reaching into the distinct tokens, or of a
length that is no multiple of the period, never repeats.  ``min_tokens`` holds back only the
repetition test: EOS and stop tokens stop below it, and a repetition seen below it stops at
``min_tokens`` exactly; at or beyond the length cap the cap wins.
"""
from __future__ import annotations

from typing import NamedTuple

from asyncspec.spec.cites import models

STOP_EOS = 0
"""The EOS token (``SamplingParams.eos_token_id``): FINISHED_STOPPED, no ``stop_reason``."""
STOP_TOKEN = 1
"""One of ``SamplingParams.stop_token_ids``: FINISHED_STOPPED, ``stop_reason`` = the token."""
STOP_REPETITION = 2
"""``SamplingParams.repetition_detection``: FINISHED_REPETITION, ``stop_reason`` "repetition_detected"."""
STOP_KINDS = {STOP_EOS: "eos", STOP_TOKEN: "stop_token", STOP_REPETITION: "repetition"}

REPETITION_DETECTED = "repetition_detected"
"""``Request.stop_reason`` of a repetition stop (vllm/v1/core/sched/utils.py)."""


class StopRule(NamedTuple):
    """How one request stops; ``position`` 0: no stop signal (the length cap ends it)."""

    kind: int = STOP_EOS
    position: int = 0  # output position (1-based) where the signal starts
    min_tokens: int = 0  # SamplingParams.min_tokens
    min_pattern_size: int = 0  # RepetitionDetectionParams (repetition only); 0 reads as 1
    max_pattern_size: int = 0
    min_count: int = 0
    pattern_len: int = 0  # the period of the tokens the harness's oracle repeats


def detected_length(rule: StopRule) -> int:
    """The pattern length ``check_sequence_repetition`` matches first on a tail of period
    ``pattern_len`` (distinct tokens before it): the smallest multiple of it in
    ``[max(min_pattern_size, 1), max_pattern_size]``; 0 if none (or detection is off)."""
    if rule.pattern_len < 1 or rule.max_pattern_size < 1 or rule.min_count < 2:
        return 0
    lowest = max(rule.min_pattern_size, 1)
    first = -(-lowest // rule.pattern_len) * rule.pattern_len
    return first if first <= rule.max_pattern_size else 0


@models("vllm.v1.core.sched.utils.check_stop", "vllm.v1.core.sched.utils.check_sequence_repetition")
def stop_position(rule: StopRule, limit: int) -> int:
    """The output position ``check_stop`` ends the request at by ``rule`` (0: never; the length
    cap ``limit`` = min(max_tokens, max_model_len - P) ends it).  EOS and stop tokens come before
    the cap and ``min_tokens``; repetition after both."""
    if rule.position <= 0:
        return 0
    if rule.kind != STOP_REPETITION:
        return rule.position
    length = detected_length(rule)
    if not length:
        return 0
    position = max(rule.position + length * rule.min_count - 1, rule.min_tokens)
    return position if position < limit else 0


def finish_status(rule: StopRule, status: str) -> str:
    """vLLM's status name for the spec's ``status`` name: a STOPPED request of a repetition rule
    is FINISHED_REPETITION (``RequestStatus``; vllm/v1/request.py)."""
    return "REPETITION" if status == "STOPPED" and rule.kind == STOP_REPETITION else status


def finish_reason(rule: StopRule, reason: str) -> str:
    """The ``FinishReason`` name reported for the spec's ``reason`` (vllm/v1/request.py,
    ``_FINISHED_REASON_MAP``): ``repetition`` for a repetition stop."""
    return "repetition" if reason == "stop" and rule.kind == STOP_REPETITION else reason


@models("vllm.v1.core.sched.utils.check_stop")
def stop_reason(rule: StopRule, status: str, last_token: int | None) -> str:
    """``Request.stop_reason`` as text ("" = None): the stop token itself, or
    "repetition_detected"; nothing for EOS, the length cap or an abort."""
    if status != "STOPPED" or rule.kind == STOP_EOS:
        return ""
    if rule.kind == STOP_TOKEN:
        return "" if last_token is None else str(last_token)
    return REPETITION_DETECTED
