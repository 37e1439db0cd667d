"""Streaming-input (resumable) requests: the session update path of vLLM 0.33.0.

A resumable request (``Request.resumable``; ``AsyncLLM`` sends one per chunk of a
client's input stream, all with the same request id) is a *session* of turns.
``SpecConfig.resumable`` names the sessions; every session's later inputs are
``SpecConfig.stream_updates``, (new prompt tokens u, max_tokens m) each, and after
them the end of the input stream (``AsyncLLM``'s final, non-resumable request).

* A turn ends like a request (``check_stop``: EOS or max_tokens), but
  ``Scheduler._handle_stopped_request`` keeps the session: C := C - H (the
  materialized frontier, N - 1: the last sampled token is discarded), H := 0,
  drafts cleared, and every in-flight step's output becomes stale and dropped
  (X := F, D := true).  It keeps its blocks and its model-runner slot.
* With an input queued (``Request.streaming_queue``) it takes it at once
  (``_update_request_as_session``): the kept output becomes prompt, the u new
  tokens are appended, O := 0, M := m, WAITING; the end of the stream instead
  finishes the request (freed as usual).  With none queued it pauses:
  ``WAITING_FOR_STREAMING_REQ`` (``num_waiting_for_streaming_input`` += 1), skipped
  by the waiting pass, not counted by ``has_requests``.  It is enqueued in
  ``kv_holding_waiting`` when it holds KV (C > 0), else in ``waiting``.
* ``stream_update rN`` / ``stream_close rN`` (the environment): the client's next
  input reaches ``Scheduler.add_request`` with the session's id, through the
  engine's input queue (a call boundary).  A paused session takes it at once
  (the end of the stream aborts it, ``finish_requests``); a running one queues it.

Modelled with chunked prefill and without prefix caching (a turn's discarded
token would need token contents in ``BlockHash``), speculative decoding, grammars
or KV connectors (``spec/config.py`` refuses them).  The per-request arithmetic
is written against ``Arith`` like ``spec/request.py``.
"""
from __future__ import annotations

from asyncspec.spec import policy
from asyncspec.spec import events as ev
from asyncspec.spec import request as rq
from asyncspec.spec.algebra import CONCRETE as A
from asyncspec.spec.algebra import Arith, Bool, Int
from asyncspec.spec.cites import models
from asyncspec.spec.config import SpecConfig
from asyncspec.spec.draft import Draft, num_waiting_for_streaming_input
from asyncspec.spec.state import EngineState

STREAM_UPDATE = "stream_update"
STREAM_CLOSE = "stream_close"


@models("vllm.v1.core.sched.scheduler.Scheduler._handle_stopped_request")
def stop_frontier(A: Arith[Int, Bool], c: rq.RequestCounters[Int, Bool]) -> rq.RequestCounters[Int, Bool]:
    """``_handle_stopped_request``'s reset of a stopped session: resume from the
    materialized frontier C - H, drop every in-flight step's output (X := F, D := true),
    no placeholders, no drafts."""
    return c._replace(
        num_computed_tokens=c.num_computed_tokens - c.num_output_placeholders,
        num_output_placeholders=A.lit(0),
        num_stale_output_tokens=c.num_in_flight_tokens,
        drop_stale_output=A.true(),
        num_spec_token_ids=A.lit(0),
    )


@models("vllm.v1.core.sched.scheduler.Scheduler._update_request_as_session",
        "vllm.v1.request.StreamingUpdate.from_request")
def session_update(A: Arith[Int, Bool], p: rq.RequestParams[Int, Bool], c: rq.RequestCounters[Int, Bool],
                   new_prompt_tokens: Int, max_tokens: Int
                   ) -> tuple[rq.RequestParams[Int, Bool], rq.RequestCounters[Int, Bool]]:
    """``_update_request_as_session``: every token but the last sampled one becomes prompt,
    the update's tokens follow (P := N - 1 + u), the output restarts (O := 0) with the
    update's max_tokens; WAITING.  The EOS position (the model) counts from the new turn."""
    kept = rq.num_tokens(p, c) - 1
    params = p._replace(num_prompt_tokens=kept + new_prompt_tokens, max_tokens=max_tokens)
    return params, c._replace(status=A.lit(rq.WAITING), num_output_tokens=A.lit(0))


def _set_params(d: Draft, req: int, params: rq.RequestParams) -> None:
    d.params = d.params[:req] + (params,) + d.params[req + 1:]


def _closes(cfg: SpecConfig, index: int) -> bool:
    """Input ``index`` (1-based, after the first) is the end of the input stream."""
    return index > len(cfg.stream_updates)


