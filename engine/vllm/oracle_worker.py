"""The worker and executor under EngineCore: vLLM's own ``UniProcExecutor`` over vLLM's V1 model runner.

On a CPU the runner is vLLM's ``CPUModelRunner`` (the V1 ``GPUModelRunner``
as vLLM hosts it on a CPU) with the process stubs of ``runner_stubs.py``; on
a CUDA device it is ``GPUModelRunner`` itself with real streams, events and
kernels (only the per-runner KV stubs and the oracle model remain).

``OracleExecutor`` subclasses ``UniProcExecutor`` (vllm/v1/executor/
uniproc_executor.py) and overrides only ``_init_executor``, to install
``OracleWorker`` as its driver worker; ``collective_rpc``,
``execute_model(non_block=True)``, ``sample_tokens`` and ``AsyncOutputFuture``
(which resolves ``AsyncGPUModelRunnerOutput.get_output``) stay vLLM's, as in
single-GPU serving.

``OracleWorker`` answers the RPCs EngineCore issues, as ``Worker``
(vllm/v1/worker/gpu_worker.py) does for one rank without pipeline
parallelism: at start the KV-cache spec, layouts, memory, initialisation and
warm-up; per step ``execute_model`` / ``sample_tokens`` /
``take_draft_token_ids``, which go straight to the model runner (for PP = 1
that is all ``Worker.execute_model`` does besides profiling).  vLLM's
``CPUWorker`` cannot be used: its ``__init__`` needs the compiled CPU ops.
"""
from __future__ import annotations

import contextlib
import functools
import tempfile
from collections.abc import Iterator
from typing import Any, cast

from asyncspec.engine.vllm.vllm_environment import load_vllm
from asyncspec.engine.vllm.fake_model import oracle_module_class
from asyncspec.engine.vllm.oracle_encoder import oracle_encoder_module_class
from asyncspec.engine.vllm.mrv2_runner import build_mrv2_runner, load_oracle
from asyncspec.engine.vllm.runner_stubs import install_process_stubs, stub_runner, unpinned_host_memory

AVAILABLE_MEMORY = 1 << 30
DECODE_FIRST_THRESHOLD = 1
"""``reorder_batch_threshold`` of the FlashInfer / Mamba / GDN backends: the runner moves decodes
to the front of the persistent batch (``reorder_batch_to_split_decodes_and_prefills``)."""
"""What the worker reports as free for the KV cache (the pool size is overridden)."""


