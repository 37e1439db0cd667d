"""The plain explorer's whole runs of the named configs, each made once per test session.

``tests/test_checker.py`` (pinned counts, witnesses) and ``tests/test_fast_explorer.py`` (fast against
plain, state by state) read the same exploration of a named config; running it once for both keeps the
default tier's time down.  Callers must not change what they get.
"""
from __future__ import annotations

import functools

from asyncspec.checker import configs as cfgs
from asyncspec.checker.bfs import Explorer
from asyncspec.checker.result import CheckResult


@functools.lru_cache(maxsize=None)
def plain_run(name: str) -> tuple[Explorer, CheckResult]:
    """The finished plain explorer of named config ``name`` (``stop_on_first=False``) and its result."""
    explorer = Explorer(cfgs.named_configs()[name], stop_on_first=False)
    return explorer, explorer.run()
