"""The reference scheduler: a conventional engine-style implementation that refines the spec.

See ``docs/reference.md``.  Start with ``engine.EngineCore`` and ``scheduler.Scheduler``;
``abstraction.abstract`` maps its state to the spec's, ``refinement.check_refinement``
checks it exhaustively.
"""
