"""The two phases every search strategy runs: the search, then the graph properties.

The search runs with the garbage collector off (the spec's states hold no
reference cycles; the collector only costs time; a model whose states do,
the reference harness's, keeps it on: ``Model.cyclic_states``); Ctrl-C (or SIGTERM, on
Ctrl-C's path: ``checker/interrupt.py``) ends it with a partial result.  The
graph phase (the *eventually* properties, SCCs) runs only after a search that
reached its end without a stop; an interrupt there is a partial result too.
A search inside a command that runs several (``asyncspec worker``, the
refinement check, ``check --show-witness``) lets the interrupt go on instead,
so the command stops and reports it.

Example:
    >>> reasons = []
    >>> run_phases(lambda: None, lambda: reasons.append("graph"), reasons.append, lambda: True)
    >>> reasons
    ['graph']
"""
from __future__ import annotations

import gc
from collections.abc import Callable

from asyncspec.checker import interrupt

GRAPH_PHASE = "in the graph phase (deadlock/livelock analysis)"


def run_phases(search: Callable[[], None], graph_phase: Callable[[], None],
               partial: Callable[[str], None] | None, complete: Callable[[], bool],
               collect: bool = False) -> None:
    """``search()``, then ``graph_phase()`` if ``complete()``; ``partial(reason)`` on an interrupt
    (``partial=None``: the ``KeyboardInterrupt`` goes on to the caller, who reports it);
    ``collect``: the collector stays on (the model's states hold reference cycles)."""
    gc_was_enabled = gc.isenabled()
    if not collect:
        gc.disable()
    try:
        search()
    except KeyboardInterrupt:
        if partial is None:
            raise
        partial(interrupt.reason())
    finally:
        if gc_was_enabled:
            gc.enable()
    if complete():
        try:
            graph_phase()
        except KeyboardInterrupt:
            if partial is None:
                raise
            partial(f"{interrupt.reason()} {GRAPH_PHASE}")
