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
from typing import Any

from asyncspec.engine.vllm.cpu_limit_attempts import exact_error
from asyncspec.engine.vllm.vllm_environment import load_vllm

OFFLOAD_CPU_BYTES = 1 << 20
"""The CPU tier of the attempt (``cpu_bytes_to_use``), as the ``vllm`` target's offload part."""


@contextmanager
def offloading_connector() -> Iterator[None]:
    """The engine target's ``KVTransferConfig`` replaced by vLLM's ``OffloadingConnector``, kv_both."""
    load_vllm()
    from vllm.config import KVTransferConfig

    from asyncspec.engine.vllm import engine_config

    def transfer(cfg: Any) -> Any:
        return KVTransferConfig(kv_connector="OffloadingConnector", kv_role="kv_both",
                                kv_connector_extra_config={"cpu_bytes_to_use": OFFLOAD_CPU_BYTES})

    original = engine_config.kv_transfer_config
    setattr(engine_config, "kv_transfer_config", transfer)
    try:
        yield
    finally:
        setattr(engine_config, "kv_transfer_config", original)


@contextmanager
def kv_tensors() -> Iterator[None]:
    """The stubbed runner (``runner_stubs.stub_runner``) also returning a zero KV tensor, blocks
    first, for its one attention layer, as a GPU runner's ``initialize_kv_cache_tensors`` does."""
    torch = load_vllm().torch
    from asyncspec.engine.vllm import oracle_worker, runner_stubs

    original = oracle_worker.stub_runner

    def stub(runner: Any, block_size: int) -> None:
        original(runner, block_size)
        allocate = runner.initialize_kv_cache_tensors

        def with_tensor(kv_cache_config: Any, kernel_block_sizes: Any, kv_cache_allocation_context: Any = None) -> Any:
            allocate(kv_cache_config, kernel_block_sizes, kv_cache_allocation_context)
            return {runner_stubs.LAYER_NAME: torch.zeros(kv_cache_config.num_blocks, 2, block_size, 1, 1)}

        runner.initialize_kv_cache_tensors = with_tensor

    setattr(oracle_worker, "stub_runner", stub)
    try:
        yield
    finally:
        setattr(oracle_worker, "stub_runner", original)


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
