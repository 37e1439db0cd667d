"""Issue 28's features attempted on the engine target: ``EngineCore`` over the oracle worker.

The ``vllm`` target plays the worker half of vLLM's ``OffloadingConnector`` itself (its ``offload``
part); the engine target would run the real worker half in the runner.  ``attempt_offloading_engine``
builds the engine target's engine with that connector (kv_both, a CPU tier of 1 MiB) exactly as
``EngineCoreDriver`` builds it and steps one request, first as the engine target is (the oracle
model keeps its paged store itself, so the runner hands the connector no KV tensor), then with a
zero KV tensor of the layer's page layout in the runner's hands (``kv_tensors``), which takes the
attempt as far as vLLM's own CPU-platform check; the outcomes are the record that
``docs/fuzzing.md`` ("Features tried on a CPU") quotes and ``tests/engine/test_feature_attempts.py``
holds vLLM to.
"""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from typing import Any, ContextManager
from unittest import mock

from asyncspec.engine.vllm.cpu_limit_attempts import exact_error
from asyncspec.engine.vllm.vllm_environment import load_vllm

OFFLOAD_CPU_BYTES = 1 << 20
"""The CPU tier of the attempt (``cpu_bytes_to_use``), as the ``vllm`` target's offload part."""


def wrapped(module: Any, name: str, wrap: Any) -> ContextManager[Any]:
    """``module.name`` replaced by ``wrap(module.name)`` until the block ends (``mock.patch.object``)."""
    return mock.patch.object(module, name, wrap(getattr(module, name)))


def offloading_connector() -> ContextManager[Any]:
    """The engine target's ``KVTransferConfig`` replaced by vLLM's ``OffloadingConnector``, kv_both."""
    load_vllm()
    from vllm.config import KVTransferConfig

    from asyncspec.engine.vllm import engine_config

    def transfer(cfg: Any) -> Any:
        return KVTransferConfig(kv_connector="OffloadingConnector", kv_role="kv_both",
                                kv_connector_extra_config={"cpu_bytes_to_use": OFFLOAD_CPU_BYTES})

    return mock.patch.object(engine_config, "kv_transfer_config", transfer)


def kv_tensors() -> ContextManager[Any]:
    """The stubbed runner (``runner_stubs.stub_runner``) also returning a zero KV tensor, blocks
    first, for its one attention layer, as a GPU runner's ``initialize_kv_cache_tensors`` does."""
    torch = load_vllm().torch
    from asyncspec.engine.vllm import oracle_worker, runner_stubs

    def wrap(stub_runner: Any) -> Any:
        def stub(runner: Any, block_size: int) -> None:
            stub_runner(runner, block_size)
            allocate = runner.initialize_kv_cache_tensors

            def with_tensor(kv_cache_config: Any, kernel_block_sizes: Any, kv_cache_allocation_context: Any = None) -> Any:
                allocate(kv_cache_config, kernel_block_sizes, kv_cache_allocation_context)
                return {runner_stubs.LAYER_NAME: torch.zeros(kv_cache_config.num_blocks, 2, block_size, 1, 1)}

            runner.initialize_kv_cache_tensors = with_tensor
        return stub

    return wrapped(oracle_worker, "stub_runner", wrap)  # the name oracle_worker calls


def attempt_offloading_engine(steps: int = 6, with_kv_tensor: bool = False) -> str:
    """Build the engine (prefix caching on, as the offloading connector needs) and step one
    request ``steps`` times: "ran" or the exact error; ``with_kv_tensor``: inside ``kv_tensors``."""
    from asyncspec.engine.vllm.engine_config import EngineDriverConfig
    from asyncspec.engine.vllm.engine_core_driver import EngineCoreDriver

    with offloading_connector(), kv_tensors() if with_kv_tensor else nullcontext():
        try:
            driver = EngineCoreDriver(EngineDriverConfig(enable_prefix_caching=True))
            driver.add_request("a", [5, 6, 7, 8, 9, 10, 11, 12, 13], 3)
            for _ in range(steps):
                driver.step()
        except Exception as exc:  # the outcome is the record, whatever vLLM raises
            return exact_error(exc)
        finally:  # the worker-side connector is per process: leave none behind for the next engine
            from vllm.distributed.kv_transfer.kv_transfer_state import ensure_kv_transfer_shutdown

            ensure_kv_transfer_shutdown()
    return "ran"


@contextmanager
def mamba_group(mode: str) -> Iterator[None]:
    """The stubbed runner's KV spec (``runner_stubs.stub_runner``) with a ``MambaSpec`` layer beside its
    attention layer (Mamba blocks of 256 for ``none``, the attention block size for ``align``), and
    ``CacheConfig.mamba_cache_mode`` set to ``mode``: the hybrid KV manager of a Mamba model."""
    v = load_vllm()
    from vllm.v1.kv_cache_interface import MambaSpec

    from asyncspec.engine.vllm import engine_core_driver, oracle_worker

    def wrap_stub(stub_runner: Any) -> Any:
        def stub(runner: Any, block_size: int) -> None:
            stub_runner(runner, block_size)
            attention_only = runner.get_kv_cache_spec

            def with_mamba() -> dict[str, Any]:
                mamba = MambaSpec(block_size=block_size if mode == "align" else 256, shapes=((2,), (2,)),
                                  dtypes=(v.torch.float32, v.torch.float32), mamba_cache_mode=mode)
                return {**attention_only(), MAMBA_LAYER: mamba}

            runner.get_kv_cache_spec = with_mamba
        return stub

    def wrap_build(build_engine_config: Any) -> Any:
        def build(cfg: Any, executor: Any, *args: Any, **kwargs: Any) -> Any:
            config = build_engine_config(cfg, executor, *args, **kwargs)
            config.cache_config.mamba_cache_mode = mode
            return config
        return build

    with wrapped(oracle_worker, "stub_runner", wrap_stub), \
            wrapped(engine_core_driver, "build_engine_config", wrap_build):  # the names the engine target calls
        yield


MAMBA_LAYER = "model.layers.0.mixer"
"""The Mamba layer the attempt's KV spec adds."""


def attempt_mamba_engine(mode: str, steps: int = 8) -> str:
    """One request through the engine target with a Mamba group (``mamba_group(mode)``; prefix caching
    with ``align``, 48 blocks, max_model_len 32): "finished after N steps" or the exact error."""
    from asyncspec.engine.vllm.engine_config import EngineDriverConfig
    from asyncspec.engine.vllm.engine_core_driver import EngineCoreDriver

    with mamba_group(mode):
        try:
            driver = EngineCoreDriver(EngineDriverConfig(enable_prefix_caching=mode == "align", num_blocks=48,
                                                         max_model_len=32))
            driver.add_request("a", [5, 6, 7, 8, 9, 10, 11, 12, 13], 3)
            for step in range(1, steps + 1):
                driver.step()
                if not driver.engine.scheduler.has_requests():
                    return f"finished after {step} steps"
        except Exception as exc:  # the outcome is the record, whatever vLLM raises
            return exact_error(exc)
    return f"unfinished after {steps} steps"
