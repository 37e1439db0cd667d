"""Cycles of a graph in CSR form: an iterative Tarjan, no graph objects.

``cycle_nodes`` returns what ``checker/graph.cycle_nodes`` returns for the
same graph (the smallest node of every strongly connected component that
holds a cycle, sorted), over two flat arrays instead of a networkx graph,
so it scales to millions of states.

Example (0 -> 1 -> 2 -> 1, 3 -> 3):
    >>> from array import array
    >>> cycle_nodes(array("I", [0, 1, 2, 3, 4]), array("i", [1, 2, 1, 3]))
    [1, 3]
"""
from __future__ import annotations

from array import array
from collections.abc import Sequence


def cycle_nodes(start: Sequence[int], target: Sequence[int]) -> list[int]:
    """The smallest node of every cycle-holding component, ascending.

    Node ``v``'s successors are ``target[start[v]:start[v + 1]]``; there are
    ``len(start) - 1`` nodes.
    """
    n = len(start) - 1
    index = array("i", [-1]) * n
    low = array("i", [0]) * n
    on_stack = bytearray(n)
    stack: list[int] = []
    reps: list[int] = []
    counter = 0
    for root in range(n):
        if index[root] >= 0:
            continue
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack[root] = 1
        work = [[root, start[root]]]
        while work:
            frame = work[-1]
            v, e = frame
            if e < start[v + 1]:
                frame[1] = e + 1
                w = target[e]
                if index[w] < 0:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on_stack[w] = 1
                    work.append([w, start[w]])
                elif on_stack[w] and index[w] < low[v]:
                    low[v] = index[w]
                continue
            work.pop()
            if work:
                u = work[-1][0]
                if low[v] < low[u]:
                    low[u] = low[v]
            if low[v] == index[v]:
                rep = _pop_component(stack, on_stack, v, start, target)
                if rep is not None:
                    reps.append(rep)
    return sorted(reps)


def _pop_component(stack: list[int], on_stack: bytearray, v: int,
                   start: Sequence[int], target: Sequence[int]) -> int | None:
    """Pop ``v``'s component; its smallest node if it holds a cycle."""
    smallest, size = v, 0
    while True:
        w = stack.pop()
        on_stack[w] = 0
        size += 1
        smallest = min(smallest, w)
        if w == v:
            break
    if size > 1 or any(target[e] == v for e in range(start[v], start[v + 1])):
        return smallest
    return None
