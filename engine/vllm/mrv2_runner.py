"""Model Runner V2 under EngineCore on a CPU: vLLM's ``CPUModelRunner`` (vllm/v1/worker/cpu/model_runner.py).

MRV2 (``VLLM_USE_V2_MODEL_RUNNER=1``, ``vllm/v1/worker/gpu/``) prepares its
inputs with Triton kernels.  Triton's interpreter (``TRITON_INTERPRET=1``)
runs them on a CPU, so a process that hosts MRV2 needs, before vLLM is
imported: Triton importable (from a private folder on ``sys.path``, never
installed into the main environment, where it would make vLLM pick MRV2
everywhere), ``TRITON_INTERPRET=1``, ``CUDA_VISIBLE_DEVICES`` empty (else
vLLM finds no active Triton driver and sets ``HAS_TRITON`` false) and
``VLLM_USE_V2_MODEL_RUNNER=1`` (read by ``VllmConfig.use_v2_model_runner``
wherever vLLM asks: the scheduler's payload, ``max_concurrent_batches``).
``mrv2_environment`` gives that environment; ``mrv2_problem`` says in one
line what the current process lacks.

The runner is built as vLLM's ``CPUWorker`` builds it (vllm/v1/worker/
cpu_worker.py): ``vllm.v1.worker.cpu.shm`` imported first (vLLM's own CPU
patches: CUDA events and streams, pinned memory, the UVA buffer), then
``CPUModelRunner``, then ``load_model(model=...)`` with the oracle model,
which lets MRV2 build its model state (``init_model_state`` resolves
``DefaultModelState`` for a model without attention layers), sampler and
structured-output worker itself.  ``mrv2_stubs.py`` holds the three stand-ins.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from asyncspec.engine.vllm import surfaces

TRITON_SPEC = "triton==3.9.0"
TRITON_DIR_ENV = "ASYNCSPEC_TRITON_DIR"
"""Where the private Triton lives (default ``~/.cache/asyncspec-triton``)."""


def triton_dir() -> Path:
    """The private Triton folder (it may not exist yet)."""
    return Path(os.environ.get(TRITON_DIR_ENV, Path.home() / ".cache" / "asyncspec-triton"))


def triton_install_command(folder: Path) -> list[str]:
    """The pip arguments that put Triton into ``folder`` only."""
    return ["-m", "pip", "install", "-q", "--no-deps", "--target", str(folder), TRITON_SPEC]


def mrv2_environment(base: dict[str, str], folder: Path) -> dict[str, str]:
    """``base`` with what a process hosting MRV2 needs (Triton from ``folder`` first on the path)."""
    path = base.get("PYTHONPATH", "")
    return dict(base, PYTHONPATH=str(folder) + (os.pathsep + path if path else ""), TRITON_INTERPRET="1",
                CUDA_VISIBLE_DEVICES="", VLLM_USE_V2_MODEL_RUNNER="1")


def mrv2_problem() -> str | None:
    """Why this process cannot host MRV2 (one line), or None."""
    env = os.environ
    if env.get("VLLM_USE_V2_MODEL_RUNNER") != "1":
        return "MRV2 needs VLLM_USE_V2_MODEL_RUNNER=1 set before vLLM is imported"
    if env.get("TRITON_INTERPRET") != "1" or env.get("CUDA_VISIBLE_DEVICES") != "":
        return "MRV2 on a CPU needs TRITON_INTERPRET=1 and CUDA_VISIBLE_DEVICES= (empty)"
    import importlib.util

    if importlib.util.find_spec("triton") is None:
        return (f"MRV2 needs Triton importable: pip install --no-deps --target {triton_dir()} {TRITON_SPEC} "
                f"and put that folder on PYTHONPATH (never into the main environment)")
    return None


def build_mrv2_runner(vllm_config: Any, torch: Any) -> Any:
    """vLLM's CPU MRV2 runner, with the stand-ins of ``mrv2_stubs`` installed first
    (``MissingCapability`` when this vLLM lacks ``surfaces.MRV2_RUNNER``)."""
    problem = mrv2_problem()
    if problem is not None:
        raise RuntimeError(problem)
    surfaces.require(surfaces.MRV2_RUNNER)
    import vllm.v1.worker.cpu.shm  # noqa: F401  (vLLM's CPU patches, as cpu_worker.py imports it first)

    from asyncspec.engine.vllm.mrv2_stubs import install_mrv2_stubs

    install_mrv2_stubs()
    from vllm.v1.worker.cpu.model_runner import CPUModelRunner

    return CPUModelRunner(vllm_config, torch.device("cpu"))


def load_oracle(runner: Any, vocab_size: int) -> Any:
    """The oracle model for MRV2, loaded through ``GPUModelRunner.load_model(model=...)``; for a multimodal
    model (the tiny PaliGemma) the stand-in encoder's, its rows as wide as MRV2's ``inputs_embeds``
    (``ModelConfig.get_inputs_embeds_size``, what ``ModelState`` sizes ``EncoderRunner`` by)."""
    from asyncspec.engine.vllm.mrv2_oracle import mrv2_oracle_class, watch_prepare_inputs

    model_config = runner.vllm_config.model_config
    if model_config.is_multimodal_model:
        model = mrv2_oracle_class(True)(vocab_size, int(model_config.get_inputs_embeds_size()))
    else:
        model = mrv2_oracle_class()(vocab_size)
    model.runner = runner
    watch_prepare_inputs(runner)
    runner.load_model(model=model)
    return model
