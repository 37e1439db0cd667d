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

from contextlib import nullcontext
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
        def stub(runner: Any, block_size: int, *mamba: Any) -> None:
            stub_runner(runner, block_size, *mamba)
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


def attempt_mamba_engine(mode: str, steps: int = 8) -> str:
    """One request through the engine target with a Mamba group (``EngineDriverConfig.mamba_cache_mode``:
    the runner reports a ``MambaSpec`` layer beside attention, ``runner_stubs.stub_runner``; prefix
    caching with ``align``, 48 blocks, max_model_len 32): "finished after N steps" or the exact error.
    Mode ``none`` is the engine target's ``mamba`` part; ``align`` stops at the runner's state copy."""
    from asyncspec.engine.vllm.engine_config import EngineDriverConfig
    from asyncspec.engine.vllm.engine_core_driver import EngineCoreDriver

    try:
        driver = EngineCoreDriver(EngineDriverConfig(enable_prefix_caching=mode == "align", num_blocks=48,
                                                     max_model_len=32, mamba_cache_mode=mode))
        driver.add_request("a", [5, 6, 7, 8, 9, 10, 11, 12, 13], 3)
        for step in range(1, steps + 1):
            driver.step()
            if not driver.engine.scheduler.has_requests():
                return f"finished after {step} steps"
    except Exception as exc:  # the outcome is the record, whatever vLLM raises
        return exact_error(exc)
    return f"unfinished after {steps} steps"
