"""The exit-code contract every command keeps (README, "Commands").

0 ok; 1 a finding (a violation, a divergence, a surviving mutant, a failed
proof); 2 bad usage or a bad input file, one line on stderr; 3 partial (the
run stopped before covering what was asked); 70 an internal error: an
unexpected exception inside asyncspec, one line on stderr and never click's
traceback with exit 1 (which CI would read as a finding); a closed stdout
(``| head``) ends the run with 3, its report incomplete.  Set
``ASYNCSPEC_TRACEBACK=1`` to see the traceback of an internal error.

``ContractGroup`` enforces it around every command; ``Choice`` is click's
choice with the nearest valid name suggested.
"""
from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterable, Sequence
from typing import Any, NoReturn

import click
from rich.console import Console

from asyncspec.checker import interrupt
from asyncspec.checker.schema import nearest
from asyncspec.checker.trace import TraceError
from asyncspec.spec.config import ConfigError
from asyncspec.statemachine_tests.core.replay_file import ReplayError

from asyncspec.cli.common import EXIT_INTERNAL, EXIT_PARTIAL, EXIT_USAGE

INPUT_ERRORS: tuple[type[Exception], ...] = (ConfigError, TraceError, ReplayError)
"""Exceptions that always mean a bad input file (their message is one line): exit 2."""


def one_line(text: str, limit: int = 400) -> str:
    """``text`` on one line, at most ``limit`` characters."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


class ContractGroup(click.Group):
    """A click group whose commands end with the contract's exit codes, whatever is raised."""

    def resolve_command(self, ctx: click.Context, args: list[str]) -> Any:
        name = args[0] if args else ""
        if name and not name.startswith("-") and self.get_command(ctx, name) is None:
            hint = nearest(name, self.list_commands(ctx))
            ctx.fail(f"No such command '{name}'{hint}; see 'asyncspec --help'.")
        return super().resolve_command(ctx, args)

    def main(self, *args: Any, **kwargs: Any) -> Any:
        Console.on_broken_pipe = _console_broken_pipe  # type: ignore[method-assign]  # rich's own exits 1
        return super().main(*args, **kwargs)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            try:
                return super().invoke(ctx)
            finally:
                sys.stdout.flush()  # a closed pipe shows here, not in click's handler (which exits 1)
        except (click.exceptions.ClickException, click.exceptions.Exit, click.exceptions.Abort, SystemExit):
            raise
        except KeyboardInterrupt:  # Ctrl-C or SIGTERM (checker/interrupt.py) where no command catches it
            print(f"asyncspec: {interrupt.reason()}; the command stopped before it could report",
                  file=sys.stderr)
            sys.exit(EXIT_PARTIAL)
        except BrokenPipeError:
            _closed_stdout()
        except INPUT_ERRORS as exc:
            print(f"asyncspec: error: {one_line(str(exc))}", file=sys.stderr)
            sys.exit(EXIT_USAGE)
        except Exception as exc:  # noqa: BLE001 - the contract: an internal error is one line and exit 70
            if os.environ.get("ASYNCSPEC_TRACEBACK"):
                raise
            where = _innermost_frame(exc)
            print(f"asyncspec: internal error: {type(exc).__name__}: {one_line(str(exc), 240)} ({where}); "
                  f"please report it with the command line (ASYNCSPEC_TRACEBACK=1 shows the traceback)",
                  file=sys.stderr)
            sys.exit(EXIT_INTERNAL)


def _closed_stdout() -> NoReturn:
    """The reader of stdout went away (``| head``): the report is incomplete, exit 3."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())  # no second error when Python flushes stdout at exit
    sys.exit(EXIT_PARTIAL)


def _console_broken_pipe(self: Console) -> None:
    _closed_stdout()


def _innermost_frame(exc: BaseException) -> str:
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    if tb is None:
        return "?"
    return f"{os.path.basename(tb.tb_frame.f_code.co_filename)}:{tb.tb_lineno}"


class Choice(click.Choice[str]):
    """``click.Choice`` whose error also names the nearest valid choice."""

    def __init__(self, choices: Sequence[str], case_sensitive: bool = True) -> None:
        super().__init__(choices, case_sensitive)

    def get_invalid_choice_message(self, value: Any, ctx: click.Context | None) -> str:
        message = super().get_invalid_choice_message(value, ctx)
        hint = nearest(str(value), [str(c) for c in self.choices])
        return message.rstrip(".") + (f"{hint}." if hint else ".")

    def get_missing_message(self, param: click.Parameter, ctx: click.Context | None) -> str:
        """One line (click's own puts each choice on a line of its own)."""
        return f"Choose from: {', '.join(str(c) for c in self.choices)}."


class LazyChoice(Choice):
    """A ``Choice`` whose names are loaded on first use (the help text, or a value to check), so that
    listing them in ``--help`` costs no import at start-up."""

    def __init__(self, load: Callable[[], Iterable[str]]) -> None:  # no super(): ``choices`` comes later
        self._load = load
        self.case_sensitive = True

    def __getattr__(self, name: str) -> Any:
        if name == "choices":  # first use: load and keep them
            self.choices = tuple(self._load())
            return self.choices
        raise AttributeError(name)
