"""What every command shares: exit codes, the output consoles, the one-line usage error."""
from __future__ import annotations

import sys
from typing import NoReturn

from rich.console import Console

EXIT_OK, EXIT_VIOLATION, EXIT_USAGE, EXIT_PARTIAL = 0, 1, 2, 3
EXIT_INTERNAL = 70  # an unexpected exception inside asyncspec (EX_SOFTWARE): one line, never a traceback

out = Console(highlight=False, soft_wrap=False, width=250)
err = Console(stderr=True, highlight=False)


def fail_usage(message: str) -> NoReturn:
    """One line on stderr, exit 2."""
    print(f"asyncspec: error: {message}", file=sys.stderr)
    sys.exit(EXIT_USAGE)
