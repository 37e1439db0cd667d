"""The oracle model as the ``torch.nn.Module`` vLLM's model runner calls.

It replaces only the forward pass (no weights, no attention kernels).  It reads
the inputs the runner built — ``input_ids`` and ``positions`` as passed, the
row boundaries from ``query_start_loc``, the committed block table and the slot
mapping — exactly where vLLM's attention backends read them, and applies
``oracle_model.next_hidden`` token by token.  The hidden value of a chunk's
first token comes from the paged store at the slot of the previous position
(through the block table), so the stream depends on every token the runner
fed and stored.  Each forward also records what was fed to each request: the
*worker column* of a divergence table.

A *periodic* request (``periods``, set when it is added, like a sampling
parameter) mostly repeats the token ``period`` positions back
(``oracle_model.periodic_token``), read from the current chunk or, further
back, from the paged store through the block table: what lets an n-gram
drafter propose drafts that are accepted.  The model puts the token it
predicts in the hidden state's last column; ``compute_logits`` makes it the
one-hot logits row.

With a Mamba group beside attention (``mamba_cache_mode`` none, ``runner_stubs.stub_runner``) the model
keeps a recurrent state too: each request's state block is the first entry of its row in the runner's
second block table (group 1, where vLLM's Mamba kernels read their state indices), and a chunk ends by
writing its last hidden value there.  A chunk that does not start at position 0 reads that state and
must find the hidden value the paged store holds for its previous position; a state block that is not
the request's, or one another request wrote since, poisons the chunk (``UNWRITTEN``), so the wrong
state shows in the sampled tokens.  A chunk from position 0 starts fresh, as a Mamba layer does without
an initial state (``has_initial_states``: no computed tokens).
"""
from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import numpy as np

from asyncspec.engine.vllm import oracle_model as om
from asyncspec.engine.vllm.vllm_environment import load_vllm

UNWRITTEN = -1
"""A KV slot no token has written since the pool was allocated (poison)."""


@dataclass(frozen=True)
class FedRow:
    """What the runner fed one request in one forward pass."""

    req_id: str
    start_position: int
    token_ids: tuple[int, ...]


@dataclass(frozen=True)
class BatchView:
    """One forward pass as the runner laid it out: per batch row its request, token range
    (``starts[row]:starts[row + 1]``) and block-table row; per token its KV slot."""

    req_ids: list[str]
    starts: np.ndarray
    table: np.ndarray
    slots: np.ndarray


