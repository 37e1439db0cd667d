"""``pytest --asyncspec``: asyncspec's checks as pytest items, for an engine repository's CI.

Registered as a ``pytest11`` entry point (``pyproject.toml``), so installing
asyncspec is enough.  Without ``--asyncspec`` the plugin only adds its
options.  With it, in any directory (an empty one too), the session gets:

* ``asyncspec::check[NAME]`` — one per config of ``--asyncspec-configs``
  (default: the ``default`` set), fully explored; a failure shows each
  violation's counter table and the ``asyncspec replay`` line of its trace;
* ``asyncspec::prove[VARIANT]`` — the z3 proofs, one item per variant; a
  failure lists the obligations not proved and each counterexample's table;
* ``asyncspec::fuzz[reference]`` — a fixed fuzz campaign of the reference
  scheduler against the spec (``--asyncspec-examples``, ``--asyncspec-seed``);
  a failure shows the divergence side by side.

pytest's own ``-k``, ``-x`` and ``--junitxml`` apply as to any test, e.g.
``pytest --asyncspec --junitxml=asyncspec.xml`` (``docs/ci.md``).
"""
from __future__ import annotations

import io
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

SECTION = "asyncspec"


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup(SECTION, "asyncspec: the spec's checks as test items")
    group.addoption("--asyncspec", action="store_true", default=False,
                    help="Collect asyncspec's config checks, proofs and a short fuzz campaign as test items.")
    group.addoption("--asyncspec-configs", default="default", metavar="NAMES",
                    help="Comma-separated configs, sets (default, slow, finding) or TOML files (default: default).")
    group.addoption("--asyncspec-examples", type=int, default=100, metavar="N",
                    help="Examples of the reference fuzz campaign (default: 100).")
    group.addoption("--asyncspec-seed", type=int, default=0, metavar="S", help="Seed of the fuzz campaign.")
    group.addoption("--asyncspec-trace-dir", default="asyncspec-traces", metavar="DIR",
                    help="Where a failing check's traces are saved (default: asyncspec-traces).")


class AsyncspecFailure(Exception):
    """A check that failed; the message is the readable report."""


def _render(*renderables: Any) -> str:
    buffer = io.StringIO()
    console = Console(file=buffer, width=250, highlight=False, color_system=None, soft_wrap=False)
    for r in renderables:
        console.print(r)
    return buffer.getvalue()


class AsyncspecItem(pytest.Item):
    """One asyncspec check; ``run`` raises ``AsyncspecFailure`` with the report."""

    def __init__(self, *, run: Callable[[], None], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._run = run

    def runtest(self) -> None:
        self._run()

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException],
                     style: Any = None) -> str:
        if isinstance(excinfo.value, AsyncspecFailure):
            return str(excinfo.value)
        return str(super().repr_failure(excinfo))

    def reportinfo(self) -> tuple[Path, int | None, str]:
        return Path(str(self.path)), None, f"asyncspec {self.name}"


class AsyncspecSuite(pytest.Collector):
    """The parent of the asyncspec items (node id ``asyncspec``)."""

    def collect(self) -> Iterator[AsyncspecItem]:
        opt = self.config.getoption
        from asyncspec.checker import configs as cfgs

        for spec in [s for s in str(opt("asyncspec_configs")).split(",") if s]:
            for cfg in cfgs.resolve(spec):
                yield self._item(f"check[{cfg.name}]", partial(check_item, cfg, Path(opt("asyncspec_trace_dir"))))
        from asyncspec.proofs.request_abstraction import VARIANTS

        for v in VARIANTS:
            yield self._item(f"prove[{v.name}]", partial(prove_item, v))
        examples, seed = int(opt("asyncspec_examples")), int(opt("asyncspec_seed"))
        yield self._item("fuzz[reference]", partial(fuzz_item, examples, seed))

    def _item(self, name: str, run: Callable[[], None]) -> AsyncspecItem:
        return AsyncspecItem.from_parent(self, name=name, run=run)


@pytest.hookimpl(tryfirst=True)  # before -k and -m deselect
def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    if not config.getoption("asyncspec"):
        return
    suite = AsyncspecSuite.from_parent(session, name=SECTION, nodeid=SECTION)
    items.extend(suite.collect())


# ---------------------------------------------------------------- what each item runs


def check_item(cfg: Any, trace_dir: Path) -> None:
    """Explore ``cfg`` completely; fail with the counter table of each unexpected violation."""
    from asyncspec.checker.check_run import check_config, settings
    from asyncspec.checker.table import trace_table
    from asyncspec.checker.trace import save_trace

    r = check_config(cfg, settings("fast", symmetry=True, max_states=None, jobs=1, ray=None, max_memory=None,
                                   checkpoint_dir=None, checkpoint_seconds=60.0, resume=False)).result
    if r.ok:
        return
    parts: list[Any] = [f"{r.name}: {r.distinct_states} distinct states, depth {r.depth}"]
    if r.partial:
        parts.append(f"partial: {r.partial_reason}")
    if not r.violations:  # (a run stopped at a violation leaves witnesses unreached, not vacuous)
        parts += [f"vacuous: witness '{w}' was never reached" for w in r.vacuous]
    for v in r.violations:
        if v.property == r.expect_violation:
            continue
        path = trace_dir / f"{r.name}.{v.property}.trace.json"
        save_trace(v.trace, path)
        parts += [f"VIOLATION: {v.property}: {v.message}", trace_table(cfg, v.trace.states(), title=v.property),
                  f"replay with: asyncspec replay {path}"]
    if r.expect_violation and r.expect_violation not in {v.property for v in r.violations}:
        parts.append(f"expected finding {r.expect_violation} was not found")
    raise AsyncspecFailure(_render(*parts))


def prove_item(variant: Any) -> None:
    """Prove every obligation of ``variant``; fail with those not proved and each CTI table."""
    from asyncspec.proofs.prover import prove

    report = prove(variants=(variant,))
    bad = [o for o in report.outcomes if o.result != "proved"]
    if not bad and report.outcomes:
        return
    lines: list[Any] = [f"[{o.variant}] {o.action} x {o.invariant}: {o.result}" for o in bad]
    raise AsyncspecFailure(_render(*lines, *[cti.table() for cti in report.ctis]) or "no obligation ran")


def fuzz_item(examples: int, seed: int) -> None:
    """A fixed campaign of the reference scheduler against the spec, the default one (what
    ``asyncspec fuzz --target reference`` runs: the parts of ``all`` the reference models); fail with
    the divergence."""
    from asyncspec.statemachine_tests.scheduler.profiles import DEFAULT_PROFILE_NAME, PROFILES, for_target
    from asyncspec.statemachine_tests.core.report import print_divergence
    from asyncspec.statemachine_tests.scheduler.shards import Plan, run_plan

    profile = for_target(PROFILES[DEFAULT_PROFILE_NAME], "reference")
    merged = run_plan(Plan("reference", profile, seed, examples, 3600.0))
    if merged.found is not None:
        buffer = io.StringIO()
        print_divergence(merged.found, "reference", Console(file=buffer, width=250, color_system=None))
        raise AsyncspecFailure(buffer.getvalue() + f"\nreproduce with: asyncspec fuzz --target reference "
                                                   f"--examples {examples} --seed {seed}")
    if merged.examples < examples:
        raise AsyncspecFailure(f"only {merged.examples} of {examples} examples ran")
