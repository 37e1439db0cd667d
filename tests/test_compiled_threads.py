"""``--jobs K`` on the compiled explorer (``csrc/parallel.h``, ``csrc/threads.h``): K threads claim
chunks of each batch in whatever order they run, and this thread integrates in index order, so
every state lands at the single-thread index with the same edges, whatever K, however the budget
cuts the run, and wherever a violation or ``--max-states`` stops it."""
from __future__ import annotations

from typing import Any

import pytest

from asyncspec.checker import compiled
from asyncspec.checker.configs import named_configs

pytestmark = pytest.mark.skipif(not compiled.built(), reason=compiled.NOT_BUILT)


def _run(name: str, jobs: int, budgets: tuple[int, ...] = (1 << 30,), max_states: int = 0) -> tuple[Any, ...]:
    """Everything a search leaves: its status, counts, violations, edges, the shortest paths to every
    997th state (parents and actions) and the store's bytes (every state's bit string, in index order)."""
    c = compiled.c_search(named_configs()[name], max_states=max_states)
    status, k = 0, 0
    while status == 0:
        status = c.run(budgets[k % len(budgets)], jobs)
        k += 1
    stats = dict(c.stats())
    start, target = c.csr()
    snapshot = c.snapshot()
    return (status, stats, c.found(), bytes(start), bytes(target),
            [c.path(i) for i in range(0, stats["states"], 997)], snapshot)


@pytest.mark.parametrize("jobs", [2, 3, 16])
def test_many_batches_on_k_threads_are_the_single_thread_store(jobs: int) -> None:
    one = _run("async-d2-large", 1)
    assert one[1]["states"] == 265_051  # about 65 batches of 4,096 parents
    assert _run("async-d2-large", jobs) == one


def test_budgets_that_cut_batches_anywhere() -> None:
    """Budgets of 1, 63, 4,097 and 10,000 parents, in turn: the pipeline drains and restarts mid-batch."""
    one = _run("async-d2-4req", 1)
    assert _run("async-d2-4req", 2, budgets=(1, 63, 4097, 10_000)) == one


@pytest.mark.parametrize("name, max_states, status, violated", [("finding-d3-no-stagger", 0, 1, True),
                                                               ("async-d2-large", 50_001, 3, False),
                                                               ("kv-sends-aborts", 0, 1, False)])
def test_violations_and_a_stop_mid_batch_as_on_one_thread(name: str, max_states: int, status: int,
                                                          violated: bool) -> None:
    """A violation found (its state index), ``--max-states`` stopping in the middle of a batch, a graph with cycles."""
    one = _run(name, 1, max_states=max_states)
    assert (one[0], bool(one[2])) == (status, violated)
    for jobs in (2, 5):
        assert _run(name, jobs, max_states=max_states) == one
