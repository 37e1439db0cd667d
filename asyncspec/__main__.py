"""``python -m asyncspec`` runs the command line; its first act is to install the start-up signal
handlers (``cli/early_signals.py``), before click or anything heavy is imported."""
from asyncspec.cli import early_signals

early_signals.install()

from asyncspec.cli.main import main  # noqa: E402 - after the signal handlers

main()
