"""A grammar stand-in for structured output: xgrammar and a tokenizer are not installed here.

The recording grammar accepts every token and records, for each bitmask row
vLLM asks it to fill, how many tokens it had accepted: enough to check that
vLLM's ``StructuredOutputManager`` advances grammars in order under deferred
sampling.  Only a backend's bitmask allocation and grammar compilation are
stood in for.
"""

from __future__ import annotations

import functools
from typing import Any

from asyncspec.engine.vllm.vllm_config import VOCAB_SIZE
from asyncspec.engine.vllm.vllm_environment import load_vllm

RECORDING_BACKEND = "recording"
"""The backend name requests name (``StructuredOutputsParams._backend``) for the stand-in."""


class BitmaskOnlyBackend:
    """What ``StructuredOutputManager`` needs from a backend: ``allocate_token_bitmask``
    (xgrammar's layout: one int32 per 32 tokens, all allowed) and ``compile_grammar``
    (a ``RecordingGrammar``, at once)."""

    def __init__(self, torch: Any) -> None:
        self._torch = torch

    def allocate_token_bitmask(self, max_num_seqs: int) -> Any:
        return self._torch.full((max_num_seqs, (VOCAB_SIZE + 31) // 32), -1,
                                dtype=self._torch.int32)

    def compile_grammar(self, request_type: Any, grammar_spec: str, stop_token_ids: Any = None) -> Any:
        return recording_grammar_class()(grammar_spec)


@functools.cache
def recording_grammar_class() -> type:
    """``RecordingGrammar``: a ``StructuredOutputGrammar`` (vllm/v1/structured_output/
    backend_types.py) that accepts every token and records what it saw.

    ``accepted`` is the grammar's token sequence (``accept_tokens`` appends,
    ``rollback`` removes the tentative draft tokens again); ``fills`` holds, for
    each bitmask row filled (``fill_bitmask``), how many tokens the grammar had
    accepted at that moment.
    """
    base = load_vllm().StructuredOutputGrammar

    class RecordingGrammar(base):  # type: ignore[misc, valid-type]
        def __init__(self, req_id: str) -> None:
            self.req_id = req_id
            self.accepted: list[int] = []
            self.fills: list[int] = []

        def accept_tokens(self, request_id: str, tokens: list[int]) -> bool:
            self.accepted.extend(int(t) for t in tokens)
            return True

        def validate_tokens(self, tokens: list[int]) -> list[int]:
            return list(tokens)

        def rollback(self, num_tokens: int) -> None:
            del self.accepted[len(self.accepted) - num_tokens:]

        def fill_bitmask(self, bitmask: Any, idx: int) -> None:
            self.fills.append(len(self.accepted))

        def is_terminated(self) -> bool:
            return False

        def reset(self) -> None:
            self.accepted.clear()

    return RecordingGrammar
