"""Access to the installed vLLM: the supported releases, the CPU/offline environment, the imports.

Every module under ``engine/vllm/`` reaches vLLM through :func:`load_vllm`, which
sets the CPU/offline environment first (``prepare_environment``) and imports the
names the drivers use once.  ``check_vllm_version`` turns a missing, broken or
out-of-range install (outside 0.30.0 to 0.33.0, unless allowed) into
:class:`VllmUnavailable` with a one-line message; which parts a release in the
range can drive is the capability probe's answer (``surfaces.py``), and which
release is driven is ``vllm_identity.driven_vllm``.

Install notes: ``engine/vllm/install.md``; the installer is ``.ci/install-vllm``.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from asyncspec.engine.vllm.vllm_identity import REFERENCE_VERSION, SUPPORTED_RANGE, driven_vllm, in_supported_range

VLLM_VERSION = REFERENCE_VERSION
"""The vLLM release the spec describes, the default install and the reference (0.33.0)."""

# Per-user scratch folder: vLLM's cache root and the tiny model's config.json.
SCRATCH = Path(tempfile.gettempdir()) / f"asyncspec-vllm-{os.getuid()}"


def config_only_dir(name: str, config: dict[str, Any]) -> str:
    """``SCRATCH/name`` holding only ``config`` as its ``config.json`` (a config-only model vLLM
    builds offline), written atomically and rewritten only when it differs."""
    path = SCRATCH / name
    path.mkdir(parents=True, exist_ok=True)
    text = json.dumps(config, indent=1, sort_keys=True)
    target = path / "config.json"
    if not target.exists() or target.read_text() != text:
        fd, tmp = tempfile.mkstemp(dir=path, suffix=".tmp")
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
        os.replace(tmp, target)
    return str(path)


# Environment the vLLM import and config path need on a CPU-only, hub-less host.
# Set only where the user has not chosen a value.
_ENV_DEFAULTS: dict[str, str] = {
    "VLLM_TARGET_DEVICE": "cpu",
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "VLLM_CACHE_ROOT": str(SCRATCH / "vllm-cache"),
    "VLLM_USE_V2_MODEL_RUNNER": "0",  # the V1 runner, also when triton is installed
    "VLLM_ENABLE_V1_MULTIPROCESSING": "0",  # every helper path of EngineCore in-process
}


class VllmUnavailable(RuntimeError):
    """vLLM is missing, not importable, or outside the supported releases."""


# --------------------------------------------------------------------------- version


def _installed_vllm_version() -> str | None:
    """The version of the vLLM on ``sys.path`` (its metadata, or a checkout's own files), or None."""
    return driven_vllm().version


def _range_text() -> str:
    """``0.30.0 to 0.33.0``."""
    low, high = (".".join(map(str, end)) for end in SUPPORTED_RANGE)
    return f"{low} to {high}"


def _version_mismatch_message(found: str | None) -> str:
    """One line naming the supported releases and what was found."""
    if found is None:
        return (
            f"vllm {_range_text()} is required but vllm is not installed/importable; "
            "run .ci/install-vllm [VERSION]"
        )
    return (
        f"vllm {found} is outside the supported releases {_range_text()}; "
        "pass --allow-version to drive it anyway, or run .ci/install-vllm [VERSION]"
    )


@functools.cache
def _warn_outside_range(found: str) -> None:
    """One line on stderr (once a process): ``--allow-version`` drives a release outside the range."""
    print(f"asyncspec: warning: driving vllm {found}, outside the supported releases {_range_text()} "
          "(--allow-version): a part whose surface it lacks is skipped", file=sys.stderr)


def check_vllm_version(allow_other: bool = False) -> str:
    """Return the installed vLLM version; raise VllmUnavailable unless it is usable.

    Usable means ``import vllm`` works and (unless ``allow_other``) the version
    lies in ``SUPPORTED_RANGE`` (0.30.0 to 0.33.0; 0.33.0 stays the reference).
    Within the range what a driver may use is decided by the capability probe
    (``surfaces.installed_capabilities``), not by the version.  The cheap
    metadata check runs first, so a missing or out-of-range install is reported
    without paying for the (several-second) import.
    """
    found = _installed_vllm_version()
    if found is None or (not in_supported_range(found) and not allow_other):
        raise VllmUnavailable(_version_mismatch_message(found))
    if not in_supported_range(found):
        _warn_outside_range(found)
    try:
        load_vllm()
    except ImportError as exc:
        raise VllmUnavailable(f"importing vllm {found} failed: {exc}") from exc
    return found


# --------------------------------------------------------------------------- vllm access


@dataclass(frozen=True)
class VllmModules:
    """The vLLM names the driver uses (vLLM is untyped for us: everything is Any)."""

    torch: Any
    ModelConfig: Any
    SchedulerConfig: Any
    CacheConfig: Any
    VllmConfig: Any
    KVCacheConfig: Any
    KVCacheGroupSpec: Any
    FullAttentionSpec: Any
    SlidingWindowSpec: Any
    StructuredOutputManager: Any
    Scheduler: Any
    AsyncScheduler: Any
    Request: Any
    RequestStatus: Any
    SamplingParams: Any
    ModelRunnerOutput: Any
    block_hasher: Any  # get_request_block_hasher
    hash_fn: Any
    SpeculativeConfig: Any
    StructuredOutputsParams: Any
    StructuredOutputGrammar: Any
    DraftTokenIds: Any


def prepare_environment() -> None:
    """Set the CPU/offline variables vLLM reads (only those the user left unset).

    VLLM_TARGET_DEVICE=cpu (else ModelConfig cannot infer a device), HF_HUB_OFFLINE=1
    and TRANSFORMERS_OFFLINE=1 (no hub), VLLM_CACHE_ROOT at a per-user scratch folder
    (where vLLM caches the architecture inspection).  Call it before importing vllm
    yourself; the driver calls it before its own import.
    """
    for key, value in _ENV_DEFAULTS.items():
        os.environ.setdefault(key, value)


@functools.cache
def load_vllm() -> VllmModules:
    """Import vLLM once, after setting the offline/CPU environment."""
    prepare_environment()
    import torch
    from vllm.config import CacheConfig, ModelConfig, SchedulerConfig, SpeculativeConfig, VllmConfig
    from vllm.sampling_params import SamplingParams, StructuredOutputsParams
    from vllm.utils.hashing import sha256
    from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash
    from vllm.v1.core.sched.async_scheduler import AsyncScheduler
    from vllm.v1.core.sched.scheduler import Scheduler
    from vllm.v1.kv_cache_interface import (
        FullAttentionSpec,
        KVCacheConfig,
        KVCacheGroupSpec,
        SlidingWindowSpec,
    )
    from vllm.v1.outputs import DraftTokenIds, ModelRunnerOutput
    from vllm.v1.request import Request, RequestStatus
    from vllm.v1.structured_output import StructuredOutputManager
    from vllm.v1.structured_output.backend_types import StructuredOutputGrammar

    init_none_hash(sha256)
    _quiet_vllm_logger()
    return VllmModules(
        torch=torch,
        ModelConfig=ModelConfig,
        SchedulerConfig=SchedulerConfig,
        CacheConfig=CacheConfig,
        VllmConfig=VllmConfig,
        KVCacheConfig=KVCacheConfig,
        KVCacheGroupSpec=KVCacheGroupSpec,
        FullAttentionSpec=FullAttentionSpec,
        SlidingWindowSpec=SlidingWindowSpec,
        StructuredOutputManager=StructuredOutputManager,
        Scheduler=Scheduler,
        AsyncScheduler=AsyncScheduler,
        Request=Request,
        RequestStatus=RequestStatus,
        SamplingParams=SamplingParams,
        ModelRunnerOutput=ModelRunnerOutput,
        block_hasher=get_request_block_hasher,
        hash_fn=sha256,
        SpeculativeConfig=SpeculativeConfig,
        StructuredOutputsParams=StructuredOutputsParams,
        StructuredOutputGrammar=StructuredOutputGrammar,
        DraftTokenIds=DraftTokenIds,
    )


def _quiet_vllm_logger() -> None:
    """Keep vLLM's per-config warnings (e.g. the CPU block-size hint) out of fuzz logs.

    Only when the user has configured neither the logger nor VLLM_LOGGING_LEVEL.
    """
    vllm_logger = logging.getLogger("vllm")
    if "VLLM_LOGGING_LEVEL" not in os.environ and not vllm_logger.handlers:
        vllm_logger.setLevel(logging.ERROR)
    scheduler_logger = logging.getLogger("vllm.v1.core.sched.scheduler")  # where the record is made
    if "VLLM_LOGGING_LEVEL" not in os.environ and not any(isinstance(f, DrawnLoadFailures)
                                                           for f in scheduler_logger.filters):
        scheduler_logger.addFilter(DrawnLoadFailures())


class DrawnLoadFailures(logging.Filter):
    """Drops ``Scheduler._handle_invalid_blocks``' error line for a KV load the harness failed on purpose
    (the toy connector's ``fail`` / ``invalid@j`` reports under ``failure_policy=fail``): a drawn event, which
    the spec expects, printed hundreds of times by a kv-recovery campaign."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("Failing %d request(s) due to KV load failure")


def resolve_dotted(dotted: str) -> Any:
    """What a dotted path (a module, then attributes) names in the installed packages, or None."""
    import importlib

    parts = dotted.split(".")
    for split in range(len(parts), 0, -1):
        try:
            obj: Any = importlib.import_module(".".join(parts[:split]))
        except ImportError:
            continue
        for attr in parts[split:]:
            obj = getattr(obj, attr, None)
            if obj is None:
                return None
        return obj
    return None
