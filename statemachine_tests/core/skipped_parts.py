"""Campaign parts this vLLM cannot run: decided from the capability probe, before any example.

A campaign part (a profile part of the ``vllm`` target's mix, an engine
configuration's runner and depth on ``vllm-engine``) names the capabilities
(``engine/vllm/surfaces.py``) it needs.  ``first_missing`` asks the probe
(``surfaces.probed``, one capability at a time, looked up at call time so a
test can stand in for it) and gives the one line of the first absent one, the
same line ``capabilities.MissingCapability`` carries: ``<capability>: <missing
piece>``.  A part with such a line is skipped: its examples are drawn as usual
(so no other example changes) but not run, and counted apart per part
(``SkippedPart.examples``); the run then ends partial (exit 3) unless it
found a divergence.

``vllm_json`` is the ``"vllm"`` object of a campaign's ``--json``: the
version and package folder driven (``vllm_identity.driven_vllm``) and the
capabilities probed, present and absent.
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any


@dataclass
class SkippedPart:
    """A part not run: its name, the one line naming what this vLLM lacks, and its examples not run."""

    part: str
    reason: str
    examples: int = 0

    def to_json(self) -> dict[str, Any]:
        """``{"part", "reason", "examples"}`` (``skipped_parts`` of ``--json``)."""
        return {"part": self.part, "reason": self.reason, "examples": self.examples}

    def line(self) -> str:
        """What a run prints on stderr: ``skipped part <part>: <capability>: <missing piece>``."""
        return f"skipped part {self.part}: {self.reason}"


def first_missing(capabilities: Iterable[str]) -> str | None:
    """One line for the first of ``capabilities`` the installed vLLM lacks, or None when it has them all."""
    from asyncspec.engine.vllm import surfaces

    for name in capabilities:
        caps = surfaces.probed(name)
        if not caps.has(name):
            return f"{name}: {caps.missing.get(name, 'not probed')}".splitlines()[0]
    return None


def vllm_json(capabilities: Iterable[str]) -> dict[str, Any]:
    """The ``"vllm"`` object: ``{"version", "path", "version_source", "capabilities", "missing",
    "release_settings"}``.

    ``capabilities``: the ones the target drives (probed here, once per process);
    ``"capabilities"`` lists those present, ``"missing"`` each absent one's line,
    ``"release_settings"`` the settings in force (``engine/vllm/release_settings.py``).
    """
    from asyncspec.engine.vllm import surfaces
    from asyncspec.engine.vllm.release_settings import active_names
    from asyncspec.engine.vllm.vllm_identity import driven_vllm

    present: list[str] = []
    missing: dict[str, str] = {}
    for name in dict.fromkeys(capabilities):
        caps = surfaces.probed(name)
        if caps.has(name):
            present.append(name)
        else:
            missing[name] = caps.missing.get(name, "not probed")
    return {**driven_vllm().as_json(), "capabilities": sorted(present), "missing": dict(sorted(missing.items())),
            "release_settings": active_names()}


def scheduler_capabilities() -> tuple[str, ...]:
    """The capabilities of the scheduler driver (``surfaces.SCHEDULER_SURFACES``), in their order."""
    from asyncspec.engine.vllm import surfaces

    return tuple(dict.fromkeys(s.capability for s in surfaces.SCHEDULER_SURFACES))


def engine_capabilities() -> tuple[str, ...]:
    """Every capability the drivers probe (the engine target drives the scheduler too)."""
    from asyncspec.engine.vllm import surfaces

    return surfaces.CAPABILITIES
