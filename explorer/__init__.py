"""The trace explorer and the documentation site's generated tables.

``asyncspec replay FILE --html OUT`` (and ``check``/``fuzz``, next to each
trace they save) writes one self-contained HTML page: a trace as swim lanes,
one lane per request (``data-request="r0"``), steps across, the batch queue
and the block pool beside them; a click on a step shows its counters, the
spec action with its source and vLLM citation, and what was scheduled.  It
reads every trace kind: checker counterexamples (``checker/trace.py``),
lasso traces of a livelock, and fuzz divergence files
(``statemachine_tests/core/replay_file.py``), spec and target side by side.

``site.py`` generates the tables of the mkdocs site from the code.
"""
