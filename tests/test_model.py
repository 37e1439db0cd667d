"""The Model interface (checker/model.py) and the one breadth-first Search over it:
a toy model whose graph is known by hand, and the three models of the project
(the scheduler spec, scheduler + worker, the reference's abstraction)."""
from __future__ import annotations

import doctest
from collections.abc import Collection, Iterator
from typing import Any

import pytest

from asyncspec.checker import bfs, checkpoint, configs as cfgs, model, phases, spec_model, whole, witness
from asyncspec.checker.bfs import Search
from asyncspec.checker.fast_explorer import FastExplorer, explore_fast
from asyncspec.checker.fast_parallel import PoolExpander
from asyncspec.checker.joint import JointModel, explore_joint
from asyncspec.checker.model import Edge, Found, Model
from asyncspec.checker.spec_model import SpecModel
from asyncspec.checker.state_graph import StateGraph
from asyncspec.checker.trace import Trace
from asyncspec.reference.reference_mutants import MUTANTS_BY_NAME, applied
from asyncspec.reference.refinement import RefinementChecker, RefinementModel, Refuted
from asyncspec.spec.config import SpecConfig
from asyncspec.spec.engine import Action
from asyncspec.spec.worker import WorkerConfig

from pathlib import Path

TINY = SpecConfig(name="tiny", requests=((2, 1),), num_blocks=1, block_size=4)


class Counter(Model[int, Action]):
    """0 -> 1 -> ... -> top (a deadlock at top unless it wraps); 'bad' fails at ``bad``;
    the canonical form of n is n mod ``period`` (so with period 2 only 0 and 1 exist)."""

    def __init__(self, top: int, bad: int | None = None, wrap: bool = False, period: int = 0) -> None:
        self.name, self.top, self.bad, self.wrap, self.period = "counter", top, bad, wrap, period
        self.witnesses = ("wrapped", "never")
        self.required_witnesses = ("wrapped",)

    def initial_states(self) -> list[int]:
        return [0]

    def next_states(self, s: int) -> list[Edge[int, Action]]:
        if s < self.top:
            return [Edge(Action("inc"), s + 1, frozenset())]
        return [Edge(Action("wrap"), 0, frozenset({"wrapped"}))] if self.wrap else []

    def canonical(self, s: int) -> int:
        return s % self.period if self.period else s

    def always(self, s: int, skip: Collection[str]) -> Found:
        return [("bad", f"at {s}")] if s == self.bad and "bad" not in skip else []

    def eventually(self, g: StateGraph[Any, Action]) -> Iterator[tuple[str, int, str]]:
        terminal = [i for i, succ in enumerate(g.edges) if not succ]
        if terminal:
            yield "no_deadlock", terminal[0], "stuck"

    def trace(self, root: Any, actions: list[Action], violated: str) -> Trace:
        return Trace(TINY, (), actions, violated=violated)


def test_search_on_a_toy_model_counts_and_reports_by_hand() -> None:
    r = Search(Counter(3)).run()
    assert (r.distinct_states, r.transitions, r.depth) == (4, 3, 3)
    assert [v.property for v in r.violations] == ["no_deadlock"]
    assert [str(a) for a in r.violations[0].trace.actions] == ["inc"] * 3
    assert r.vacuous == ["wrapped"] and not r.ok


def test_search_on_a_toy_model_wraps_and_stops_on_first() -> None:
    looping = Search(Counter(3, wrap=True)).run()
    assert looping.ok and looping.transitions == 4 and looping.witnesses == {"wrapped": True, "never": False}
    first = Search(Counter(5, bad=2)).run()
    assert [v.property for v in first.violations] == ["bad"]
    assert first.distinct_states == 3  # 0, 1, 2: the parent of 2 was the last one expanded
    assert [str(a) for a in first.violations[0].trace.actions] == ["inc", "inc"]


def test_search_identifies_states_by_their_canonical_form() -> None:
    r = Search(Counter(5, wrap=True, period=2)).run()
    assert r.distinct_states == 2  # 0 and 1; 2 is 0 again


def test_max_states_and_the_expected_violation_of_a_finding() -> None:
    capped = Search(Counter(10), max_states=3).run()
    assert capped.partial and capped.partial_reason == "stopped at --max-states 3"
    m = Counter(5, bad=2)
    m.expect_violation = "bad"  # a finding: its violation does not end the run
    r = Search(m).run()
    assert [v.property for v in r.violations] == ["bad", "no_deadlock"]


class Interrupted(Counter):
    """Ctrl-C while expanding the state ``at``."""

    def __init__(self, at: int) -> None:
        super().__init__(5)
        self.at = at

    def next_states(self, s: int) -> list[Edge[int, Action]]:
        if s == self.at:
            raise KeyboardInterrupt
        return super().next_states(s)


def test_an_interrupt_is_a_partial_result_or_goes_on_to_the_caller() -> None:
    r = Search(Interrupted(2)).run()
    assert r.partial and r.partial_reason == "interrupted" and r.distinct_states == 3
    with pytest.raises(KeyboardInterrupt):  # a command running several searches stops (exit 3)
        Search(Interrupted(2), partial_on_interrupt=False).run()


