"""The oracle model over Model Runner V2: the same hash, read where MRV2 lays out a forward pass.

``fake_model.oracle_module_class`` reads V1's ``InputBatch``; MRV2
(``vllm/v1/worker/gpu/``) has no persistent batch.  Its ``prepare_inputs``
(``GPUModelRunner.prepare_inputs``) returns a per-step ``InputBatch``
(``vllm/v1/worker/gpu/input_batch.py``: request ids in batch order, their
token ranges in ``query_start_loc``); ``prepare_attn`` gathers each batch row's
block-table row into ``BlockTables.input_block_tables`` and computes the
slot mapping, both with Triton kernels (``vllm/v1/worker/gpu/block_table.py``),
and hands the slot mapping to the forward context per KV layer — where
vLLM's attention backends read them.  The model reads exactly those: the
batch ``prepare_inputs`` returned (observed, not replaced), the gathered
block table, the forward context's slot mapping, and the ``input_ids`` /
``positions`` it is called with (MRV2's input buffers, filled by its
kernels: prefill tokens, positions, and last step's sampled tokens fed back
by ``combine_sampled_and_draft_tokens``).
"""
from __future__ import annotations

import functools
from typing import Any

from asyncspec.engine.vllm.vllm_environment import load_vllm
from asyncspec.engine.vllm.fake_model import BatchView, oracle_module_class
from asyncspec.engine.vllm.oracle_encoder import oracle_encoder_module_class
from asyncspec.engine.vllm.runner_stubs import LAYER_NAME


def watch_prepare_inputs(runner: Any) -> None:
    """Remember the ``InputBatch`` each ``prepare_inputs`` returns (the real method runs)."""
    prepare = runner.prepare_inputs

    def watched(*args: Any, **kwargs: Any) -> Any:
        batch = prepare(*args, **kwargs)
        runner.asyncspec_input_batch = batch
        return batch

    runner.prepare_inputs = watched
    runner.asyncspec_input_batch = None


@functools.cache
def mrv2_oracle_class(multimodal: bool = False) -> type:
    """``Mrv2OracleModule``: the oracle model reading MRV2's per-step batch (``multimodal``: over the
    stand-in encoder, ``oracle_encoder.py``, as the V1 runner's multimodal oracle)."""
    load_vllm()
    from vllm.forward_context import get_forward_context

    base: Any = oracle_encoder_module_class() if multimodal else oracle_module_class()

    class Mrv2OracleModule(base):  # type: ignore[misc]
        def batch_view(self) -> BatchView:
            batch = self.runner.asyncspec_input_batch
            num_reqs = int(batch.num_reqs)
            slots = get_forward_context().slot_mapping
            assert isinstance(slots, dict), "one forward context per step (no micro-batching)"
            return BatchView(list(batch.req_ids[:num_reqs]),
                             batch.query_start_loc[: num_reqs + 1].cpu().numpy(),
                             self.runner.block_tables.input_block_tables[0].cpu().numpy(),
                             slots[LAYER_NAME].cpu().numpy())

        def state_table(self) -> Any:
            """No Mamba group: the engine target drives one on the V1 runner only (``mamba_case_problem``)."""
            return None

    return Mrv2OracleModule
