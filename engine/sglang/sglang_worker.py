"""The fake model worker: stands in for ``TpModelWorker.forward_batch_generation`` only.

SGLang's ``Scheduler.run_batch`` (``managers/scheduler.py``) calls the worker with the
``ScheduleBatch`` after ``resolve_forward_inputs`` (``managers/overlap_utils.py``) has
filled ``batch.input_ids`` (a prefill's staged ids, or a decode's tokens gathered from
``FutureMap.output_tokens_buf`` by ``req_pool_idx``).  This worker does what the model's
attention does with those inputs, on token ids instead of vectors:

1. writes each input id into the KV slot ``batch.out_cache_loc`` gives it (a poisoned store,
   -1 until written);
2. for each row, reads the row's whole history back through ``req_to_token[req_pool_idx,
   :seq_len]`` and samples ``oracle.next_token(history)``.

So a token fed to the wrong row, a slot freed and rewritten while still in a request's
table, or a sample at the wrong position changes the stream the target compares.
Everything before and after (``FutureMap.stash``/``publish``, result processing) is
SGLang's own.  Each row is recorded for the trace.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from asyncspec.engine.sglang import sglang_oracle as oracle


@dataclass
class RequestScript:
    """What the oracle needs per request: prompt length and EOS position (0 = never)."""

    prompt_len: int
    eos_at: int


@dataclass
class FakeWorker:
    """``forward_batch_generation`` over a token-id KV store; ``sink`` receives every forward."""

    req_to_token: Any  # ReqToTokenPool.req_to_token (torch tensor)
    pool_size: int
    scripts: dict[str, RequestScript] = field(default_factory=dict)
    sink: Callable[[dict[str, Any]], None] = lambda record: None  # where each forward is recorded
    kv: Any = None

    def __post_init__(self) -> None:
        import torch
        self.kv = torch.full((self.pool_size + 2,), -1, dtype=torch.int64)

    def forward_batch_generation(self, batch: Any, **_: Any) -> Any:
        """Write the fed ids into their KV slots, sample every row from its history."""
        import torch
        from sglang.srt.managers.utils import GenerationBatchResult

        fed = batch.input_ids.to(torch.int64)
        self.kv[batch.out_cache_loc.to(torch.int64)] = fed
        extend = batch.forward_mode.is_extend()
        lens = batch.extend_lens if extend else [1] * len(batch.reqs)
        tokens, rows, start = [], [], 0
        for i, req in enumerate(batch.reqs):
            seq_len = int(batch.seq_lens[i])
            slots = self.req_to_token[int(batch.req_pool_indices[i]), :seq_len].to(torch.int64)
            history = self.kv[slots].tolist()
            script = self.scripts.get(req.rid, RequestScript(len(req.origin_input_ids), 0))
            token = oracle.next_token(history, script.eos_at, script.prompt_len)
            tokens.append(token)
            n = int(lens[i])
            rows.append({"rid": req.rid, "n": n, "seq_len": seq_len, "token": token,
                         "fed": fed[start:start + n].tolist()[-1:] if n else []})
            start += n
        self.sink({"op": "forward", "mode": "extend" if extend else "decode", "rows": rows})
        return GenerationBatchResult(
            logits_output=None,
            next_token_ids=torch.tensor(tokens, dtype=torch.int64),
            can_run_cuda_graph=False,
        )

    def reset(self) -> None:
        """Poison every KV slot (a new case must not read an old case's tokens)."""
        self.kv.fill_(-1)
