"""The exit-code contract every command keeps (README, "Commands").

0 ok; 1 a finding (a violation, a divergence, a surviving mutant, a failed
proof); 2 bad usage or a bad input file, one line on stderr; 3 partial (the
run stopped before covering what was asked, or a signal stopped it before it
could report); 70 an internal error: an unexpected exception inside asyncspec,
one line on stderr and never click's traceback with exit 1 (which CI would
read as a finding); a closed stdout (``| head``) ends the run with 3, its
report incomplete.  Set ``ASYNCSPEC_TRACEBACK=1`` to see the traceback of an
internal error.

``ContractGroup`` enforces it around every command and loads a command's
module only when that command runs (``cli/main.py`` holds the table);
``ContractCommand`` sets up what every run shares once its command line is
parsed; ``Choice`` is click's choice with the nearest valid name suggested.
Nothing here imports more than click at start-up.
"""
from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NoReturn

import click

from asyncspec.checker import interrupt
from asyncspec.cli.common import EXIT_INTERNAL, EXIT_PARTIAL, EXIT_USAGE
from asyncspec.cli import early_signals
from asyncspec.cli.early_signals import hand_over, stopped_line

if TYPE_CHECKING:
    from rich.console import Console

INPUT_ERRORS: tuple[tuple[str, str], ...] = (
    ("asyncspec.spec.config", "ConfigError"), ("asyncspec.checker.trace", "TraceError"),
    ("asyncspec.statemachine_tests.core.replay_file", "ReplayError"), ("asyncspec.checker.atomic", "WriteError"))
"""Exceptions (module, class) that always mean a bad input file or an unwritable output (their message is
one line): exit 2."""


def input_errors() -> tuple[type[BaseException], ...]:
    """The classes of ``INPUT_ERRORS`` whose module is imported (no other can have been raised)."""
    return tuple(getattr(sys.modules[module], name) for module, name in INPUT_ERRORS if module in sys.modules)


def _nearest(name: str, names: Iterable[str]) -> str:
    """`` (did you mean 'X'?)`` for the closest of ``names``, or '' (``checker/schema.py``'s, loaded on use)."""
    from asyncspec.checker.schema import nearest as closest

    return closest(name, names)


def one_line(text: str, limit: int = 400) -> str:
    """``text`` on one line, at most ``limit`` characters."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


@dataclass(frozen=True)
class CommandEntry:
    """One command of the group: where it lives and the short help ``asyncspec --help`` lists."""

    name: str
    module: str
    attribute: str
    short_help: str
    """The first sentence of the command's docstring (a test keeps them equal)."""

    def load(self) -> click.Command:
        """Import the command's module; the command (a ``ContractCommand``)."""
        command = getattr(importlib.import_module(self.module), self.attribute)
        if not isinstance(command, ContractCommand):
            raise TypeError(f"{self.module}.{self.attribute} is not a ContractCommand")
        return command


