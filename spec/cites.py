"""Citations to vLLM as data: which vLLM function each spec action and property models.

``@models("vllm.v1.core.sched.scheduler.Scheduler._preempt_request")`` on a spec
function records the dotted path of every vLLM function it models (and the
pull requests it follows, if any) and returns the function unchanged, so the
checker, the prover and the mutants see no difference.  The records are what
``tests/test_citations.py`` resolves against the installed vLLM, what the
citation table of ``docs/spec.md`` is generated from, and what ``asyncspec
drift`` fingerprints across vLLM releases (``fidelity/``).

Example:
    >>> @models("vllm.v1.core.sched.scheduler.Scheduler.has_requests")
    ... def has_requests() -> bool:
    ...     return False
    >>> has_requests.__vllm_models__
    ('vllm.v1.core.sched.scheduler.Scheduler.has_requests',)
    >>> CITATIONS.pop("cites.has_requests").targets == has_requests.__vllm_models__
    True

Code that no machine here can install (the vllm-neuron plugin) is cited with
``@models_static``: a file of a repository at a named commit, and the
qualified names in it.  Such a reference is recorded apart
(``STATIC_REFERENCES``): nothing resolves or fingerprints it, and ``asyncspec
drift`` lists it on its own, neither as drift nor as missing.

    >>> @models_static(NEURON_RUNNER, "NeuronModelRunner.execute_model")
    ... def step() -> None:
    ...     pass
    >>> STATIC_REFERENCES.pop("cites.step").where("NeuronModelRunner.execute_model")
    'vllm-project/vllm-neuron@9fc042e:vllm_neuron/vllm/worker/neuron_model_runner.py:NeuronModelRunner.execute_model'
"""
from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple, TypeVar

F = TypeVar("F", bound=Callable[..., object])

VLLM_PREFIX = "vllm."


class Citation(NamedTuple):
    """One spec function (``module.qualname`` under ``asyncspec.spec``) and what it models."""

    spec: str  # e.g. "scheduler.preempt_request"
    targets: tuple[str, ...]  # dotted paths of vLLM functions, methods or properties
    prs: tuple[int, ...]  # vLLM pull requests whose behaviour it follows


CITATIONS: dict[str, Citation] = {}
"""Every citation made so far, by spec name (filled as the spec modules are imported)."""


def models(*targets: str, pr: int | tuple[int, ...] = ()) -> Callable[[F], F]:
    """Record that the decorated function models the vLLM functions ``targets``."""
    if not targets or not all(t.startswith(VLLM_PREFIX) for t in targets):
        raise ValueError(f"@models needs dotted vLLM paths starting with 'vllm.', got {targets!r}")
    prs = (pr,) if isinstance(pr, int) else tuple(pr)

    def record(fn: F) -> F:
        module = fn.__module__.rsplit(".spec.", 1)[-1]
        name = f"{module}.{fn.__qualname__}"
        CITATIONS[name] = Citation(name, tuple(targets), prs)
        fn.__vllm_models__ = tuple(targets)  # type: ignore[attr-defined]
        return fn

    return record


class StaticSource(NamedTuple):
    """A file of a repository at a commit, read but not installable here (so never fingerprinted)."""

    repo: str  # owner/name on GitHub
    commit: str  # the full commit id the spec was held against
    file: str  # path inside the repository

    @property
    def short(self) -> str:
        """``repo@commit7``."""
        return f"{self.repo}@{self.commit[:7]}"


NEURON_RUNNER = StaticSource("vllm-project/vllm-neuron", "9fc042eaa7e50fbfda292b75c980bf56a9a0e8b6",
                             "vllm_neuron/vllm/worker/neuron_model_runner.py")
"""vllm-neuron's model runner, as read for ``spec/worker_neuron.py`` (``docs/findings_neuron.md``)."""


class StaticReference(NamedTuple):
    """One spec function and the names it models in a ``StaticSource``."""

    spec: str  # e.g. "worker_neuron._swap"
    source: StaticSource
    symbols: tuple[str, ...]  # qualified names inside ``source.file``

    def where(self, symbol: str) -> str:
        """``repo@commit7:file:symbol``, the reference as one string."""
        return f"{self.source.short}:{self.source.file}:{symbol}"


STATIC_REFERENCES: dict[str, StaticReference] = {}
"""Every static reference made so far, by spec name (filled as the spec modules are imported)."""


def models_static(source: StaticSource, *symbols: str) -> Callable[[F], F]:
    """Record that the decorated function models ``symbols`` (qualified names) of ``source``."""
    if not symbols or not all(symbols):
        raise ValueError("@models_static needs the qualified names it models in the source file")

    def record(fn: F) -> F:
        module = fn.__module__.rsplit(".spec.", 1)[-1]
        name = f"{module}.{fn.__qualname__}"
        STATIC_REFERENCES[name] = StaticReference(name, source, tuple(symbols))
        fn.__static_models__ = tuple(symbols)  # type: ignore[attr-defined]
        return fn

    return record
