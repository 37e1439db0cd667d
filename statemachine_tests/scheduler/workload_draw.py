"""Parts of a fuzz workload as a profile draws them: one request, and streaming-input sessions.

``draw_request`` draws one request that fits the pool alone.  A session (vLLM's resumable
request, ``spec/streaming.py``) gets later input chunks
(``stream_update rN``) and the end of its input stream (``stream_close rN``), sent at any
call boundary; a turn stops with its steps in flight, pauses in
``WAITING_FOR_STREAMING_REQ`` holding its blocks and a model-runner slot, or takes a queued
chunk at once.  ``profiles.STREAMING_PROFILE`` draws them with chunked prefill on and prefix
caching off (the spec's block hashes do not follow a turn's discarded token).
"""
from __future__ import annotations

from hypothesis import strategies as st

from asyncspec.spec import events as ev

from asyncspec.statemachine_tests.core.harness import RequestSpec

STREAMING_COVERAGE: dict[str, tuple[str, ...]] = {
    "stream_stop_in_flight": (ev.STREAM_STOP_IN_FLIGHT,),
    "stream_resume": (ev.STREAM_RESUME, ev.STREAM_CONTINUE),
}
"""Reported when the profile draws streaming-input sessions: a turn that stops with its steps in
flight (their output dropped), and a session that takes its next input (paused or queued)."""

STREAMING_EVENTS = (ev.STREAM_STOP_IN_FLIGHT, ev.STREAM_PAUSE, ev.STREAM_CONTINUE, ev.STREAM_QUEUED,
                    ev.STREAM_RESUME, ev.STREAM_END, ev.STREAM_PAUSED_SKIP)
"""The witnesses of streaming-input sessions."""

def draw_request(draw: st.DrawFn, capacity: int, max_output: int, min_prompt: int = 1) -> RequestSpec:
    """P + M <= capacity (the request fits the pool alone, and the budget without chunking)."""
    max_tokens = draw(st.integers(1, min(max_output, capacity - min_prompt)))
    prompt = draw(st.integers(min_prompt, capacity - max_tokens))
    eos = draw(st.integers(0, max_tokens))
    return RequestSpec(prompt, max_tokens, eos)


MAX_UPDATES = 3
"""Later inputs drawn per workload (the spec takes up to 4)."""


def sessions(draw: st.DrawFn, streaming: bool, max_output: int, requests: tuple[RequestSpec, ...],
             pool_tokens: int) -> tuple[tuple[RequestSpec, ...], tuple[int, ...], tuple[tuple[int, int], ...]]:
    """(requests, resumable requests, stream_updates): as given and none unless ``streaming``; else
    r0 and, each half the time, the others become sessions, their prompts cut to leave half the pool
    (``pool_tokens``) for later turns, with 0 to ``MAX_UPDATES`` later inputs of 1 to 4 new prompt
    tokens and max_tokens up to ``max_output``; an input that would not fit every session in the
    pool alone ends the list."""
    if not streaming:
        return requests, (), ()
    resumable = tuple(i for i in range(len(requests)) if i == 0 or draw(st.booleans()))
    requests = tuple(r._replace(prompt_len=max(1, min(r.prompt_len, pool_tokens // 2 - r.max_tokens)))
                     if i in resumable else r for i, r in enumerate(requests))
    room = min(pool_tokens - r.prompt_len - r.max_tokens for i, r in enumerate(requests) if i in resumable)
    updates: list[tuple[int, int]] = []
    for _ in range(draw(st.integers(0, MAX_UPDATES))):
        update = (draw(st.integers(1, 4)), draw(st.integers(1, max_output)))
        if sum(update) - 1 > room:
            break
        room -= sum(update) - 1
        updates.append(update)
    return requests, resumable, tuple(updates)


def streaming_categories(streaming: bool, max_depth: int = 2) -> list[str]:
    """The streaming coverage categories a profile reports (``max_depth`` 2) or can reach: none
    without sessions; a turn stopping with steps in flight needs depth 2 or more."""
    return [c for c in STREAMING_COVERAGE if streaming and (max_depth >= 2 or c != "stream_stop_in_flight")]


def streaming_unreachable(streaming: bool, max_depth: int) -> dict[str, str]:
    """The streaming witnesses a profile cannot reach, and why (``profiles.unreachable_witnesses``)."""
    if not streaming:
        return {name: "no streaming-input sessions in this profile" for name in STREAMING_EVENTS}
    if max_depth < 2:
        return {ev.STREAM_STOP_IN_FLIGHT: "needs a step in flight behind the one scheduled (depth 2 or 3)"}
    return {}
