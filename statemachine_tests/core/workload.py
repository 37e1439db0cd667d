"""A fuzz workload: the engine settings and the requests every target is built from.

``Workload`` is drawn by ``profiles.workloads`` and saved in replay files
(``to_json``/``from_json``); ``workload_problem`` says why one cannot be
compared.  Re-exported by ``harness``.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Literal, NamedTuple
from collections.abc import Mapping

StaleMode = Literal["deliver", "drop"]
LoopMode = Literal["exact", "free"]

MAX_REQUESTS = 64

MAX_TOKENS = 2**20
"""A prompt, max_tokens, the budget: at most a million tokens (``spec/config.py``'s bound too)."""

LIMITS: dict[str, tuple[int, int, str]] = {
    "block_size": (1, 1024, "tokens per KV block"),
    "num_blocks": (1, 4096, "the spec's states hold the whole pool"),
    "token_budget": (1, MAX_TOKENS, "a token count"),
    "max_num_seqs": (1, 1024, "requests running at once"),
    "reset_prefix_cache": (0, 16, "calls allowed"),
    "pauses": (0, 4, "pause_scheduler calls allowed"),
    "num_speculative_tokens": (0, 4, "draft tokens per step"),
    "sliding_window": (0, MAX_TOKENS, "a token count"),
    "long_prefill_token_threshold": (0, MAX_TOKENS, "a token count"),
    "model_len": (0, 2 * MAX_TOKENS, "a token count"),
    "encoder_cache_size": (0, MAX_TOKENS, "embeddings (images only)"),
    "encoder_compute_budget": (0, MAX_TOKENS, "embeddings per step (images only)"),
}
"""The range of each integer setting of a workload, (lowest, highest, why): what the spec and the engines
can hold; replay files are checked against them as JSON Schema ``minimum``/``maximum`` (``replay_file.py``)."""


class RequestSpec(NamedTuple):
    """One request of a workload."""

    prompt_len: int
    max_tokens: int
    eos_position: int = 0  # output position whose token is EOS; 0 = never


@dataclass(frozen=True)
class Workload:
    """Engine settings and requests; every target is built from one of these."""

    requests: tuple[RequestSpec, ...]
    depth: int = 2  # batch-queue depth D: 1 = Scheduler, 2 = AsyncScheduler
    block_size: int = 4
    num_blocks: int = 16  # usable KV blocks (vLLM gets one more: its null block)
    token_budget: int = 16  # max_num_batched_tokens
    max_num_seqs: int = 4
    chunked_prefill: bool = True
    prefix_caching: bool = False
    defer_block_free: bool = False
    stale_mode: StaleMode = "deliver"  # requires_kv_delivery False / True
    loop: LoopMode = "exact"  # EngineCore.step_with_batch_queue, or any FIFO interleaving
    aborts: bool = True
    reset_prefix_cache: int = 0  # reset_prefix_cache calls allowed
    num_speculative_tokens: int = 0  # k: draft positions per decode step (0 = no spec decode)
    structured_output: tuple[int, ...] = ()  # requests with a grammar
    sliding_window: int = 0  # W > 0: a sliding-window KV cache group beside the full one (hybrid)
    kv_connector: str = ""  # "toy" (engine/vllm/toy_connector.py), "nixl" or "offloading" (vLLM's); spec/connector.py
    kv_load_failure_policy: str = "recompute"  # or "fail"
    remote_loads: tuple[int, ...] = ()  # requests the connector loads asynchronously
    remote_sends: tuple[int, ...] = ()  # requests whose KV the connector sends when they finish
    policy: str = "fcfs"  # SchedulerConfig.policy: "fcfs" or "priority"
    priorities: tuple[int, ...] = ()  # per request (priority policy; lower first); () = all 0
    long_prefill_token_threshold: int = 0  # 0 = no cap
    long_prefill_adaptive: bool = False  # long_prefill_token_threshold_adaptive
    model_len: int = 0  # > 0: max_model_len, which a request's P + M may exceed (LENGTH at it)
    pauses: int = 0  # EngineCore.pause_scheduler calls allowed (any mode), each followed by a resume
    kv_offload_prompt_only: bool = True  # offloading: offload_prompt_only (vLLM's default); False stores decode blocks too
    kv_invalid_blocks: bool = False  # the worker may report a load's blocks from block j on invalid
    resumable: tuple[int, ...] = ()  # streaming-input sessions (Request.resumable; spec/streaming.py)
    stream_updates: tuple[tuple[int, int], ...] = ()  # each session's later inputs: (new prompt tokens,
    # max_tokens), then the end of its input stream
    images: tuple[tuple[int, int, int, int], ...] = ()  # encoder inputs: (request, offset, length, item) each
    # (spec/encoder.py); equal items share one encoder-cache entry
    encoder_cache_size: int = 0  # EncoderCacheManager.cache_size (embeddings; images only)
    encoder_compute_budget: int = 0  # max_num_encoder_input_tokens: embeddings encoded per step (images only)
    mamba_cache_mode: str = ""  # "none" / "align": a Mamba state group beside attention (spec/mamba.py)
    sync_scheduler: bool = False  # depth 2 over the plain Scheduler: pipeline parallelism 2 without async scheduling
    stops: tuple[tuple[int, int, int, int, int, int, int], ...] = ()  # how requests stop (core/stop_tokens.py):
    # (request, kind, min_tokens, min_pattern_size, max_pattern_size, min_count, pattern_len); kind 0 = EOS at
    # eos_position, 1 = a stop token there, 2 = a repeated pattern from there; a request not listed: EOS
    skip_reading: tuple[int, ...] = ()  # requests with SamplingParams.skip_reading_prefix_cache (prompt logprobs
    # set it): never a prefix-cache hit (spec/blocks.longest_cache_hit)

    def session_len(self, index: int) -> int:
        """The longest sequence request ``index`` reaches over all its turns
        (``spec/config.session_length``: each turn's last sampled token is discarded)."""
        r = self.requests[index]
        if index not in self.resumable:
            return r.prompt_len + r.max_tokens
        return r.prompt_len + r.max_tokens + sum(u + m - 1 for u, m in self.stream_updates)

    @property
    def max_model_len(self) -> int:
        """vLLM's max_model_len (the spec's too): ``model_len`` if set, else the budget
        without chunked prefill (vLLM requires it), else a bound no request reaches."""
        if self.model_len:
            return self.model_len
        if not self.chunked_prefill:
            return self.token_budget
        longest = max(self.session_len(i) for i in range(len(self.requests)))
        return max(4096, 1 << (longest - 1).bit_length())

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["requests"] = [list(r) for r in self.requests]
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Workload:
        kwargs = dict(data)
        kwargs["requests"] = tuple(RequestSpec(*map(int, r)) for r in data["requests"])
        for key in ("structured_output", "remote_loads", "remote_sends", "priorities", "resumable", "skip_reading"):
            kwargs[key] = tuple(int(i) for i in data.get(key, ()))
        kwargs["stream_updates"] = tuple((int(u), int(m)) for u, m in data.get("stream_updates", ()))
        kwargs["images"] = tuple(tuple(int(x) for x in image) for image in data.get("images", ()))
        kwargs["stops"] = tuple(tuple(int(x) for x in stop) for stop in data.get("stops", ()))
        return cls(**kwargs)


def kv_events_on(w: Workload) -> bool:
    """Whether the ``vllm`` target turns KV cache events on (``KVEventsConfig``) and compares them: with
    prefix caching, one KV cache group (no sliding window, no Mamba group) and no connector (whose own
    events share the batch)."""
    return w.prefix_caching and not w.sliding_window and not w.mamba_cache_mode and not w.kv_connector


def draft_margin(w: Workload) -> int:
    """Positions past P + M - 1 that speculative decoding may schedule: D x k.

    The max_tokens guard stops scheduling once O + 1 >= M, but each step in
    flight (D - 1 of them) and the new one may carry k draft positions beyond
    the last output token (``docs/findings.md``, F5).  A request must fit the
    pool (else it preempts itself forever) and stay below ``max_model_len``
    (vLLM caps a step at ``max_model_len - C - 1``; the spec has no max_model_len)
    with that margin.
    """
    return w.depth * w.num_speculative_tokens


def workload_problem(w: Workload) -> str | None:
    """Why ``w`` cannot be compared (one line), or None.

    The limits are the spec's (each request fits the pool alone, prompts fit
    the budget without chunked prefill; up to 64 requests) and
    vLLM's (max_model_len equals the budget without chunked prefill, so a
    request must end within it; depth 1 or 2 only).
    """
    if not 1 <= len(w.requests) <= MAX_REQUESTS:
        return f"a workload has 1 to {MAX_REQUESTS} requests"
    for key, (lowest, highest, why) in LIMITS.items():  # first: the pool check divides by block_size
        if not lowest <= getattr(w, key) <= highest:
            return f"{key} must be {lowest}..{highest} ({why}; got {getattr(w, key)})"
    if any(max(r) > MAX_TOKENS for r in w.requests):
        return f"prompt_len, max_tokens and eos_position must be <= {MAX_TOKENS} (a token count)"
    if w.depth not in (1, 2, 3):
        return "depth must be 1 (Scheduler), 2 (AsyncScheduler) or 3 (AsyncScheduler, Model Runner V2 + PP 2)"
    if w.sync_scheduler and (w.depth != 2 or w.num_speculative_tokens):
        return ("sync_scheduler is depth 2 over the plain Scheduler (pipeline parallelism 2 without async "
                "scheduling), compared without drafts")
    if w.depth == 3 and (w.num_speculative_tokens or w.structured_output or w.kv_connector or w.sliding_window):
        return "depth 3 is compared without speculative decoding, grammars, connectors and sliding windows"
    if not 0 <= w.num_speculative_tokens <= 4:
        return "num_speculative_tokens must be 0..4"
    if w.sliding_window and w.num_speculative_tokens or w.kv_connector and (w.prefix_caching or w.num_speculative_tokens):
        return ("a sliding-window group is compared without spec decoding, a KV connector without prefix caching "
                "and spec decoding")
    if (w.remote_loads or w.remote_sends) and not w.kv_connector or w.kv_connector and w.sliding_window:
        return "remote_loads/remote_sends need kv_connector, which is compared without a sliding window"
    if w.kv_connector not in ("", "toy", "nixl", "offloading") or w.kv_connector == "nixl" and w.remote_sends:
        return "kv_connector is '', 'toy', 'nixl' (whose decode side sends nothing) or 'offloading'"
    if w.kv_connector == "offloading" and (w.remote_loads or w.remote_sends or w.kv_invalid_blocks
                                          or w.structured_output or w.defer_block_free != (w.depth > 1)):
        return ("kv_connector 'offloading' loads only what it stored (no remote_loads, remote_sends, "
                "kv_invalid_blocks), without grammars, and with defer_block_free exactly when depth > 1")
    if w.kv_invalid_blocks and not w.kv_connector:
        return "kv_invalid_blocks needs kv_connector (the worker reports a load's invalid blocks)"
    if w.policy not in ("fcfs", "priority") or w.priorities and len(w.priorities) != len(w.requests):
        return "policy is 'fcfs' or 'priority'; priorities has one value per request"
    if w.model_len and (any(r.prompt_len >= w.model_len for r in w.requests)
                        or not w.chunked_prefill and w.model_len > w.token_budget):
        return "model_len must exceed every prompt (and, without chunked prefill, not exceed the budget)"
    if not 0 <= w.long_prefill_token_threshold <= w.max_model_len:
        return "long_prefill_token_threshold must be 0..max_model_len"
    if not all(0 <= i < len(w.requests) for i in w.structured_output):
        return "structured_output names a request that does not exist"
    if not all(0 <= i < len(w.requests) for i in w.skip_reading) or len(set(w.skip_reading)) != len(w.skip_reading):
        return "skip_reading names a request that does not exist, or one twice"
    if w.skip_reading and w.kv_connector:
        return "skip_reading is modelled without a KV connector (leave out kv_connector or skip_reading)"
    problem = streaming_problem(w) or encoder_problem(w) or mamba_problem(w) or stops_problem(w)
    if problem is not None:
        return problem
    extra = draft_margin(w)
    for i, r in enumerate(w.requests):
        if r.prompt_len < 1 or r.max_tokens < 1 or r.eos_position < 0:
            return f"r{i}: prompt_len and max_tokens must be >= 1, eos_position >= 0"
        groups = 2 if w.sliding_window else 1
        if -(-(r.prompt_len + r.max_tokens + extra) // w.block_size) * groups > w.num_blocks:
            return f"r{i} does not fit the pool alone"
        if not w.chunked_prefill and r.prompt_len + r.max_tokens + extra > w.token_budget:
            # vLLM caps a step at max_model_len - C - 1, which the spec does not model
            return f"r{i}: without chunked prefill P + M (+ draft margin) must fit the budget (max_model_len)"
    return None


def streaming_problem(w: Workload) -> str | None:
    """Why ``w``'s streaming-input sessions cannot be compared (one line), or None: the spec
    models them with chunked prefill, at depth 1 or 2, without prefix caching, drafts, grammars,
    connectors, sliding windows or max_model_len caps (``spec/config.py``)."""
    if not w.resumable:
        return "stream_updates needs resumable requests" if w.stream_updates else None
    if not all(0 <= i < len(w.requests) for i in w.resumable) or len(w.stream_updates) > 4:
        return "resumable names a request that does not exist, or more than 4 stream_updates"
    if any(u < 1 or m < 1 for u, m in w.stream_updates):
        return "each of stream_updates needs at least 1 new prompt token and max_tokens >= 1"
    if (w.depth == 3 or not w.chunked_prefill or w.prefix_caching or w.num_speculative_tokens or w.structured_output
            or w.kv_connector or w.sliding_window or w.model_len):
        return ("streaming-input sessions are compared at depth 1 or 2, with chunked prefill, without prefix "
                "caching, drafts, grammars, connectors, sliding windows and model_len")
    for i in w.resumable:
        if -(-w.session_len(i) // w.block_size) > w.num_blocks:
            return f"session r{i} does not fit the pool alone"
    return None


def encoder_problem(w: Workload) -> str | None:
    """Why ``w``'s images cannot be compared (one line), or None: the spec's limits
    (``spec/config.py``'s ``_validate_images``) and the stand-in processor's (one image size
    per workload would do, but lengths may differ: the processor reports the largest)."""
    if not w.images:
        return "encoder_cache_size/encoder_compute_budget need images" if (
            w.encoder_cache_size or w.encoder_compute_budget) else None
    if len(w.images) > 8 or any(len(image) != 4 for image in w.images):
        return "images lists at most 8 [request, offset, length, item] entries"
    lengths: dict[int, int] = {}
    for req, offset, length, item in w.images:
        if not 0 <= req < len(w.requests) or offset < 0 or length < 1 or offset + length > w.requests[req].prompt_len:
            return f"an image of r{req} must lie inside an existing request's prompt"
        if lengths.setdefault(item, length) != length or item < 0:
            return f"image item {item} has two lengths (or is negative)"
    for req in range(len(w.requests)):
        mine = sorted((o, n, i) for r, o, n, i in w.images if r == req)
        if len({i for _, _, i in mine}) != len(mine) or any(a[0] + a[1] > b[0] for a, b in zip(mine, mine[1:])):
            return f"r{req}'s images overlap or name one item twice"
    if min(w.encoder_cache_size, w.encoder_compute_budget) < max(lengths.values()):
        return "encoder_cache_size and encoder_compute_budget must hold the largest image"
    if (w.depth == 3 or not w.chunked_prefill or w.prefix_caching or w.num_speculative_tokens or w.kv_connector
            or w.sliding_window or w.resumable or w.max_model_len > 4096):
        return ("images are compared at depth 1 or 2, with chunked prefill, without prefix caching, drafts, "
                "connectors, sliding windows and streaming sessions, max_model_len at most 4096 (the tiny PaliGemma's)")
    return None


def mamba_problem(w: Workload) -> str | None:
    """Why ``w``'s Mamba group cannot be compared (one line), or None: ``spec/config.py``'s
    ``_validate_mamba`` limits, and "none" mode's one state block (``vllm_config.MAMBA_NONE_BLOCK``)."""
    if not w.mamba_cache_mode:
        return None
    if w.mamba_cache_mode not in ("none", "align"):
        return "mamba_cache_mode must be '', 'none' or 'align'"
    if w.mamba_cache_mode == "none" and w.prefix_caching:
        return "Mamba prefix caching needs mamba_cache_mode 'align' (or prefix_caching false)"
    if (w.depth == 3 or not w.chunked_prefill or w.num_speculative_tokens or w.kv_connector or w.sliding_window
            or w.resumable or w.model_len):
        return ("a Mamba group is compared at depth 1 or 2, with chunked prefill, without drafts, connectors, "
                "sliding windows, streaming sessions and a model_len cap")
    if w.mamba_cache_mode == "none" and any(r.prompt_len + r.max_tokens > 256 for r in w.requests):
        return "mamba_cache_mode 'none' holds one state block of 256 tokens: keep prompt_len + max_tokens <= 256"
    if any(-(-(r.prompt_len + r.max_tokens) // w.block_size) + 2 > w.num_blocks for r in w.requests):
        return "a request does not fit the pool alone with its Mamba states"
    return None


MAX_PATTERN_LEN = 4
"""The longest period the oracle repeats (``core/stop_tokens.py``)."""


def stops_problem(w: Workload) -> str | None:
    """Why ``w``'s ``stops`` cannot be compared (one line), or None: one entry per request at most,
    of a plain request (no session), ``min_tokens`` within max_tokens (``SamplingParams`` refuses more),
    repetition parameters ``RepetitionDetectionParams`` accepts (vllm/sampling_params.py) and a
    period of 1 to 4; EOS and stop-token entries carry no repetition parameters."""
    seen: set[int] = set()
    for stop in w.stops:
        if len(stop) != 7:
            return "stops lists [request, kind, min_tokens, min_pattern_size, max_pattern_size, min_count, pattern_len]"
        req, kind, min_tokens, low, high, count, period = stop
        if not 0 <= req < len(w.requests) or req in seen or req in w.resumable:
            return f"stops: r{req} does not exist, is listed twice or is a streaming session"
        seen.add(req)
        if kind not in (0, 1, 2) or not 0 <= min_tokens <= w.requests[req].max_tokens:
            return f"stops: r{req}'s kind must be 0 (EOS), 1 (stop token) or 2 (repetition), min_tokens 0..max_tokens"
        if kind < 2 and (low, high, count, period) != (0, 0, 0, 0):
            return f"stops: r{req} is not a repetition entry, so its last four values must be 0"
        if kind == 2 and not (0 <= low <= high and high >= 1 and count >= 2 and 1 <= period <= MAX_PATTERN_LEN):
            return (f"stops: r{req}'s repetition needs 0 <= min_pattern_size <= max_pattern_size, max_pattern_size "
                    f">= 1, min_count >= 2 and a pattern_len of 1..{MAX_PATTERN_LEN}")
    return None
