"""The compiled explorer's cycle finder (``csrc/scc.h``) held to ``checker/scc.py``: the same
smallest node of every cycle-holding component on random graphs (self-loops, chains, many small
and one deep component), on a path deep enough that a recursive search would overflow the C stack,
and on every pinned config's graph; malformed CSR input refused with one error."""
from __future__ import annotations

import random
from array import array

import pytest

from asyncspec.checker import compiled, scc
from asyncspec.checker.configs import named_configs

pytestmark = pytest.mark.skipif(not compiled.built(), reason=compiled.NOT_BUILT)


def _c_cycles(start: list[int], target: list[int]) -> list[int]:
    found: list[int] = compiled._C.cycle_nodes(array("I", start).tobytes(), array("I", target).tobytes())
    return found


def _random_graph(rng: random.Random) -> tuple[list[int], list[int]]:
    n = rng.randint(1, 60)
    fanout = rng.choice([(0, 1, 1, 2), (0, 1, 2, 3), (1,), (0, 0, 1)])
    local = rng.random() < 0.5  # edges mostly to nearby nodes: long chains and nested components
    start, target = [0], []
    for v in range(n):
        for _ in range(rng.choice(fanout)):
            target.append(min(n - 1, max(0, v + rng.randint(-3, 3))) if local else rng.randrange(n))
        start.append(len(target))
    return start, target


def test_c_cycles_equal_the_python_tarjan_on_random_graphs() -> None:
    rng = random.Random(11)
    seen_cycles = 0
    for _ in range(2000):
        start, target = _random_graph(rng)
        expected = scc.cycle_nodes(start, target)
        assert _c_cycles(start, target) == expected, (start, target)
        seen_cycles += bool(expected)
    assert 300 < seen_cycles < 1900  # both kinds of graph were drawn


def test_a_deep_path_and_its_back_edge() -> None:
    n = 200_000  # 0 -> 1 -> ... -> n-1 -> 0: one component, found without recursion
    start = list(range(n + 1))
    target = list(range(1, n)) + [0]
    assert _c_cycles(start, target) == [0]
    assert _c_cycles(start, list(range(1, n)) + [n - 1]) == [n - 1]  # only the last node's self-loop


def test_malformed_csr_is_refused() -> None:
    with pytest.raises(ValueError, match="not a CSR graph"):
        _c_cycles([0, 1], [5])
    with pytest.raises(ValueError, match="not a CSR graph"):
        _c_cycles([0, 2], [0])


@pytest.mark.parametrize("name, cyclic", [("async-d2-aborts", False), ("async-d2-pause", False),
                                          ("finding-stream-paused-starves", True), ("kv-invalid-blocks", True),
                                          ("kv-sends-aborts", True)])
def test_explorer_cycles_equal_the_python_tarjan_on_pinned_graphs(name: str, cyclic: bool) -> None:
    c = compiled.CompiledExplorer(named_configs()[name])
    c.run()
    start, target = (memoryview(b).cast("I") for b in c.c.csr())
    found = c.c.cycles()
    assert found == scc.cycle_nodes(start, target)
    assert bool(found) == cyclic  # graphs with and without cycles (and with edges back either way)
    assert c.c.stats()["back_edges"] > 0
