"""The oracle model: each sampled token is a function of the whole token history as fed.

Pure Python (no torch, no SGLang): the fake model worker in the SGLang venv calls it with
the history it reads back from the KV slots ``req_to_token`` names for a row, and the
fuzz target in the project venv calls it with the prompt and the tokens the spec says were
delivered.  A token written to the wrong KV slot, a row fed another request's token
(``FutureMap`` indexing), or a sample at the wrong position changes every later token.

Example:
    >>> next_token((5, 6, 7), eos_at=0, prompt_len=3) == next_token((5, 6, 7), 0, 3)
    True
    >>> next_token((5, 6, 7, 9), eos_at=2, prompt_len=3) == EOS
    True
"""
from __future__ import annotations

import hashlib
from collections.abc import Sequence

VOCAB = 500  # tokens are drawn from [FIRST, FIRST + VOCAB); the tiny model's vocab is 512
FIRST = 4  # ids below FIRST are special: EOS (2) is never drawn by chance
EOS = 2  # the tiny model config's eos_token_id


def history_token(history: Sequence[int]) -> int:
    """A token determined by the whole history (blake2b of the ids)."""
    digest = hashlib.blake2b(",".join(map(str, history)).encode(), digest_size=8).digest()
    return FIRST + int.from_bytes(digest, "little") % VOCAB


def next_token(history: Sequence[int], eos_at: int, prompt_len: int) -> int:
    """The token sampled after ``history``: EOS at output position ``eos_at`` (1-based; 0 = never)."""
    position = len(history) - prompt_len + 1
    if eos_at and position == eos_at:
        return EOS
    return history_token(history)


def stream(prompt: Sequence[int], eos_at: int, length: int) -> list[int]:
    """The first ``length`` output tokens of a request whose history is always fed correctly."""
    out: list[int] = []
    for _ in range(length):
        out.append(next_token([*prompt, *out], eos_at, len(prompt)))
    return out
