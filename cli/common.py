"""What every command shares: exit codes, the report console, the one-line usage error.

Nothing here imports more than the standard library at start-up: the console
(rich) is made on a command's first line of output, so ``asyncspec --help`` and
a bad-usage error never import rich.
"""
from __future__ import annotations

import os
import sys
from functools import cache
from typing import TYPE_CHECKING, NoReturn

if TYPE_CHECKING:
    from rich.console import Console

EXIT_OK, EXIT_VIOLATION, EXIT_USAGE, EXIT_PARTIAL = 0, 1, 2, 3
EXIT_INTERNAL = 70  # an unexpected exception inside asyncspec (EX_SOFTWARE): one line, never a traceback


@cache
def out() -> Console:
    """The console a command prints its report on (stdout, 250 columns, no highlighting)."""
    from rich.console import Console

    return Console(highlight=False, soft_wrap=False, width=250)


def fail_usage(message: str) -> NoReturn:
    """One line on stderr, exit 2."""
    print(f"asyncspec: error: {message}", file=sys.stderr)
    sys.exit(EXIT_USAGE)


def run_again(environment: dict[str, str]) -> NoReturn:
    """This same ``asyncspec`` command again, in ``environment`` (what was printed so far flushed first):
    for what must be set before vLLM is imported (Model Runner V2's environment, ``--vllm-path``)."""
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, [sys.executable, "-m", "asyncspec", *sys.argv[1:]], environment)
