"""Scheduling policy and per-step caps: priority order, long-prefill threshold, max_model_len.

Models ``SchedulingPolicy.PRIORITY`` (vllm/v1/core/sched/request_queue.py
``PriorityRequestQueue``: a heap on ``Request.__lt__``, i.e. (priority, arrival
time); the scheduler's preemption victim is the running request with the
largest (priority, arrival time)), ``long_prefill_token_threshold`` (fixed or
adaptive, applied only when more than one request is eligible) and the
``max_model_len`` cap on a running request's scheduled tokens
(``Scheduler.schedule``).  Requests arrive in id order, so the arrival time of
request i orders as i.
"""
from __future__ import annotations

from asyncspec.spec.config import SpecConfig
from asyncspec.spec.draft import Draft
from asyncspec.spec.cites import models


@models("vllm.v1.request.Request.__lt__")
def priority_key(cfg: SpecConfig, req: int) -> tuple[int, int]:
    """(priority, arrival): lower is served first and preempted last."""
    return (cfg.priorities[req] if cfg.priorities else 0, req)


@models("vllm.v1.core.sched.request_queue.PriorityRequestQueue.add_request",
        "vllm.v1.core.sched.request_queue.PriorityRequestQueue.__iter__")
def order_queues(cfg: SpecConfig, d: Draft) -> None:
    """Under the priority policy both waiting queues are heaps: peeked, popped and
    listed in (priority, arrival) order, whatever order requests were pushed back in."""
    if cfg.policy == "priority":
        d.waiting.sort(key=lambda r: priority_key(cfg, r))
        d.kv_holding.sort(key=lambda r: priority_key(cfg, r))


@models("vllm.v1.core.sched.scheduler.Scheduler.schedule")
def preemption_victim(cfg: SpecConfig, d: Draft) -> int:
    """The request pass 1 preempts: the last running one (FCFS), or the running one with
    the largest (priority, arrival) (priority policy)."""
    if cfg.policy == "priority":
        return max(d.running, key=lambda r: priority_key(cfg, r))
    return d.running[-1]


@models("vllm.v1.core.sched.scheduler.Scheduler.schedule",
        "vllm.v1.core.sched.scheduler.Scheduler.get_request_counts")
def long_prefill_threshold(cfg: SpecConfig, d: Draft) -> int:
    """The per-request token cap of this ``schedule()`` (0 = none): the threshold when more
    than one request is running or waiting; adaptive: at least budget // that count."""
    eligible = len(d.running) + len(d.waiting) + len(d.kv_holding)
    if cfg.long_prefill_token_threshold <= 0 or eligible <= 1:
        return 0
    if cfg.long_prefill_adaptive:
        return max(cfg.long_prefill_token_threshold, cfg.token_budget // eligible)
    return cfg.long_prefill_token_threshold


@models("vllm.v1.core.sched.scheduler.Scheduler.schedule")
def cap_long_prefill(n: int, threshold: int) -> int:
    """A request's tokens this step under the long-prefill cap (before the budget)."""
    return threshold if 0 < threshold < n else n


@models("vllm.v1.core.sched.scheduler.Scheduler.schedule")
def cap_model_len(cfg: SpecConfig, computed: int, n: int) -> int:
    """Pass 1, after the budget: ``min(n, max_model_len - C - num_sampled_tokens_per_step)``
    (the sampled token needs a position too); 0 skips the request this step."""
    if cfg.max_model_len is None:
        return n
    return min(n, cfg.max_model_len - computed - 1)
