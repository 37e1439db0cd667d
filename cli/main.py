"""The ``asyncspec`` command line: the command group and the table of its commands.

Exit codes (every command; ``cli/contract.py``): 0 all good; 1 a property is
violated, a mutant survived, a witness was never reached, or a proof failed;
2 bad usage, a bad config or an unreadable trace (one-line error); 3 an
exploration stopped early (``--max-states`` or Ctrl-C) without finding a
violation: the report says what it covered and is marked partial; 70 an
internal error (one line, no traceback).

Each command lives in the module ``COMMANDS`` names and is imported only when it
runs, so ``asyncspec --help`` imports click and nothing heavy; the table keeps
each command's short help for that listing.  Started as the ``asyncspec``
script, the program's first act is to install the start-up signal handlers
(``cli/early_signals.py``), before click is imported.
"""
from __future__ import annotations

from asyncspec.cli import early_signals

if early_signals.started_as_the_asyncspec_script():  # pragma: no cover - the console script's first act
    early_signals.install()

import click  # noqa: E402 - after the signal handlers

from asyncspec.cli.contract import CommandEntry, ContractGroup  # noqa: E402

_CLI = "asyncspec.cli."

COMMANDS: tuple[CommandEntry, ...] = (
    CommandEntry("backtest", _CLI + "backtest_command", "backtest",
                 "Run every target's fixed-work campaign on each vLLM release in PYTHONS (venv folders or Python "
                 "executables, one release each), classify each divergence bucket from the hand-kept table, and "
                 "replay it on the next newer release given."),
    CommandEntry("check", _CLI + "check_command", "check",
                 "Explore every reachable state of each config and check every property."),
    CommandEntry("configs", _CLI + "check_command", "list_configs",
                 "List the named configs, their set and pinned state counts."),
    CommandEntry("demo", _CLI + "check_command", "demo",
                 "Replay the explainer's cases: the max_tokens guard, and EOS wasting D - 1 steps at depth 2 and 3."),
    CommandEntry("drift", _CLI + "fidelity_commands", "drift",
                 "Which vLLM functions the spec and drivers depend on changed in OTHER (a vLLM wheel, sdist or "
                 "source folder) against the installed vLLM."),
    CommandEntry("explain-config", _CLI + "fidelity_commands", "explain_config",
                 "Say whether vLLM 0.33.0 runs async scheduling for a setting, and which rule decided."),
    CommandEntry("fuzz", _CLI + "fuzz_command", "fuzz",
                 "Differential fuzzing: the engine under test against the spec, event by event."),
    CommandEntry("mutants", _CLI + "spec_commands", "mutants",
                 "Check that every seeded spec bug is killed by the checker."),
    CommandEntry("mutate-vllm", _CLI + "fuzz_command", "mutate_vllm",
                 "Self-test: one-line vLLM bugs in a private import overlay, and which fuzz target kills each."),
    CommandEntry("prove", _CLI + "spec_commands", "prove",
                 "Prove the counter invariants inductive for unbounded parameters (z3)."),
    CommandEntry("replay", _CLI + "replay_command", "replay",
                 "Re-execute a saved trace against the spec (or an engine) and re-check it."),
    CommandEntry("sweep", _CLI + "check_command", "sweep",
                 "Check every combination of a few settings on one set of requests."),
    CommandEntry("worker", _CLI + "spec_commands", "worker",
                 "Check the worker side (token feedback) composed with the scheduler spec."),
)
"""Every command: its name, where it lives, its short help (the first sentence of its docstring)."""


@click.group(cls=ContractGroup, entries=COMMANDS, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="asyncspec")
def main() -> None:
    """Model-check, prove and fuzz async scheduling of LLM inference engines."""


if __name__ == "__main__":
    main()
