"""Hypothesis fuzzing of the torch engine: D = 2 and D = 3 token streams equal D = 1.

Each example is a workload (``engine.torch.torch_oracle.build_workload`` over Hypothesis integer
draws, so failures shrink to few requests, short prompts and small settings): arrivals,
aborts, forced preemptions, pools small enough to preempt, chunked prefill, prefix caching,
a KV connector with late writes, both stale modes, EOS emitted by the model.  The oracle
(``check_workload``) compares the streams, replays every run on the spec and checks that the
wasted forward passes equal the spec's prediction.

The fast tier runs 60 examples per strategy (well under 90 s on two cores); the
``campaign`` tier runs many more.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from asyncspec.engine.torch.torch_engine import SchedulerKind, default_model
from asyncspec.engine.torch.model import TinyTransformer
from asyncspec.engine.torch.torch_oracle import FUZZ_MODEL, build_workload, check_workload
from asyncspec.engine.torch.torch_worker import Strategy

FAST = settings(max_examples=60, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
CAMPAIGN = settings(max_examples=600, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@pytest.fixture(autouse=True)
def _one_thread() -> Iterator[None]:
    """Two shared cores: one intra-op thread."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _model() -> TinyTransformer:
    return default_model("cpu", FUZZ_MODEL)


def _check(data: st.DataObject, strategy: Strategy, scheduler: SchedulerKind = "reference") -> None:
    """Draw a workload and assert the oracle holds for it."""
    workload = build_workload(lambda lo, hi: data.draw(st.integers(lo, hi)))
    depths = (1, 2) if strategy == "v1" else (1, 2, 3)
    report = check_workload(workload, strategy=strategy, scheduler=scheduler,
                            depths=depths, model=_model())
    assert report.ok, (workload, report.problems)


@pytest.mark.parametrize("strategy", ["v2", "neuron", "v1"])
@FAST
@given(data=st.data())
def test_async_streams_equal_sync(strategy: Strategy, data: st.DataObject) -> None:
    _check(data, strategy)


@FAST
@given(data=st.data())
def test_spec_as_scheduler(data: st.DataObject) -> None:
    """The same oracle with the executable spec itself as the engine's scheduler."""
    _check(data, "v2", scheduler="spec")


@pytest.mark.campaign
@pytest.mark.parametrize("strategy", ["v2", "neuron", "v1"])
@CAMPAIGN
@given(data=st.data())
def test_campaign_async_streams_equal_sync(strategy: Strategy, data: st.DataObject) -> None:
    _check(data, strategy)
