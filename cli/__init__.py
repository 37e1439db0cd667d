"""The ``asyncspec`` command line: the command group (``main.py``) and one module per command group."""
