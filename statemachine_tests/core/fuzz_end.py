"""The end of every ``asyncspec fuzz`` run, whichever target ran the campaign.

The three campaign drivers (``fuzz.py`` for the reference and vLLM's scheduler,
``engine_fuzz.py`` for vLLM's production engine, ``sglang_fuzz.py`` for SGLang)
differ in what they run and how they print a divergence; they end the same way:
the divergence (if any), then the summary (``--json``: one object on stdout,
everything else on stderr), then the exit code of the contract (``cli/contract.py``):
0 no divergence, 1 a divergence, 3 partial.  A run is partial when it was
interrupted, completed no example, or stopped at ``--seconds`` before the
``--examples`` it was asked for, or skipped a part this vLLM lacks a surface of
(``core/skipped_parts.py``; "another vLLM" is never exit 70); the one line on stderr
says which, and what to change.
"""
from __future__ import annotations

import json
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from asyncspec.checker.atomic import WriteError, note_unsaved, take_unsaved, unsaved_line

EXIT_OK, EXIT_DIVERGENCE, EXIT_USAGE, EXIT_PARTIAL = 0, 1, 2, 3


@dataclass(frozen=True)
class Work:
    """How much of the work asked for a campaign did (not its coverage categories)."""

    done: int  # examples completed
    seconds: float  # the time budget (only an outer limit with ``--examples``)
    interrupted: bool  # Ctrl-C or SIGTERM
    cut_short: bool  # ``--seconds`` ended a fixed-work run (``--examples``) before its last example
    skipped: tuple[str, ...] = ()  # campaign parts not run: this vLLM lacks a surface they drive

    @property
    def complete(self) -> bool:
        return self.partial_reason() is None

    def partial_reason(self) -> str | None:
        """None when the run covered what was asked, else one line: what happened, what to change."""
        if self.interrupted:
            return f"interrupted after {self.done} examples (partial)"
        parts = f"{len(self.skipped)} part(s) skipped ({', '.join(self.skipped)}): this vLLM lacks a surface they drive"
        if self.done == 0 and self.skipped:
            return f"no example ran: {parts} (partial; skipped_parts says what each lacks)"
        if self.done == 0:
            return (f"no example completed within --seconds {self.seconds}; raise --seconds "
                    "(a run that checked nothing never passes)")
        if self.cut_short:
            return (f"--seconds {self.seconds} ran out after {self.done} examples, before the --examples asked "
                    "for (partial); raise --seconds or lower --examples")
        if self.skipped:
            return f"{parts} (partial; the other parts ran, skipped_parts says what each lacks)"
        return None


def fixed_work(done: int, examples: int | None, seconds: float, interrupted: bool,
               skipped: tuple[str, ...] = (), drawn: int | None = None) -> Work:
    """The work of a campaign asked for ``examples`` (None: time-bounded) that completed ``done``
    (``drawn``: done plus the examples of the ``skipped`` parts, which fill the range too)."""
    reached = done if drawn is None else drawn
    return Work(done, seconds, interrupted, cut_short=examples is not None and reached < examples, skipped=skipped)


def result_word(found: bool, work: Work) -> str:
    """The ``result`` field of ``--json``: divergence, ok or partial."""
    return "divergence" if found else "ok" if work.complete else "partial"


def finish(summary: dict[str, Any], found: bool, work: Work, json_out: bool,
           show_divergence: Callable[[], None], show_summary: Callable[[], None]) -> int:
    """Print the divergence and the summary in the contract's order; return the exit code (a replay
    file that could not be written: the report still printed, with ``unsaved_files``, then one line
    and 2, or 3 where the run was cut short).  A ``--vllm-coverage`` measurement ends here (``vllm_coverage``)."""
    from asyncspec.statemachine_tests.core.vllm_coverage import into_summary

    summary = into_summary(summary)
    unsaved = take_unsaved()
    if unsaved:
        summary = {**summary, "unsaved_files": [str(exc) for exc in unsaved]}
    if found:
        show_divergence()
    if json_out:
        sys.stdout.write(json.dumps(summary) + "\n")
    else:
        show_summary()
    reason = work.partial_reason()
    if unsaved:  # the findings are printed above; the files that hold them are not all there
        print(unsaved_line(unsaved), file=sys.stderr)
        return EXIT_PARTIAL if reason is not None else EXIT_USAGE
    if found:
        return EXIT_DIVERGENCE
    if reason is not None:
        print(f"fuzz: {reason}", file=sys.stderr)
        return EXIT_PARTIAL
    return EXIT_OK


def saved(write: Callable[[], None]) -> bool:
    """Run ``write`` (a replay file's); False if it could not be written: the failure is noted and
    answered at the run's end (``finish``), after the report, so the divergence is still printed."""
    try:
        write()
    except WriteError as exc:
        note_unsaved(exc)
        return False
    return True
