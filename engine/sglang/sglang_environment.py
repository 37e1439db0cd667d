"""SGLang 0.5.23 on a CPU: the version pin, a tiny offline model, and one real ``Scheduler``.

Runs only in the SGLang venv (``.ci/install-sglang``).  The model is a one-layer Llama
config written to a temporary folder and loaded with ``load_format="dummy"`` (no weights
are fetched); ``device="cpu"`` with the ``torch_native`` attention backend needs no GPU,
``sgl_kernel`` or flashinfer.  ``ServerArgs``, ``PortArgs``, ``publish`` and the
``Scheduler`` constructor are SGLang's own, so the memory pools
(``ReqToTokenPool``, ``TokenToKVPoolAllocator``), the radix cache, the policy and the
``FutureMap`` are built as a server builds them (``managers/scheduler.py``
``run_scheduler_process``).
"""
from __future__ import annotations

import json
import logging
import os
import tempfile
from typing import Any

from asyncspec.engine.sglang import sglang_oracle as oracle
from asyncspec.engine.sglang.environment_config import EngineConfig

SGLANG_PIN = "0.5.23"


def tiny_model_dir() -> str:
    """A one-layer Llama config in a temporary folder (vocab 512, EOS = ``oracle.EOS``)."""
    folder = tempfile.mkdtemp(prefix="asyncspec-sglang-model-")
    config = {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 512,
        "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 1,
        "num_attention_heads": 2, "num_key_value_heads": 2, "max_position_embeddings": 512,
        "rms_norm_eps": 1e-5, "torch_dtype": "float32", "eos_token_id": oracle.EOS,
        "bos_token_id": 1, "tie_word_embeddings": False,
    }
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(config, f)
    return folder


def quiet() -> None:
    """SGLang logs each batch at INFO; keep stderr for errors."""
    os.environ.setdefault("SGLANG_LOGGING_CONFIG_PATH", "")
    logging.getLogger().setLevel(logging.ERROR)
    for name in ("sglang", "sglang.srt"):
        logging.getLogger(name).setLevel(logging.ERROR)
    import warnings
    warnings.filterwarnings("ignore")


def check_version() -> None:
    """Refuse any SGLang but the pinned one (the driver relies on 0.5.23 internals)."""
    import sglang
    if sglang.__version__ != SGLANG_PIN:
        raise RuntimeError(f"sglang {sglang.__version__} installed, the driver needs {SGLANG_PIN}")


def build_scheduler(cfg: EngineConfig, model_dir: str) -> Any:
    """SGLang's ``Scheduler``, built in this process as ``run_scheduler_process`` builds it."""
    from sglang.srt.managers.scheduler import Scheduler
    from sglang.srt.runtime_context import SpawnRanks, publish
    from sglang.srt.server_args import PortArgs, ServerArgs

    args = ServerArgs(
        model_path=model_dir, device="cpu", load_format="dummy", skip_tokenizer_init=True,
        attention_backend="torch_native", disable_cuda_graph=True, dtype="float32",
        max_total_tokens=cfg.max_total_tokens, chunked_prefill_size=cfg.chunked_prefill_size,
        page_size=1, schedule_conservativeness=cfg.schedule_conservativeness,
        disable_overlap_schedule=not cfg.overlap, max_running_requests=cfg.max_running_requests,
        context_length=cfg.max_total_tokens, random_seed=0,
    )
    ports = PortArgs.init_new(args)
    publish(args, role="scheduler", ranks=SpawnRanks(world_rank=0, dp_rank=None, gpu_id=0))
    quiet()
    return Scheduler(args, ports)