@models("vllm.v1.core.sched.scheduler.Scheduler._update_request_as_session")
def apply_update(cfg: SpecConfig, d: Draft, req: int, index: int) -> None:
    """Input ``index`` (1-based, an update, not the end) becomes the session's next turn."""
    u, m = cfg.stream_updates[index - 1]
    params, d.counters[req] = session_update(A, d.params[req], d.counters[req], A.lit(u), A.lit(m))
    _set_params(d, req, params)


@models("vllm.v1.core.sched.scheduler.Scheduler._enqueue_waiting_request",
        "vllm.v1.core.sched.scheduler.Scheduler._holds_kv_blocks")
def enqueue(cfg: SpecConfig, d: Draft, req: int) -> None:
    """Leave whichever queue the session was in; join the back of ``kv_holding_waiting``
    when it holds KV (C > 0), else of ``waiting`` (end of ``update_from_output``)."""
    for queue in (d.running, d.waiting, d.kv_holding):
        if req in queue:
            queue.remove(req)
    (d.kv_holding if d.counters[req].num_computed_tokens > 0 else d.waiting).append(req)
    policy.order_queues(cfg, d)


@models("vllm.v1.core.sched.scheduler.Scheduler._handle_stopped_request",
        "vllm.v1.core.sched.scheduler.Scheduler.update_from_output")
def resumes_after_stop(cfg: SpecConfig, d: Draft, req: int) -> bool:
    """``_handle_stopped_request`` for ``req``, which ``check_stop`` just stopped: False when
    it finishes (not a session, or its queued input is the end of the stream: the caller
    frees it); True when the session goes on, with its queued update or paused."""
    if req not in cfg.resumable:
        return False
    c = d.counters[req]
    if c.num_in_flight_tokens > 0:
        d.emit(ev.STREAM_STOP_IN_FLIGHT)
    d.counters[req] = stop_frontier(A, c)
    if d.stream_sent[req] > d.stream_applied[req]:
        if take_next_input(cfg, d, req):
            return False
        d.emit(ev.STREAM_CONTINUE)
    else:
        d.counters[req] = d.counters[req]._replace(status=rq.WAITING_FOR_STREAMING_REQ)
        d.emit(ev.STREAM_PAUSE)
    enqueue(cfg, d, req)
    return True


@models("vllm.v1.core.sched.scheduler.Scheduler._handle_blocked_waiting_request")
def paused(d: Draft, req: int) -> bool:
    """The waiting pass skips a paused session (it keeps its place)."""
    return bool(d.stream_sent) and d.counters[req].status == rq.WAITING_FOR_STREAMING_REQ


@models("vllm.v1.core.sched.scheduler.Scheduler.add_request", "vllm.v1.engine.async_llm.AsyncLLM.add_request")
def next_input(cfg: SpecConfig, s: EngineState, req: int) -> str | None:
    """The client's next input of session ``req`` (``stream_update`` or ``stream_close``), or
    None: not a session, not arrived, finished (``AsyncLLM`` stops sending), or its stream ended."""
    if req not in cfg.resumable or s.counters[req].status == rq.NOT_ARRIVED or rq.is_finished(A, s.counters[req]):
        return None
    sent = s.stream_sent[req]
    if sent > len(cfg.stream_updates):
        return None
    return STREAM_CLOSE if _closes(cfg, sent + 1) else STREAM_UPDATE


@models("vllm.v1.core.sched.scheduler.Scheduler.add_request")
def take_input(cfg: SpecConfig, d: Draft, req: int) -> bool:
    """``Scheduler.add_request`` of an existing session's id: a paused session takes the
    input at once (an update: WAITING where it waits); otherwise it joins
    ``streaming_queue``.  True when the input ends a paused session's stream: the caller
    finishes it (``finish_requests(FINISHED_ABORTED)``)."""
    d.stream_sent[req] += 1
    if d.counters[req].status != rq.WAITING_FOR_STREAMING_REQ:
        d.emit(ev.STREAM_QUEUED)
        return False
    if take_next_input(cfg, d, req):
        return True
    d.emit(ev.STREAM_RESUME)
    return False


@models("vllm.v1.core.sched.scheduler.Scheduler._update_request_as_session")
def take_next_input(cfg: SpecConfig, d: Draft, req: int) -> bool:
    """Session ``req`` takes its next input: True when it is the end of the stream (the session
    then finishes), else the update becomes its next turn (``apply_update``)."""
    d.stream_applied[req] += 1
    if _closes(cfg, d.stream_applied[req]):
        d.emit(ev.STREAM_END)
        return True
    apply_update(cfg, d, req, d.stream_applied[req])
    return False


@models("vllm.v1.core.sched.scheduler.Scheduler.schedule")
def num_active(d: Draft) -> int:
    """Requests holding a model-runner slot: running ones and paused sessions
    (the waiting pass's ``len(running) + num_waiting_for_streaming_input``)."""
    return len(d.running) + num_waiting_for_streaming_input(d)