class OracleWorker:
    """One rank: vLLM's ``CPUModelRunner`` with the oracle model as its model."""

    def __init__(self, vllm_config: Any) -> None:
        v = load_vllm()
        on_cuda = vllm_config.device_config.device.type == "cuda"
        self.mrv2 = vllm_config.use_v2_model_runner
        if not on_cuda and not self.mrv2:
            install_process_stubs()
        from vllm.config import set_current_vllm_config
        from vllm.distributed import ensure_model_parallel_initialized, init_distributed_environment
        from vllm.distributed.parallel_state import model_parallel_is_initialized
        from vllm.v1.worker.cpu_model_runner import CPUModelRunner
        from vllm.v1.worker.gpu_model_runner import GPUModelRunner

        self.vllm_config = vllm_config
        with set_current_vllm_config(vllm_config):
            if not cast(Any, model_parallel_is_initialized)():
                store = tempfile.NamedTemporaryFile(prefix="asyncspec-dist-", delete=False)
                init_distributed_environment(world_size=1, rank=0, local_rank=0,
                                             distributed_init_method=f"file://{store.name}",
                                             backend="gloo")
                ensure_model_parallel_initialized(1, 1)
            if self.mrv2:  # Model Runner V2, its Triton kernels interpreted (mrv2_runner.py)
                self.runner = build_mrv2_runner(vllm_config, v.torch)
                self.model = load_oracle(self.runner, vllm_config.model_config.get_vocab_size())
                return
            if on_cuda:  # the real runner with real streams and kernels (bench/gpu_engine_fuzz.py)
                self.runner = GPUModelRunner(vllm_config, v.torch.device("cuda", 0))
            else:
                with unpinned_host_memory():  # the n-gram drafter's staging buffers
                    self.runner = CPUModelRunner(vllm_config, v.torch.device("cpu"))
                # ``NgramProposerGPU.__init__`` builds a private ``VllmConfig`` over the shared
                # scheduler config, which runs ``CpuPlatform.check_and_update_config`` again and
                # switches async scheduling off under the engine (never on a GPU platform): back
                # to what the runner itself was built with.
                vllm_config.scheduler_config.async_scheduling = self.runner.use_async_scheduling
        vocab = vllm_config.model_config.get_vocab_size()
        if vllm_config.model_config.is_multimodal_model:  # the stand-in encoder (oracle_encoder.py)
            self.model = oracle_encoder_module_class()(vocab, int(self.runner.inputs_embeds.gpu.shape[1]))
        else:
            self.model = oracle_module_class()(vocab)
        self.model.runner = self.runner
        self.runner.model = self.model
        cache = vllm_config.cache_config  # a Mamba layer where the config sets mamba_block_size (engine_config.py)
        stub_runner(self.runner, cache.block_size, cache.mamba_block_size, cache.mamba_cache_mode)

    # ---- start-up RPCs (EngineCore._initialize_kv_caches) ------------------------

    def get_kv_cache_spec(self) -> dict[str, Any]:
        return dict(self.runner.get_kv_cache_spec())

    def get_supported_kv_cache_layouts(self) -> list[str]:
        return ["NHD"]

    def set_kv_cache_layout(self, *args: Any, **kwargs: Any) -> None:
        pass

    def determine_available_memory(self) -> int:
        return AVAILABLE_MEMORY

    def initialize_from_config(self, kv_cache_configs: Any) -> None:
        config = kv_cache_configs[0] if isinstance(kv_cache_configs, list) else kv_cache_configs
        self.vllm_config.cache_config.num_gpu_blocks = config.num_blocks
        from vllm.config import set_current_vllm_config

        with set_current_vllm_config(self.vllm_config):
            self.kv_connector = _worker_connector(self.vllm_config, config)
            if self.kv_connector is not None:  # its loads write what a remote prefill computed
                self.kv_connector.transfer = lambda load, invalid: self.model.load_kv(
                    load.block_ids, load.token_ids, invalid)
            with self.own_connector():
                self.runner.initialize_kv_cache(config)
        if self.mrv2:  # MRV2's init_kv_cache is stood in for: the oracle model owns the store
            self.model.allocate(config.num_blocks, self.vllm_config.cache_config.block_size)
            return
        # What FlashInfer's metadata builder reports (``FlashInferMetadataBuilder.reorder_batch_threshold``):
        # decodes first.  With no attention backend vLLM would leave it None and never reorder.
        self.runner.reorder_batch_threshold = DECODE_FIRST_THRESHOLD

    def compile_or_warm_up_model(self) -> Any:
        from vllm.v1.worker.worker_base import CompilationTimes

        return CompilationTimes(language_model=0.0, encoder=0.0)

    def get_supported_tasks(self) -> tuple[str, ...]:
        return ("generate",)

    # ---- per-step RPCs ------------------------------------------------------------

    def execute_model(self, scheduler_output: Any) -> Any:
        with load_vllm().torch.inference_mode(), self.own_connector():
            return self.runner.execute_model(scheduler_output, None)

    def sample_tokens(self, grammar_output: Any) -> Any:
        with load_vllm().torch.inference_mode(), self.own_connector():
            return self.runner.sample_tokens(grammar_output)

    def get_kv_connector_handshake_metadata(self) -> Any:
        """``Worker.get_kv_connector_handshake_metadata``: the toy connector has none."""
        return None

    @contextlib.contextmanager
    def own_connector(self) -> Iterator[None]:
        """vLLM keeps one worker-side connector per process (``kv_transfer_state._KV_CONNECTOR_AGENT``,
        what ``has_kv_transfer_group`` reads); engines of several configurations share this process,
        so each worker's own (or none) is the process's while the runner runs for it."""
        from vllm.distributed.kv_transfer import kv_transfer_state

        saved = kv_transfer_state._KV_CONNECTOR_AGENT
        kv_transfer_state._KV_CONNECTOR_AGENT = getattr(self, "kv_connector", None)
        try:
            yield
        finally:
            kv_transfer_state._KV_CONNECTOR_AGENT = saved

    def take_draft_token_ids(self) -> Any:
        return self.runner.take_draft_token_ids()

    # ---- pause_scheduler's RPCs (EngineCore._finish_pause, EngineCore._reset_caches) -----

    def synchronize_device(self) -> None:
        """``WorkerBase.synchronize_device``: on a CPU every step has already run to its end
        when ``execute_model`` returns (there is no stream to wait for); on CUDA, wait for it."""
        torch = load_vllm().torch
        if torch.cuda.is_available():
            torch.cuda.synchronize()

    def reset_mm_cache(self) -> None:
        """``Worker.reset_mm_cache``: the runner's own."""
        self.runner.reset_mm_cache()

    def reset_encoder_cache(self) -> None:
        """``Worker.reset_encoder_cache``: the runner's own."""
        self.runner.reset_encoder_cache()

    def shutdown(self) -> None:
        pass


def _worker_connector(vllm_config: Any, kv_cache_config: Any) -> Any:
    """The worker half of the configured connector, as ``Worker.initialize_from_config`` builds it
    (``ensure_kv_transfer_initialized``, before the runner's ``initialize_kv_cache``), taken out
    of vLLM's process-wide slot (``own_connector`` puts it back per call); None without one."""
    from vllm.distributed.kv_transfer import kv_transfer_state

    saved, kv_transfer_state._KV_CONNECTOR_AGENT = kv_transfer_state._KV_CONNECTOR_AGENT, None
    try:
        kv_transfer_state.ensure_kv_transfer_initialized(vllm_config, kv_cache_config)
        return kv_transfer_state._KV_CONNECTOR_AGENT
    finally:
        kv_transfer_state._KV_CONNECTOR_AGENT = saved


@functools.cache
def oracle_executor_class() -> type:
    """``OracleExecutor``: ``UniProcExecutor`` whose driver worker is an ``OracleWorker``."""
    load_vllm()
    from vllm.v1.executor.uniproc_executor import UniProcExecutor

    class OracleExecutor(UniProcExecutor):
        def _init_executor(self) -> None:
            self.driver_worker = cast(Any, OracleWorker(self.vllm_config))

        def shutdown(self) -> None:
            pass

    return cast(type, OracleExecutor)
