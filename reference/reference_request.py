"""A request as the reference engine stores it: mutable, with vLLM's field names.

The fields mirror ``vllm/v1/request.py`` (vLLM 0.33.0): ``num_computed_tokens``,
``num_output_placeholders``, ``num_in_flight_tokens``,
``num_stale_output_tokens``, ``drop_stale_output``, ``last_sched_seq``,
``is_prefill_chunk``, ``next_decode_eligible_step``, ``block_hashes``.  The
block hashes are kept up to date as tokens are appended (vLLM's
``update_block_hashes``): one hash per *full* block of known tokens, chained
over the token ids, so two requests share a hash only if their token
prefixes are equal.

A few counters exist for observability only (vLLM has no such field); the
abstraction function maps them onto the spec's ghost counters:
``num_wasted_steps``, ``output_out_of_order`` and ``num_output_cached_tokens``.

Example:
    >>> r = Request("r0", prompt_token_ids=[7, 8, 9, 10, 11], max_tokens=3, block_size=4)
    >>> r.num_tokens, len(r.block_hashes), r.status.name
    (5, 1, 'WAITING')
    >>> r.append_output_token_ids(12)
    >>> r.num_output_tokens, r.num_tokens
    (1, 6)
"""
from __future__ import annotations

import enum

EOS_TOKEN_ID = 0
"""The end-of-sequence token of the reference vocabulary."""

NONE_HASH = 0
"""The parent hash of a request's first block (vLLM's ``NONE_HASH``)."""


class RequestStatus(enum.IntEnum):
    """``vllm.v1.request.RequestStatus``, restricted to the states the reference uses.

    The values equal the spec's status codes (``spec/request.py``); a status
    above ``PREEMPTED`` is finished.
    """

    WAITING = 0
    RUNNING = 1
    PREEMPTED = 2
    FINISHED_STOPPED = 3
    FINISHED_LENGTH_CAPPED = 4
    FINISHED_ABORTED = 5

    @property
    def is_finished(self) -> bool:
        """``RequestStatus.is_finished``."""
        return self > RequestStatus.PREEMPTED


FINISH_REASONS = {
    RequestStatus.FINISHED_STOPPED: "stop",
    RequestStatus.FINISHED_LENGTH_CAPPED: "length",
    RequestStatus.FINISHED_ABORTED: "abort",
}
"""The client-visible finish reason of each finished status (vLLM's ``FinishReason``)."""


def hash_block_tokens(parent_hash: int, token_ids: tuple[int, ...]) -> int:
    """The hash of one full block, chained on its parent's hash.

    Python's hash of a tuple of ints is deterministic (no ``PYTHONHASHSEED``
    dependence), which keeps explorations reproducible.

    >>> hash_block_tokens(NONE_HASH, (1, 2)) == hash_block_tokens(NONE_HASH, (1, 2))
    True
    >>> hash_block_tokens(NONE_HASH, (1, 2)) == hash_block_tokens(NONE_HASH, (2, 1))
    False
    """
    return hash((parent_hash, token_ids))


class Request:
    """One request: its tokens, its scheduler counters, and its block hashes."""

    __slots__ = (
        "request_id", "prompt_token_ids", "max_tokens", "eos_token_id", "block_size",
        "status", "output_token_ids", "num_computed_tokens", "num_output_placeholders",
        "num_in_flight_tokens", "num_stale_output_tokens", "drop_stale_output",
        "last_sched_seq", "is_prefill_chunk", "next_decode_eligible_step", "block_hashes",
        "num_cached_tokens_frontier", "num_preemptions", "num_wasted_steps",
        "output_out_of_order", "num_output_cached_tokens", "abort_deferred", "_hashed_tokens",
    )

    def __init__(
        self,
        request_id: str,
        prompt_token_ids: list[int],
        max_tokens: int,
        block_size: int,
        eos_token_id: int = EOS_TOKEN_ID,
    ) -> None:
        if not prompt_token_ids or max_tokens < 1 or block_size < 1:
            raise ValueError(f"{request_id}: needs a prompt, max_tokens >= 1 and block_size >= 1")
        self.request_id = request_id
        self.prompt_token_ids = list(prompt_token_ids)
        self.max_tokens = max_tokens
        self.eos_token_id = eos_token_id
        self.block_size = block_size
        self.status = RequestStatus.WAITING
        self.output_token_ids: list[int] = []
        self.num_computed_tokens = 0
        self.num_output_placeholders = 0
        self.num_in_flight_tokens = 0
        self.num_stale_output_tokens = 0
        self.drop_stale_output = False
        self.last_sched_seq = 0
        self.is_prefill_chunk = False
        self.next_decode_eligible_step = 0
        self.block_hashes: list[int] = []
        self.num_cached_tokens_frontier = 0  # tokens in this request's cached full blocks
        self.num_preemptions = 0
        self.num_wasted_steps = 0  # stats: steps whose output came after the engine finished it
        self.output_out_of_order = False  # stats: a token landed at a wrong output position
        self.num_output_cached_tokens = 0  # stats: frontier reached by output-time caching
        self.abort_deferred = False  # SGLang's Req.to_finish: aborted while running (abort_mode "deferred")
        self._hashed_tokens = 0
        self._update_block_hashes()

    # ------------------------------------------------------------ derived values

    @property
    def num_prompt_tokens(self) -> int:
        """P."""
        return len(self.prompt_token_ids)

    @property
    def num_output_tokens(self) -> int:
        """O."""
        return len(self.output_token_ids)

    @property
    def num_tokens(self) -> int:
        """N = P + O."""
        return len(self.prompt_token_ids) + len(self.output_token_ids)

    def token_at(self, position: int) -> int:
        """The token id at sequence position ``position`` (0-based, known tokens only)."""
        p = len(self.prompt_token_ids)
        return self.prompt_token_ids[position] if position < p else self.output_token_ids[position - p]

    def is_finished(self) -> bool:
        """``Request.is_finished()``."""
        return self.status > RequestStatus.PREEMPTED

    @property
    def finish_reason(self) -> str | None:
        """``"stop"``, ``"length"``, ``"abort"``, or None while unfinished."""
        return FINISH_REASONS.get(self.status)

    # ------------------------------------------------------------ token appends

    def append_output_token_ids(self, token_id: int) -> None:
        """``Request.append_output_token_ids``: one token, then new block hashes."""
        self.output_token_ids.append(token_id)
        self._update_block_hashes()

    def _update_block_hashes(self) -> None:
        """Hash every newly completed full block (amortised O(1) per token)."""
        bs = self.block_size
        while self._hashed_tokens + bs <= self.num_tokens:
            start = self._hashed_tokens
            tokens = self._token_slice(start, start + bs)
            parent = self.block_hashes[-1] if self.block_hashes else NONE_HASH
            self.block_hashes.append(hash_block_tokens(parent, tokens))
            self._hashed_tokens += bs

    def _token_slice(self, start: int, stop: int) -> tuple[int, ...]:
        """Known tokens ``[start, stop)`` without building the whole sequence."""
        p = len(self.prompt_token_ids)
        if stop <= p:
            return tuple(self.prompt_token_ids[start:stop])
        if start >= p:
            return tuple(self.output_token_ids[start - p : stop - p])
        return tuple(self.prompt_token_ids[start:]) + tuple(self.output_token_ids[: stop - p])

    def __repr__(self) -> str:
        return (f"Request({self.request_id} {self.status.name} N={self.num_tokens} "
                f"C={self.num_computed_tokens} H={self.num_output_placeholders} "
                f"F={self.num_in_flight_tokens} X={self.num_stale_output_tokens})")
