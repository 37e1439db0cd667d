"""``python -m asyncspec`` runs the command line."""
from asyncspec.cli.main import main

main()
