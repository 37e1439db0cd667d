"""Counted calls: a coverage.py plugin that opens a dynamic context per call of a counted vLLM function.

coverage.py records which arcs ran, not how often.  For the functions of
``coverage_reasons.COUNTED`` this plugin names each call a context of its own
(``<qualified name>#<pid>.<n>``: coverage.py's ``dynamic_context`` hook starts
it when the function's frame starts and ends it when the frame returns), so
the arcs of one call are recorded apart.  The count of a scenario is then the
number of calls whose arcs hold every arc of it (``coverage_report.scenario_count``):
a call count, exact for arcs a call runs at most once, and the number of calls
that ran it at least once for an arc inside a loop (docs/coverage.md).

``--vllm-coverage`` loads it by name (coverage.py's ``plugins`` setting) in the
main process and in every ``--jobs`` worker, for ``--target vllm-engine`` only
(the scheduler target runs no model runner).  Imported only by coverage.py.
"""
from __future__ import annotations

import itertools
import os
from types import FrameType
from typing import Any

from coverage import CoveragePlugin

from asyncspec.statemachine_tests.core.coverage_reasons import COUNTED

SEPARATOR = "#"
"""Between a counted function's name and the call's number in a context name."""

_FUNCTIONS = frozenset(s.function for s in COUNTED)
_FILES = tuple(s.file.removeprefix("vllm/") for s in COUNTED)


class CallContexts(CoveragePlugin):
    """A context per call of a counted function."""

    def __init__(self) -> None:
        self._numbers = itertools.count()

    def dynamic_context(self, frame: FrameType) -> str | None:
        code = frame.f_code
        if code.co_qualname in _FUNCTIONS and code.co_filename.endswith(_FILES):
            return f"{code.co_qualname}{SEPARATOR}{os.getpid()}.{next(self._numbers)}"
        return None


def coverage_init(reg: Any, options: dict[str, str]) -> None:
    """coverage.py's entry point for a plugin named in its ``plugins`` setting."""
    reg.add_dynamic_context(CallContexts())
