"""The shortest way back: a bounded breadth-first search for the actions that lead from a state back to
it (or to a state with the same key, e.g. its canonical form), which a livelock's replay and its explorer
page show as the loop of a lasso.

Example (a counter mod 3, one action "+1"):
    >>> path_back(0, lambda s: [((s + 1) % 3, "+1")], limit=10)
    ['+1', '+1', '+1']
    >>> path_back(0, lambda s: [(min(s + 1, 2), "+1")], limit=10) is None
    True
"""
from __future__ import annotations

from collections import deque
from collections.abc import Callable, Hashable, Iterable
from typing import TypeVar

S = TypeVar("S")
A = TypeVar("A")


def path_back(start: S, successors: Callable[[S], Iterable[tuple[S, A]]], limit: int,
              key: Callable[[S], Hashable] = lambda s: s) -> list[A] | None:
    """The shortest non-empty list of actions from ``start`` to a state whose ``key`` is ``start``'s,
    searching at most ``limit`` distinct keys; None if there is none within them."""
    goal = key(start)
    parents: dict[Hashable, tuple[Hashable, A] | None] = {goal: None}
    queue: deque[tuple[S, Hashable]] = deque([(start, goal)])
    while queue and len(parents) < limit:
        state, node = queue.popleft()
        for succ, action in successors(state):
            k = key(succ)
            if k == goal:
                path = [action]
                while (link := parents[node]) is not None:
                    node, back = link
                    path.append(back)
                return path[::-1]
            if k not in parents:
                parents[k] = (node, action)
                queue.append((succ, k))
    return None
