"""What every fuzz target shares: the workload and event language (``workload.py``,
``harness.py``), side-by-side reports, replay files and the end of a run.
"""
