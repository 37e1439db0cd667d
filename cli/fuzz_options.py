"""Which options each ``asyncspec fuzz`` target takes: one table, checked in one place.

``RULES`` is the table, checked in its order by ``target_option_problem``,
which returns the first rule's one-line error.  A ``TargetOption`` is an
option that only some targets take: those targets (with the values they take,
where a target takes only some) and the error for any other target.  A
``Conflict`` is two options refused together.  Adding an option is one
entry; adding a target is its name in ``TARGETS`` and in the entries of the
options it takes (and its run in ``cli/fuzz_command.py``'s ``RUNS``).
Nothing here imports more than the standard library.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

TARGETS = ("reference", "vllm", "vllm-engine", "torch", "sglang")
"""``--target``'s choices, in the order ``--help`` lists them."""

ENGINE_PROFILE_NAMES = ("all", "default", "spec-decode", "pause", "streaming", "sync-pp", "kv-recovery", "encoder",
                        "mamba", "logprobs")
"""The profiles ``--target vllm-engine`` takes (``engine_profile.ENGINE_PROFILES``, and ``all``: its default
campaign's parts, ``engine_parts.py``); its V1 ``default`` is what a budget, a depth or a runner runs."""

EVERY_VALUE = None
"""A target that takes every value of the option."""

_SCHEDULERS = {"reference": EVERY_VALUE, "vllm": EVERY_VALUE}
_JOBS_AND_RAY = "--jobs and --ray are options of --target reference and --target vllm"
_VLLM_ONLY = "--depth, --known-bug and --runner are options of the vLLM targets, not {target}"
_NOT_VLLM = {"torch": _VLLM_ONLY, "sglang": _VLLM_ONLY}


@dataclass(frozen=True)
class TargetOption:
    """An option of ``fuzz`` that only some targets take."""

    flag: str
    """The option as a user writes it."""
    param: str
    """click's name of its value."""
    unset: object
    """Its value when left out (a value equal to it counts as left out)."""
    takes: Mapping[str, tuple[str, ...] | None]
    """The targets that take it, each with the values it takes (``EVERY_VALUE``: all)."""
    refusal: str
    """The one-line error when another target gets it (``{target}`` and ``{value}`` are filled in)."""
    example: str
    """A value of the option that every target not taking all its values refuses (the table's test uses it)."""
    refusals: Mapping[str, str] = field(default_factory=dict)
    """A target's own error, where it says more than ``refusal``."""

    def given(self, value: object) -> tuple[str, ...]:
        """The values given on the command line (none when left out; each of a repeatable option)."""
        if value == self.unset:
            return ()
        return tuple(str(v) for v in value) if isinstance(value, tuple) else (str(value),)

    def taken(self, target: str, value: str) -> bool:
        """Whether ``target`` takes this option with ``value``."""
        if target not in self.takes:
            return False
        values = self.takes[target]
        return values is EVERY_VALUE or value in values

    def problem(self, target: str, params: Mapping[str, object]) -> str | None:
        """The one-line error when ``target`` does not take a value given in ``params``, else None."""
        for value in self.given(params[self.param]):
            if not self.taken(target, value):
                return self.refusals.get(target, self.refusal).format(target=target, value=value)
        return None


@dataclass(frozen=True)
class Conflict:
    """Two options refused together on ``targets`` (None: on any target), each given as its flag and the
    value that conflicts (None: any value)."""

    targets: tuple[str, ...] | None
    first: tuple[str, str | None]
    second: tuple[str, str | None]
    refusal: str

    def problem(self, target: str, params: Mapping[str, object]) -> str | None:
        """The one-line error when both options are given to ``target``, else None."""
        if self.targets is not None and target not in self.targets:
            return None
        both = all(_has(flag, value, params) for flag, value in (self.first, self.second))
        return self.refusal if both else None


def _has(flag: str, value: str | None, params: Mapping[str, object]) -> bool:
    option = TARGET_OPTIONS[flag]
    given = option.given(params[option.param])
    return bool(given) if value is None else value in given