def test_the_spec_model_is_what_both_explorers_explore() -> None:
    cfg = cfgs.named_configs()["async-d2-aborts"]
    plain, fast = Search(SpecModel(cfg), stop_on_first=False).run(), explore_fast(cfg, stop_on_first=False)
    pinned = cfgs.load_manifest()[cfg.name]
    assert plain.distinct_states == fast.distinct_states == pinned["distinct_states"]
    assert plain.transitions == fast.transitions


def test_the_joint_model_is_searched_like_any_model() -> None:
    cfg = cfgs.named_configs()["async-d2"]
    direct = Search(JointModel(cfg, WorkerConfig("v2"), ())).run()
    assert direct.name == "async-d2/v2" and direct.ok
    assert direct.to_json() | {"seconds": 0} == explore_joint(cfg, "v2", required_witnesses=()).to_json() | {"seconds": 0}


def test_a_refuted_state_ends_the_refinement_search_and_is_not_counted() -> None:
    m = MUTANTS_BY_NAME["free_immediately_despite_deferral"]
    with applied(m):
        checker = RefinementChecker(cfgs.named_configs()[m.config])
        result = checker.run()
    g = checker.search.graph
    assert isinstance(g.states[-1], Refuted) and result.distinct_states == len(g.states) - 1
    assert result.mismatch is not None and result.mismatch.kind == g.states[-1].kind
    assert result.mismatch.actions == g.path_to(len(g.states) - 1)[1]


def _json(r: Any) -> dict[str, Any]:
    data: dict[str, Any] = r.to_json()
    del data["seconds"]
    return data


@pytest.mark.parametrize("strategy", ["v1", "v2", "neuron"])
def test_the_fast_explorer_explores_the_joint_model_as_the_plain_search_does(strategy: str) -> None:
    cfg = cfgs.worker_configs()["worker-d3"]
    plain = Search(JointModel(cfg, WorkerConfig(strategy), ()), stop_on_first=False).run()
    fast = FastExplorer(cfg, stop_on_first=False, model=JointModel(cfg, WorkerConfig(strategy), ())).run()
    assert _json(fast) == _json(plain) and plain.distinct_states > 300
    assert (strategy == "v2") == plain.ok  # V1 and Neuron fail W1 at D=3 (docs/worker.md)
    m = JointModel(cfg, WorkerConfig(strategy), ())
    jobs = FastExplorer(cfg, stop_on_first=False, model=m, expander=PoolExpander(cfg, 2, model=m)).run()
    assert _json(jobs) == _json(plain)


@pytest.mark.slow
def test_ray_workers_explore_the_joint_model() -> None:
    """The actors receive the explorer's model (a local Ray cluster of two CPUs, 10-20 s)."""
    pytest.importorskip("ray")
    from asyncspec.checker.fast_parallel import RayExpander

    cfg = cfgs.worker_configs()["worker-d2"]
    plain = Search(JointModel(cfg, WorkerConfig("neuron"), ()), stop_on_first=False).run()
    m = JointModel(cfg, WorkerConfig("neuron"), ())
    ray = FastExplorer(cfg, stop_on_first=False, model=m, expander=RayExpander(cfg, 2, "local", model=m)).run()
    assert _json(ray) == _json(plain)


def test_a_joint_model_checkpoint_resumes_and_names_its_model(tmp_path: Path) -> None:
    cfg = cfgs.worker_configs()["worker-d2"]
    whole_run = _json(FastExplorer(cfg, model=JointModel(cfg, WorkerConfig("neuron"), ())).run())
    path = tmp_path / "w.ckpt"
    first = FastExplorer(cfg, max_states=50, checkpoint=path, model=JointModel(cfg, WorkerConfig("neuron"), ()))
    assert first.run().partial and path.exists()
    with pytest.raises(checkpoint.CheckpointError, match="'worker-d2/neuron'.*not of 'worker-d2/v2'"):
        FastExplorer(cfg, checkpoint=path, resume=True, model=JointModel(cfg, WorkerConfig("v2"), ())).run()
    resumed = FastExplorer(cfg, checkpoint=path, resume=True, model=JointModel(cfg, WorkerConfig("neuron"), ()))
    assert _json(resumed.run()) == whole_run and resumed.store.arity == 1


def test_the_fast_explorer_explores_the_refinement_model_as_the_plain_search_does() -> None:
    cfg = cfgs.named_configs()["async-d2-defer"]
    plain, fast = Search(RefinementModel(cfg)).run(), FastExplorer(cfg, model=RefinementModel(cfg)).run()
    assert _json(fast) == _json(plain) and plain.ok
    assert plain.distinct_states == cfgs.load_manifest()[cfg.name]["distinct_states"]
    m = MUTANTS_BY_NAME["free_immediately_despite_deferral"]
    with applied(m):
        plain, fast = Search(RefinementModel(cfg)).run(), FastExplorer(cfg, model=RefinementModel(cfg)).run()
    assert [v.property for v in plain.violations] == ["refines_spec"] and _json(fast) == _json(plain)


@pytest.mark.parametrize("module", [model, spec_model, phases, bfs, witness, whole])
def test_doctests(module: Any) -> None:
    assert doctest.testmod(module).failed == 0
