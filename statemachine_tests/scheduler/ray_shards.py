"""Shards on Ray (``asyncspec fuzz --ray ADDRESS``): one Ray task per shard, ``--jobs`` in flight.

Ray is the optional extra ``asyncspec[ray]``.  ``local`` starts a cluster of
``--jobs`` CPUs on this machine (as ``check --ray local`` does); any other
address joins a running cluster, whose workers need asyncspec and the same
vLLM installed.  The shards and the merge are ``shards.py``'s, so the result
equals ``--jobs`` K in processes (the cut shard's re-run and the buckets' shrinks are Ray
tasks too).
"""
from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from asyncspec.checker import interrupt
from asyncspec.checker.ray_address import join_ray, unreachable

from asyncspec.statemachine_tests.scheduler.shards import (
    Merged, Plan, ShardResult, dispatch, finish_plan, run_here, run_shard, shard_args,
)


class RayUnavailable(RuntimeError):
    """Ray is not installed or the cluster cannot be reached; one line."""


def run_on_ray(plan: Plan) -> Merged:
    """Every shard of ``plan`` as a Ray task, merged; ``RayUnavailable`` when Ray cannot start."""
    deadline = time.time() + plan.seconds
    address = plan.ray or "local"
    problem = unreachable(address)
    if problem:
        raise RayUnavailable(problem)
    try:
        ray, started = join_ray(address, plan.jobs)
    except RuntimeError as exc:
        raise RayUnavailable(str(exc)) from None
    remote: Any = ray.remote(num_cpus=1)(run_shard)

    def submit(index: int, limit: int) -> Future[ShardResult]:
        ref: Any = remote.remote(*shard_args(plan, index, limit, deadline))
        future: Future[ShardResult] = ref.future()
        return future

    def call(function: Callable[..., Any], *args: Any) -> Future[Any]:
        future: Future[Any] = ray.remote(num_cpus=1)(function).remote(*args).future()
        return future

    try:
        shards = dispatch(plan, deadline, submit)
        return finish_plan(plan, shards, run_here if interrupt.requested() else call)
    finally:
        if started:
            ray.shutdown()
