"""The oracle model: a deterministic stand-in for a forward pass whose output depends on the whole history.

Each token at position ``p`` carries a *hidden value* ``h(p)``, a running hash
of every token at positions ``0..p`` of its request as the runner fed them.
The model reads ``h(p - 1)`` from the previous row of the same chunk or, for
the first token of a chunk, from its paged KV store through the runner's
block table, and writes ``h(p)`` at the runner's slot mapping.  The greedy
token after position ``p`` is a function of ``h(p)`` and ``p``.  So a token
fed to the wrong request or row, a stale token, a lost or duplicated piece of
history after preemption, or a wrong block or slot all change the stream.

The same two functions applied one token at a time (``expected_stream``) give
what a depth-1 synchronous engine produces: the oracle every target is held to.
"""
from __future__ import annotations

from collections.abc import Sequence

MODULUS = 1_000_003
"""Hidden values live in ``[0, MODULUS)``: exact in float32 (below 2**24)."""
START = 7
"""``h(-1)``: the hidden value before a request's first token."""
EOS_TOKEN_ID = 2
"""The tiny model config's EOS id (``engine/vllm/vllm_config.py``)."""
FIRST_TOKEN_ID = 3
"""Sampled ids are ``FIRST_TOKEN_ID..FIRST_TOKEN_ID + OUTPUT_RANGE - 1`` or EOS; never 0 or 1."""
OUTPUT_RANGE = 997
EOS_ONE_IN = 11
"""About one sampled token in ``EOS_ONE_IN`` is EOS."""
FREQUENCY_PENALTY = 2.0
"""The penalty a penalized request carries: any repeat drops below every unseen token."""
REPEAT_BREAK_ONE_IN = 4
"""A periodic request repeats the token ``period`` positions back, except about one position in this many."""


def next_hidden(previous: int, token: int, position: int) -> int:
    """``h(p)`` from ``h(p - 1)``, the token at ``p`` and ``p`` itself.

    >>> next_hidden(START, 5, 0) == next_hidden(START, 5, 0) != next_hidden(START, 6, 0)
    True
    """
    return (previous * 31 + token * 7 + position * 131 + 17) % MODULUS


def output_token(hidden: int, position: int) -> int:
    """The greedy token the model samples after the token at ``position``."""
    mixed = (hidden * 2654435761 + position * 40503) % MODULUS
    if mixed % EOS_ONE_IN == 0:
        return EOS_TOKEN_ID
    return FIRST_TOKEN_ID + mixed % OUTPUT_RANGE


def periodic_token(hidden: int, position: int, repeated: int) -> int:
    """The greedy token after ``position`` for a periodic request: ``repeated`` (the token at
    ``position + 1 - period``) unless ``h(position)`` breaks the pattern.

    Periodic requests let an n-gram drafter propose drafts the model accepts:
    its lookup finds the last tokens earlier in the history and proposes what
    followed them, which is right while the pattern holds and wrong after a
    break.  The break still depends on the whole history through the hash.
    """
    if hidden % REPEAT_BREAK_ONE_IN:
        return repeated
    return output_token(hidden, position)


def penalized(token: int, outputs: Sequence[int]) -> int:
    """The greedy token under a frequency penalty > 1 (``SamplingParams.frequency_penalty``).

    The model's logits are 1 for its token and 0 elsewhere; vLLM subtracts
    ``penalty * count`` for every token already in the output
    (``apply_penalties``, vllm/model_executor/layers/utils.py).  A token that
    already occurred drops below 0, so argmax takes the lowest id still at 0:
    the lowest id not in the output.
    """
    if token not in outputs:
        return token
    seen = set(outputs)
    return next(t for t in range(len(seen) + 1) if t not in seen)


def expected_stream(prompt: Sequence[int], num_tokens: int, frequency_penalty: bool = False,
                    period: int = 0) -> list[int]:
    """The first ``num_tokens`` tokens a synchronous engine samples for ``prompt``.

    ``period`` > 0: a periodic request (``periodic_token``); its prompt is longer than ``period``.

    >>> s = expected_stream([5, 9, 4], 4)
    >>> len(s), s == expected_stream([5, 9, 4], 6)[:4]
    (4, True)
    """
    history = list(prompt)
    hidden = START
    out: list[int] = []
    for position in range(len(prompt) + num_tokens - 1):
        hidden = next_hidden(hidden, history[position], position)
        if position >= len(prompt) - 1:
            source = position + 1 - period
            if period and source >= 0:
                token = periodic_token(hidden, position, history[source])
            else:
                token = output_token(hidden, position)
            out.append(penalized(token, out) if frequency_penalty else token)
            history.append(out[-1])
    return out[:num_tokens]


def first_stop(stream: Sequence[int], stop_token_ids: Sequence[int], ignore_eos: bool) -> int:
    """The 1-based output position at which the request stops, or 0 if it never does.

    vLLM's ``check_stop`` (vllm/v1/core/sched/utils.py): EOS unless
    ``ignore_eos``, or any of ``stop_token_ids``.
    """
    for k, token in enumerate(stream, start=1):
        if (token == EOS_TOKEN_ID and not ignore_eos) or token in stop_token_ids:
            return k
    return 0


IMAGE_BASE = 100_000
"""Image embeddings carry ids from ``IMAGE_BASE`` on: never a vocabulary id (below 1000)."""
IMAGE_STRIDE = 1_000
"""Ids per image item: an image has fewer positions than this."""


def image_token(item: int, index: int) -> int:
    """The value the stand-in encoder writes for embedding ``index`` of image ``item``
    (``oracle_encoder.py``): what the model reads at that image position in place of a token id.

    >>> image_token(0, 1) != image_token(1, 0) != image_token(0, 0)
    True
    """
    return IMAGE_BASE + item * IMAGE_STRIDE + index


def embedded_prompt(prompt: Sequence[int], images: Sequence[tuple[int, int, int]]) -> list[int]:
    """``prompt`` as the model reads it: each image's positions ``[offset, offset + length)`` hold its
    embeddings ``image_token(item, 0..length - 1)``, the other positions their token ids.

    >>> embedded_prompt([5, 6, 7, 8], [(1, 2, 3)]) == [5, image_token(3, 0), image_token(3, 1), 8]
    True
    """
    out = list(prompt)
    for offset, length, item in images:
        out[offset:offset + length] = [image_token(item, j) for j in range(length)]
    return out
