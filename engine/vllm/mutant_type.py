"""The record of one vLLM mutant (``mutants.py`` holds the corpus, ``overlay.py`` applies one)."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class VllmMutant:
    """One line of one vLLM function, replaced."""

    id: str
    file: str  # relative to the vllm package, e.g. "v1/engine/core.py"
    function: str  # "Class.method" or "function"
    reference: str  # the vLLM issue/PR it is derived from: "vllm#NNNNN: title"
    original: str  # the exact line, without its indentation
    replacement: str
    description: str
    equivalent: str = ""  # the argument, when argued equivalent
    raises: bool = False  # the change only makes vLLM raise (an assertion or error), not change state first


SCHEDULER_SIDE_CONNECTORS = ("distributed/kv_transfer/kv_connector/v1/offloading/scheduler.py",)
"""KV connectors' scheduler halves the scheduler target runs as they are (the OffloadingConnector's)."""


def scheduler_side(mutant: VllmMutant) -> bool:
    """Whether the mutant changes the scheduler side: the scheduler, the request, the KV cache
    manager, coordinator and block pool (``vllm/v1/core/``, ``vllm/v1/request.py``), and a KV
    connector's scheduler half the scheduler target runs (``SCHEDULER_SIDE_CONNECTORS``)."""
    return mutant.file.startswith("v1/core/") or mutant.file == "v1/request.py" or mutant.file in SCHEDULER_SIDE_CONNECTORS
