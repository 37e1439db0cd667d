"""Divergences of the ``vllm-engine`` target that are explained: known, outside what vLLM ships.

``v1_depth3_reentry``: at depth 3 (three steps in flight) the V1 model runner
feeds a request that skipped a step the last token the scheduler had sent
it, not the one still in flight: it gathers last step's samples only from the
*previous* step (``InputBatch.prev_req_id_to_index``,
``GPUModelRunner._prepare_input_ids``), and ``all_token_ids`` cannot hold a
token that is not sampled yet.  vLLM never runs the V1 runner at depth 3
(``VllmConfig.max_concurrent_batches``: V1 with async scheduling is depth 2;
depth 3 is Model Runner V2 with pipeline parallelism 2, which keeps the last
sampled token per request); the worker spec predicts it
(``asyncspec worker``: V1 at worker-d3, docs/worker.md).
"""
from __future__ import annotations

from asyncspec.statemachine_tests.vllm_engine.engine_run import EngineRunResult
from asyncspec.statemachine_tests.core.harness import SCHEDULE
from asyncspec.statemachine_tests.scheduler.vllm_observer import req_index

EXPLANATIONS = {
    "v1_depth3_reentry": "V1 runner at depth 3 feeds a re-entering request its last known token "
                         "(outside what vLLM ships; worker spec finding, docs/vllm-engine.md)",
}


def first_bad_feed(result: EngineRunResult) -> tuple[int, int] | None:
    """(forward index, request) of the first token the runner fed that is not the oracle's history."""
    case = result.case
    if case is None:
        return None
    for k, (_, rows) in enumerate(result.feeds):
        for row in rows:
            req = req_index(row.req_id)
            r = case.requests[req]
            history = r.prompt + r.stream
            start = row.start_position
            if tuple(row.token_ids) != history[start:start + len(row.token_ids)]:
                return k, req
    return None


def previous_step_requests(result: EngineRunResult, row_index: int) -> set[int] | None:
    """The requests the ``schedule()`` before row ``row_index`` scheduled (None if there was none)."""
    for row in reversed(result.rows[:row_index - 1]):
        if row.event.kind == SCHEDULE:
            return {req for req, _, _ in row.actual.scheduled}
    return None


def explain(result: EngineRunResult) -> str | None:
    """The name of the known cause of ``result``'s divergence, or None if unexplained."""
    case = result.case
    if case is None or case.engine.depth != 3:
        return None
    bad = first_bad_feed(result)
    if bad is None:
        return None
    k, req = bad
    previous = previous_step_requests(result, result.feeds[k][0])
    if previous is not None and req not in previous:
        return "v1_depth3_reentry"
    return None
