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
