"""The fuzz targets by name: ``make_target(name, workload)`` builds one.

* ``spec`` — ``spec_target.SpecTarget``, the oracle;
* ``vllm`` — ``vllm_target.VllmTarget``, vLLM's real scheduler objects;
* ``reference`` — ``reference_target.ReferenceTarget``, the reference scheduler
  through its abstraction to the spec;
* ``torch`` — not a lock-step target: the torch engine is fuzzed by its own
  oracle (``engine/torch/torch_oracle.py``, ``asyncspec fuzz --target torch``).
"""
from __future__ import annotations

from collections.abc import Callable

from asyncspec.statemachine_tests.core.harness import Target, Workload
from asyncspec.statemachine_tests.scheduler.reference_target import ReferenceTarget
from asyncspec.statemachine_tests.scheduler.spec_target import SpecTarget
from asyncspec.statemachine_tests.scheduler.vllm_target import VllmTarget

TargetFactory = Callable[[Workload], Target]


class TargetUnavailable(RuntimeError):
    """The target cannot be loaded (vLLM missing or not pinned, or not connected); one line."""


NOT_CONNECTED: dict[str, str] = {
    "torch": "the torch engine is not a lock-step target here: `asyncspec fuzz --target torch` "
             "runs its own oracle (engine/torch/torch_oracle.py)",
}
"""Targets with a name but no lock-step factory, and where to go instead."""


def _not_connected(name: str) -> TargetFactory:
    def factory(w: Workload) -> Target:
        raise TargetUnavailable(NOT_CONNECTED[name])

    return factory


TARGETS: dict[str, TargetFactory] = {
    "spec": SpecTarget,
    "vllm": VllmTarget,
    "reference": ReferenceTarget,
    **{name: _not_connected(name) for name in NOT_CONNECTED},
}


def register_target(name: str, factory: TargetFactory) -> None:
    """Connect a target (e.g. ``reference``): ``factory(workload)`` returns a ``Target``."""
    TARGETS[name] = factory
    NOT_CONNECTED.pop(name, None)


def make_target(name: str, w: Workload) -> Target:
    """Build target ``name`` for workload ``w``; ``KeyError`` for an unknown name."""
    return TARGETS[name](w)


def load_target(name: str, allow_version: bool) -> None:
    """Check that target ``name`` can be built; ``TargetUnavailable`` (one line) if not.

    For ``vllm``: vLLM must be exactly the pinned release unless ``allow_version``.
    """
    if name not in TARGETS or name == "spec":
        known = ", ".join(sorted(k for k in TARGETS if k != "spec"))
        raise TargetUnavailable(f"unknown target {name!r} (known: {known})")
    if name in NOT_CONNECTED:
        raise TargetUnavailable(NOT_CONNECTED[name])
    if name == "vllm":
        from asyncspec.engine.vllm.vllm_environment import VllmUnavailable, check_vllm_version

        try:
            check_vllm_version(allow_other=allow_version)
        except VllmUnavailable as exc:
            raise TargetUnavailable(str(exc)) from exc
