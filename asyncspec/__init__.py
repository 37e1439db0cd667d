"""asyncspec: an executable, model-checked specification of async scheduling.

The package maps the repository's top-level folders into one namespace:
``asyncspec.spec`` (spec/), ``asyncspec.checker`` (checker/), ``asyncspec.cli``
(cli/, the command line), and so on.  This folder is the package root and holds
only what a user imports: ``python -m asyncspec`` and the pytest plugin
(``asyncspec.pytest_plugin``).  See ARCHITECTURE.md for a reading order.
"""

__version__ = "0.1.0"