RULES: tuple[TargetOption | Conflict, ...] = (
    TargetOption("--jobs", "jobs", 1, _SCHEDULERS, _JOBS_AND_RAY, example="2"),
    TargetOption("--ray", "ray_address", None, _SCHEDULERS, _JOBS_AND_RAY, example="local"),
    TargetOption("--profile", "profile", None, {**_SCHEDULERS, "vllm-engine": ENGINE_PROFILE_NAMES},
                 "--profile is an option of --target reference and vllm, and vllm-engine takes "
                 f"{' or '.join(ENGINE_PROFILE_NAMES)} (not {{value}} with {{target}})", example="large"),
    *(Conflict(None, ("--runner", "mrv2"), ("--profile", name),
               f"--runner mrv2 takes --profile spec-decode, encoder or its own profile (docs/vllm-engine.md), not {name}")
      for name in ENGINE_PROFILE_NAMES if name not in ("spec-decode", "encoder")),
    Conflict(("vllm-engine",), ("--profile", "spec-decode"), ("--depth", "3"),
             "--profile spec-decode runs depths 1 and 2 (depth 3 with drafts is not a V1 configuration "
             "vLLM ships: docs/vllm-engine.md)"),
    TargetOption("--sglang-mutant", "sglang_mutant", None, {"sglang": EVERY_VALUE},
                 "--sglang-mutant is an option of --target sglang", example="relay_skipped"),
    TargetOption("--depth", "depth", None, {"vllm-engine": EVERY_VALUE},
                 "--depth is an option of --target vllm-engine", example="2", refusals=_NOT_VLLM),
    TargetOption("--known-bug", "known_bugs", (), {"vllm": EVERY_VALUE, "vllm-engine": ("reset-with-deferral", "session-kv-deadlock",
                                                                             "prompt-logprobs-stale-drop")},
                 "--known-bug is an option of --target vllm and vllm-engine (the bug is vLLM's)",
                 example="priority-undo-keeps-hash",
                 refusals={**_NOT_VLLM, "vllm-engine": "--known-bug {value} is an option of --target vllm (the "
                                                       "vllm-engine profiles draw no priority policy and "
                                                       "no streaming sessions)"}),
    TargetOption("--runner", "runner", "v1", {"vllm-engine": EVERY_VALUE},
                 "--runner is an option of --target vllm-engine", example="mrv2", refusals=_NOT_VLLM),
    TargetOption("--vllm-path", "vllm_path", None, {"vllm": EVERY_VALUE, "vllm-engine": EVERY_VALUE},
                 "--vllm-path is an option of --target vllm and vllm-engine (a vLLM source tree to drive)",
                 example="/src/vllm"),
    TargetOption("--vllm-coverage", "vllm_coverage", None, {"vllm": EVERY_VALUE, "vllm-engine": EVERY_VALUE},
                 "--vllm-coverage is an option of --target vllm and vllm-engine (coverage of vLLM's own files)",
                 example="coverage.json"),
    Conflict(None, ("--vllm-coverage", None), ("--ray", None),
             "--vllm-coverage follows --jobs worker processes, not Ray tasks; leave --ray out"),
    TargetOption("--max-divergences", "max_divergences", 20, {**_SCHEDULERS, "vllm-engine": EVERY_VALUE},
                 "--max-divergences is an option of --target reference, vllm and vllm-engine ({target} stops at "
                 "its first divergence)", example="5"),
)
"""The table: every rule, in the order they are checked (the first error is the one reported)."""

TARGET_OPTIONS: dict[str, TargetOption] = {r.flag: r for r in RULES if isinstance(r, TargetOption)}
"""The table's options, by flag."""

CONFLICTS: tuple[Conflict, ...] = tuple(r for r in RULES if isinstance(r, Conflict))
"""The table's pairs of options refused together."""


def target_option_problem(target: str, params: Mapping[str, object]) -> str | None:
    """The first rule of ``RULES`` that ``params`` (click's values, by name) break on ``target``, as its
    one-line error; None when ``target`` takes every option given."""
    return next((p for p in (rule.problem(target, params) for rule in RULES) if p is not None), None)


def profile_names() -> list[str]:
    """``--profile``'s choices: the scheduler targets' profiles, then vllm-engine's own."""
    from asyncspec.statemachine_tests.scheduler.profiles import PROFILES

    return list(PROFILES) + [n for n in ENGINE_PROFILE_NAMES if n not in PROFILES]


def default_profile(target: str) -> str:
    """What ``--profile`` is when left out: vllm-engine's own ``default``; else the campaign over the
    configuration space (``all``; on reference, the parts it models)."""
    from asyncspec.statemachine_tests.scheduler.profiles import DEFAULT_PROFILE_NAME

    return "default" if target == "vllm-engine" else DEFAULT_PROFILE_NAME


def default_budget(target: str, examples: int | None, seconds: float | None) -> tuple[int | None, float]:
    """``(examples, seconds)`` with what was left out filled in: on reference and vllm, neither given is
    the default campaign at the size that saturates it (fixed work, reproducible); otherwise 30 s
    without ``--examples``, and an outer limit of an hour with it."""
    from asyncspec.statemachine_tests.scheduler.profiles import DEFAULT_EXAMPLES

    if examples is None and seconds is None and target in ("reference", "vllm"):
        examples = DEFAULT_EXAMPLES
    return examples, (30.0 if examples is None else 3600.0) if seconds is None else seconds