class ContractGroup(click.Group):
    """A click group whose commands end with the contract's exit codes, whatever is raised,
    and whose commands are imported only when one runs (``entries``)."""

    def __init__(self, *args: Any, entries: Sequence[CommandEntry] = (), **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.entries = {e.name: e for e in entries}

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*self.entries, *self.commands})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        entry = self.entries.get(cmd_name)
        return entry.load() if entry is not None else super().get_command(ctx, cmd_name)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """click's listing, from the table's short help: listing imports no command."""
        names = self.list_commands(ctx)
        if not names:
            return
        limit = formatter.width - 6 - max(len(n) for n in names)
        rows = [(n, _listed(self, ctx, n).get_short_help_str(limit)) for n in names]
        with formatter.section("Commands"):
            formatter.write_dl(rows)

    def resolve_command(self, ctx: click.Context, args: list[str]) -> Any:
        name = args[0] if args else ""
        if name and not name.startswith("-") and name not in self.list_commands(ctx):
            hint = _nearest(name, self.list_commands(ctx))
            ctx.fail(f"No such command '{name}'{hint}; see 'asyncspec --help'.")
        return super().resolve_command(ctx, args)

    def main(self, *args: Any, **kwargs: Any) -> Any:
        uninstall = hand_over()  # Ctrl-C and SIGTERM: one path from here on (checker/interrupt.py)
        try:
            return super().main(*args, **kwargs)
        finally:
            _forget_caught_interrupts()
            if early_signals.started_here():
                with interrupt.catching():  # the report is out and the exit code decided: a signal changes neither
                    interrupt.pause_point("reported")  # a test signals here (checker/interrupt.py)
                interrupt.ignore_from_now()  # nor kills the program while Python shuts down
            else:
                uninstall()  # run inside another program (a test): its own handlers back

    def make_context(self, info_name: str | None, args: list[str], parent: click.Context | None = None,
                     **extra: Any) -> click.Context:
        try:
            return super().make_context(info_name, args, parent, **extra)
        except KeyboardInterrupt:  # while the group's own options are read (click would say "Aborted!", exit 1)
            _stopped()

    def invoke(self, ctx: click.Context) -> Any:
        try:
            try:
                return super().invoke(ctx)
            finally:
                sys.stdout.flush()  # a closed pipe shows here, not in click's handler (which exits 1)
        except SystemExit as exc:
            if exc.code in (0, None) and interrupt.requested():  # a signal the command did not answer
                _stopped_after(str(exc.code or 0))
            raise
        except (click.exceptions.ClickException, click.exceptions.Exit, click.exceptions.Abort):
            raise
        except KeyboardInterrupt:  # Ctrl-C or SIGTERM (checker/interrupt.py) where no command catches it
            _stopped()
        except BrokenPipeError:
            _closed_stdout()
        except Exception as exc:  # noqa: BLE001 - the contract: an internal error is one line and exit 70
            if _caused_by_an_interrupt(exc):
                _stopped()
            if isinstance(exc, input_errors()):
                print(f"asyncspec: error: {one_line(str(exc))}", file=sys.stderr)
                sys.exit(EXIT_USAGE)
            if os.environ.get("ASYNCSPEC_TRACEBACK"):
                raise
            where = _innermost_frame(exc)
            print(f"asyncspec: internal error: {type(exc).__name__}: {one_line(str(exc), 240)} ({where}); "
                  f"please report it with the command line (ASYNCSPEC_TRACEBACK=1 shows the traceback)",
                  file=sys.stderr)
            sys.exit(EXIT_INTERNAL)


def _listed(group: ContractGroup, ctx: click.Context, name: str) -> click.Command:
    """What ``--help`` lists for ``name``: a stand-in carrying the table's short help, or the command itself."""
    entry = group.entries.get(name)
    if entry is None:
        command = group.get_command(ctx, name)
        assert command is not None  # listed by list_commands
        return command
    return click.Command(name, help=entry.short_help)


class ContractCommand(click.Command):
    """A command that, once its command line is parsed and before it runs, sets up what every run
    shares: a closed stdout is exit 3 (rich's own handler exits 1), and every saved trace gets its
    explorer page beside it (``explorer/beside.py``)."""

    def invoke(self, ctx: click.Context) -> Any:
        from rich.console import Console

        from asyncspec.explorer.beside import install_html_hooks

        Console.on_broken_pipe = _console_broken_pipe  # type: ignore[method-assign]
        install_html_hooks()
        interrupt.pause_point("start-up")  # a test signals here (checker/interrupt.py)
        with interrupt.armed():  # from here a signal becomes the command's partial report
            return super().invoke(ctx)


def _forget_caught_interrupts() -> None:
    """Keep the exit code of a command that caught a ``KeyboardInterrupt``.  CPython 3.11 marks an
    interrupt raised inside code run by ``exec`` of a string (a dataclass or named tuple being made,
    e.g. while a module is imported) as unhandled even when it is caught, and at exit kills the
    process with SIGINT instead (exit -2); running ``exec`` of a string again clears that mark."""
    exec("None")  # noqa: S102 - a constant: only the interpreter's mark changes


def _caused_by_an_interrupt(exc: BaseException) -> bool:
    """``exc`` was raised because of a ``KeyboardInterrupt`` (Python 3.11 wraps one raised while a class
    is made, e.g. while a module is imported, in a ``RuntimeError``)."""
    seen: set[int] = set()
    cause: BaseException | None = exc
    while cause is not None and id(cause) not in seen:
        if isinstance(cause, KeyboardInterrupt):
            return True
        seen.add(id(cause))
        cause = cause.__cause__ or cause.__context__
    return False


def _stopped() -> NoReturn:
    """A signal stopped the command before it could report: one line, exit 3."""
    print(stopped_line(), file=sys.stderr)
    sys.exit(EXIT_PARTIAL)


def _stopped_after(code: str) -> NoReturn:
    """A signal came while the command ran and the command still ended with exit ``code`` 0: the run
    did not finish as asked (what it printed stands); one line, exit 3."""
    print(f"asyncspec: {interrupt.reason()}; the report above may not cover all that was asked", file=sys.stderr)
    sys.exit(EXIT_PARTIAL)


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
        hint = _nearest(str(value), [str(c) for c in self.choices])
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
