"""``python -m asyncspec`` runs the command line."""
from asyncspec.main import main

main()
