"""asyncspec: an executable, model-checked specification of async scheduling.

The package maps the repository's top-level folders into one namespace:
``asyncspec.spec`` (spec/), ``asyncspec.checker`` (checker/),
``asyncspec.proofs`` (proofs/), ``asyncspec.reference`` (reference/),
``asyncspec.engine`` (engine/); this folder (cli/) is the package root and
holds the command line.  See ARCHITECTURE.md for a reading order.
"""

__version__ = "0.1.0"