@functools.cache
def oracle_module_class() -> type:
    """``OracleModule``: built lazily, since it subclasses ``torch.nn.Module``."""
    torch = load_vllm().torch

    class OracleModule(torch.nn.Module):  # type: ignore[misc, name-defined]
        def __init__(self, vocab_size: int) -> None:
            super().__init__()
            self.vocab_size = vocab_size
            self.runner: Any = None
            self.store = np.zeros(0, dtype=np.int64)
            self.tokens = np.zeros(0, dtype=np.int64)  # the token fed at each slot
            self.periods: dict[str, int] = {}  # request id -> period (periodic requests)
            self.block_size = 0
            self.states = np.zeros(0, dtype=np.int64)  # per pool block: the Mamba state written there
            self.fed: list[list[FedRow]] = []  # one list per forward pass

        def allocate(self, num_blocks: int, block_size: int) -> None:
            self.store = np.full(num_blocks * block_size, UNWRITTEN, dtype=np.int64)
            self.tokens = np.full(num_blocks * block_size, UNWRITTEN, dtype=np.int64)
            self.states = np.full(num_blocks, UNWRITTEN, dtype=np.int64)
            self.block_size = block_size

        def reset(self) -> None:
            """Poison every KV slot and state block again and forget what was fed (between cases)."""
            self.store.fill(UNWRITTEN)
            self.tokens.fill(UNWRITTEN)
            self.states.fill(UNWRITTEN)
            self.fed = []
            self.periods = {}

        def load_kv(self, block_ids: tuple[int, ...], token_ids: tuple[int, ...], invalid: set[int]) -> None:
            """What a KV connector's load writes (``toy_connector.py``'s worker half): the states a
            remote prefill of ``token_ids`` left at positions 0.. of ``block_ids``, except in the
            blocks in ``invalid`` (they stay poisoned; the scheduler has them recomputed)."""
            hidden = om.START
            for position, token in enumerate(token_ids):
                hidden = om.next_hidden(hidden, token, position)
                block = block_ids[position // self.block_size]
                if block not in invalid:
                    slot = block * self.block_size + position % self.block_size
                    self.store[slot], self.tokens[slot] = hidden, token

        def forward(self, input_ids: Any = None, positions: Any = None, intermediate_tensors: Any = None,
                    inputs_embeds: Any = None, **kwargs: Any) -> Any:
            hidden = self._hidden(input_ids.cpu().numpy(), positions.cpu().numpy())
            return torch.from_numpy(hidden).to(input_ids.device)

        def batch_view(self) -> BatchView:
            """The V1 runner's batch: ``query_start_loc``, the committed block table and slot mapping
            of its ``InputBatch`` (what its attention metadata is built from)."""
            runner = self.runner
            num_reqs = runner.input_batch.num_reqs
            return BatchView(list(runner.input_batch.req_ids[:num_reqs]),
                             runner.query_start_loc.gpu[: num_reqs + 1].cpu().numpy(),
                             runner.input_batch.block_table[0].block_table.gpu.cpu().numpy(),
                             runner.input_batch.block_table[0].slot_mapping.gpu.cpu().numpy())

        def state_table(self) -> np.ndarray | None:
            """The runner's committed block table of its Mamba group (the second), or None without one."""
            tables = self.runner.input_batch.block_table.block_tables
            if len(tables) < 2:
                return None
            return np.asarray(tables[1].block_table.gpu.cpu().numpy())

        def _hidden(self, input_ids: np.ndarray, positions: np.ndarray) -> np.ndarray:
            view = self.batch_view()
            req_ids, starts, table, slots = view.req_ids, view.starts, view.table, view.slots
            states = self.state_table()
            num_reqs = len(req_ids)
            out = np.zeros((len(input_ids), 3), dtype=np.float32)
            fed: list[FedRow] = []
            for row in range(num_reqs):
                lo, hi = int(starts[row]), int(starts[row + 1])
                first = int(positions[lo])
                period = self.periods.get(req_ids[row], 0)
                hidden = om.START if first == 0 else self._read(self.store, table[row], first - 1)
                state = -1 if states is None else int(states[row, 0])
                if state >= 0 and first > 0 and int(self.states[state]) != hidden:
                    hidden = UNWRITTEN  # the state block does not hold this request's state
                for i in range(lo, hi):
                    position = int(positions[i])
                    hidden = om.next_hidden(hidden, int(input_ids[i]), position)
                    self.store[int(slots[i])] = hidden
                    self.tokens[int(slots[i])] = int(input_ids[i])
                    token = om.output_token(hidden, position)
                    source = position + 1 - period
                    if period and source >= 0:
                        repeated = (int(input_ids[lo + source - first]) if source >= first
                                    else self._read(self.tokens, table[row], source))
                        token = om.periodic_token(hidden, position, repeated)
                    out[i] = (hidden, position, token)
                if state >= 0 and hi > lo:
                    self.states[state] = hidden
                fed.append(FedRow(req_ids[row], first,
                                  tuple(int(t) for t in input_ids[lo:hi])))
            self.fed.append(fed)
            return out

        def _read(self, store: np.ndarray, block_row: np.ndarray, position: int) -> int:
            slot = int(block_row[position // self.block_size]) * self.block_size + position % self.block_size
            return int(store[slot])

        def compute_logits(self, hidden_states: Any) -> Any:
            logits = torch.zeros((hidden_states.shape[0], self.vocab_size), dtype=torch.float32)
            for i, (_, _, token) in enumerate(hidden_states.tolist()):
                logits[i, int(token)] = 1.0
            return logits.to(hidden_states.device)

    return OracleModule
