"""The parameters of one bounded model: requests, engine settings, environment.

A ``SpecConfig`` is what a TLA+ ``.cfg`` file is to a spec: it fixes the
constants.  Named configs live as TOML files in ``configs/``; this module only
defines the fields, their defaults (vLLM's defaults where vLLM has one) and
validation.  Every validation error is one line naming the field.

Example:
    >>> cfg = SpecConfig(name="one", requests=((6, 3),), batch_queue_depth=2,
    ...                  token_budget=4, num_blocks=4)
    >>> cfg.knobs.async_scheduling, cfg.effective_decode_stagger
    (True, 1)
"""
from __future__ import annotations

import functools

from dataclasses import dataclass, field
from typing import Literal

from asyncspec.spec.request import Knobs

LoopMode = Literal["exact", "free"]
StaleMode = Literal["deliver", "drop"]
AbortMode = Literal["immediate", "deferred"]


MAX_REQUESTS = 128
"""The spec executes any number of requests; exhaustive checking is practical up to 3 or 4."""


MAX_TOKENS = 2**20
"""Token counts (a prompt, max_tokens, the budget, a window) are at most this: a million tokens per request."""

MAX_RESETS = 2**62
"""``forced_preemptions`` of a config built in code: the live monitor's "unlimited" (a replayed window's
budget, never explored); a config file's is at most ``LIMITS``' 16."""

MAX_BLOCKS = 4096
"""KV blocks in the pool: every state holds the whole free-block queue and a hash per block."""

LIMITS: dict[str, tuple[int, int, str]] = {
    "batch_queue_depth": (1, 4, "the batch queue is modelled up to 4 steps deep"),
    "token_budget": (1, MAX_TOKENS, "a token count"),
    "max_num_seqs": (1, 1024, "the spec runs at most 1024 requests at once"),
    "block_size": (1, 1024, "tokens per KV block"),
    "num_blocks": (1, MAX_BLOCKS, "every state holds the whole pool"),
    "decode_stagger": (1, 4, "the stagger is the pipeline depth, within the batch queue's 4 steps"),
    "forced_preemptions": (0, 16, "each one multiplies the states to explore"),  # a file's; see MAX_RESETS
    "pauses": (0, 4, "each one multiplies the states to explore"),
    "num_speculative_tokens": (0, 4, "draft tokens per step"),
    "num_lookahead_tokens": (0, 5, "num_speculative_tokens + 1 at most"),
    "sliding_window": (0, MAX_TOKENS, "a token count"),
    "max_model_len": (1, 2 * MAX_TOKENS, "a token count"),
    "long_prefill_token_threshold": (0, MAX_TOKENS, "a token count"),
    "encoder_cache_size": (0, MAX_TOKENS, "embeddings (images only)"),
    "encoder_compute_budget": (0, MAX_TOKENS, "embeddings per step (images only)"),
}
"""The range of each integer setting, (lowest, highest, why): what the explorer and the engines can hold;
config files are checked against them as JSON Schema ``minimum``/``maximum`` (``checker/configs.py``)."""


class ConfigError(ValueError):
    """A config that cannot be checked; the message is one line."""


@dataclass(frozen=True)
class SpecConfig:
    """Constants of one model-checking run."""

    name: str
    requests: tuple[tuple[int, int], ...]  # (num_prompt_tokens, max_tokens) per request
    batch_queue_depth: int = 2  # D: max_concurrent_batches (1 = synchronous Scheduler)
    loop: LoopMode = "exact"  # "exact": EngineCore.step_with_batch_queue; "free": any interleaving
    token_budget: int = 8  # max_num_batched_tokens (per-step token budget)
    max_num_seqs: int = 4  # max_num_seqs (running requests)
    block_size: int = 4  # tokens per KV block
    num_blocks: int = 8  # usable KV blocks in the pool (vLLM's null block excluded)
    enable_chunked_prefill: bool = True  # vLLM default
    enable_prefix_caching: bool = True  # vLLM default (frontier tracked, hits not modelled)
    reserve_full_isl: bool = True  # scheduler_reserve_full_isl: admission needs the whole prompt to fit
    defer_block_free: bool = False  # KV-consumer connector: frees wait for a step fence
    stale_mode: StaleMode = "deliver"  # preemption: requires_kv_delivery False (deliver) / True (drop)
    decode_stagger: int | None = None  # V2 runner + PP; None = D - 1 when D > 2 else 1
    eos_positions: tuple[tuple[int, ...], ...] | None = None  # per request; None = every choice
    aborts: bool = False  # the client may abort any unfinished request at any time
    abort_mode: AbortMode = "immediate"  # "immediate": vLLM's finish_requests; "deferred": SGLang's
    # Req.to_finish (a running request ends after its next delivered token; spec/engine.py abort)
    late_arrivals: bool = False  # requests after the first may arrive at any time (in id order)
    forced_preemptions: int = 0  # reset_prefix_cache(reset_running_requests=True) calls allowed
    pauses: int = 0  # EngineCore.pause_scheduler calls allowed (each followed by resume_scheduler)
    pause_modes: tuple[str, ...] = ("abort", "wait", "keep")  # the PauseMode values those calls use
    num_speculative_tokens: int = 0  # k: draft tokens per step (0 = no speculative decoding)
    num_lookahead_tokens: int | None = None  # VllmConfig.num_lookahead_tokens; None = k (EAGLE, MTP, draft model)
    structured_output: tuple[int, ...] = ()  # indices of requests with a grammar (structured output)
    sliding_window: int = 0  # W > 0: a second KV cache group, sliding window W, sharing the pool (hybrid)
    max_model_len: int | None = None  # ModelConfig.max_model_len; None = no request reaches it
    kv_connector: bool = False  # a KV connector's scheduler half (spec/connector.py)
    kv_load_failure_policy: Literal["recompute", "fail"] = "recompute"  # KVTransferConfig's
    remote_loads: tuple[int, ...] = ()  # requests whose prompt the connector loads asynchronously
    remote_sends: tuple[int, ...] = ()  # requests whose KV the connector sends when they finish
    policy: Literal["fcfs", "priority"] = "fcfs"  # SchedulerConfig.policy
    priorities: tuple[int, ...] = ()  # per request (priority policy; lower first); () = all 0
    long_prefill_token_threshold: int = 0  # SchedulerConfig's; 0 = no cap
    long_prefill_adaptive: bool = False  # long_prefill_token_threshold_adaptive
    kv_load_whole_prompt: bool = False  # the load covers all P prompt tokens (NixlConnector), else P - 1
    kv_invalid_blocks: bool = False  # the worker may report a load's blocks from block j on invalid (invalid_block_ids)
    kv_offloading: bool = False  # the connector is vLLM's OffloadingConnector, kv_both (spec/offload.py)
    kv_offload_prompt_only: bool = True  # its offload_prompt_only (vLLM 0.33.0's default): store prompt blocks only
    resumable: tuple[int, ...] = ()  # requests that are streaming-input sessions (Request.resumable)
    stream_updates: tuple[tuple[int, int], ...] = ()  # each session's later inputs: (new prompt tokens,
    # max_tokens) in order, then the end of its input stream (spec/streaming.py)
    images: tuple[tuple[int, int, int, int], ...] = ()  # encoder inputs: (request, offset, length, item)
    # each; equal items share one encoder-cache entry (spec/encoder.py)
    encoder_cache_size: int = 0  # EncoderCacheManager.cache_size, in embeddings (images only)
    encoder_compute_budget: int = 0  # Scheduler.max_num_encoder_input_tokens: embeddings encoded per step
    mamba_cache_mode: str = ""  # "" = no Mamba group; "none" / "align": CacheConfig.mamba_cache_mode of a
    # MambaSpec group beside full attention (spec/mamba.py)
    sync_scheduler: bool = False  # the plain Scheduler under a batch queue D > 1: pipeline parallelism of
    # D ranks without async scheduling (V1 runner; EngineCore.step_with_batch_queue over Scheduler)
    skip_reading_prefix_cache: tuple[int, ...] = ()  # requests whose SamplingParams.skip_reading_prefix_cache
    # is set (prompt logprobs set it, SamplingParams.__post_init__): they never start from a prefix-cache hit
    properties: tuple[str, ...] | None = None  # None = every property that applies
    expect_violation: str | None = None  # a finding: this property is expected to fail
    description: str = ""
    extra: dict[str, object] = field(default_factory=dict, compare=False, hash=False)

    def __post_init__(self) -> None:
        validate(self)

    @property
    def async_scheduling(self) -> bool:
        """AsyncScheduler iff the batch queue is deeper than one step, unless ``sync_scheduler``."""
        return self.batch_queue_depth > 1 and not self.sync_scheduler

    @property
    def effective_decode_stagger(self) -> int:
        """``AsyncScheduler.decode_stagger``: pp_size = D - 1 on the V2 runner with PP."""
        if self.decode_stagger is not None:
            return self.decode_stagger
        return self.batch_queue_depth - 1 if self.batch_queue_depth > 2 else 1

    @functools.cached_property
    def knobs(self) -> Knobs:
        """The settings the per-request arithmetic reads (built once: the config is frozen)."""
        return Knobs(
            async_scheduling=self.async_scheduling,
            defer_block_free=self.defer_block_free,
            decode_stagger=self.effective_decode_stagger,
            block_size=self.block_size,
            enable_prefix_caching=self.enable_prefix_caching,
            num_spec_tokens=self.num_speculative_tokens,
            max_model_len=self.max_model_len,
            spec_decode_caches_at_delivery=bool(self.extra.get("spec_decode_caches_at_delivery", True)),
        )

    @property
    def lookahead_tokens(self) -> int:
        """KV slots ``allocate_slots`` reserves past the scheduled tokens for the drafter.

        vLLM's ``VllmConfig.num_lookahead_tokens``: k for EAGLE, MTP and draft-model
        speculation (the methods async scheduling runs on the V1 runner), k + 1 for
        DFlash, 0 for n-gram; the default here is k.
        """
        if self.num_lookahead_tokens is not None:
            return self.num_lookahead_tokens
        return self.num_speculative_tokens

    @property
    def num_kv_groups(self) -> int:
        """KV cache groups sharing the pool: full attention, plus a sliding-window group if W > 0."""
        return 2 if self.sliding_window else 1

    @property
    def swa_admission_cap(self) -> int:
        """``SlidingWindowSpec.max_admission_blocks_per_request``: the sliding-window group's
        share of the admission gate, sized for W - 1 tokens plus every in-flight step's budget
        (``VllmConfig.max_in_flight_tokens`` = D x max_num_batched_tokens), capped at max_model_len."""
        tokens = self.sliding_window - 1 + self.batch_queue_depth * self.token_budget
        if self.max_model_len is not None:
            tokens = min(tokens, self.max_model_len)
        return self.blocks_for(tokens) + 1

    def blocks_for(self, num_tokens: int) -> int:
        """KV blocks needed to hold ``num_tokens`` tokens."""
        return -(-num_tokens // self.block_size)


def _require(cond: bool, message: str) -> None:
    if not cond:
        raise ConfigError(message)


def _validate_abort_mode(cfg: SpecConfig) -> None:
    """SGLang's deferred abort exists only in SGLang's design: its loops (depth 1 or 2),
    drop-and-recompute retraction, no speculative decoding or KV connector in the model."""
    _require(cfg.abort_mode in ("immediate", "deferred"),
             f"{cfg.name}: 'abort_mode' must be 'immediate' or 'deferred'")
    if cfg.abort_mode != "deferred":
        return
    _require(cfg.batch_queue_depth <= 2,
             f"{cfg.name}: abort_mode 'deferred' is SGLang's, whose loops have depth 1 or 2 "
             f"(set batch_queue_depth to 1 or 2, or abort_mode = 'immediate')")
    _require(cfg.stale_mode == "drop",
             f"{cfg.name}: abort_mode 'deferred' is SGLang's, which drops a retracted request's "
             f"in-flight row (set stale_mode = 'drop')")
    _require(not cfg.num_speculative_tokens and not cfg.kv_connector,
             f"{cfg.name}: abort_mode 'deferred' is modelled without speculative decoding and "
             f"KV connectors (leave them out, or set abort_mode = 'immediate')")


PAUSE_MODES = ("abort", "wait", "keep")
"""``vllm.v1.engine.core.PauseMode``: abort every request, then admit none; admit none; schedule none."""


def _validate_pauses(cfg: SpecConfig) -> None:
    """Pauses are vLLM's (``EngineCore.pause_scheduler``): immediate aborts, known modes."""
    _require(bool(cfg.pause_modes) and all(m in PAUSE_MODES for m in cfg.pause_modes)
             and len(set(cfg.pause_modes)) == len(cfg.pause_modes),
             f"{cfg.name}: 'pause_modes' lists modes among {', '.join(PAUSE_MODES)}, each once")
    _require(not cfg.pauses or cfg.abort_mode == "immediate",
             f"{cfg.name}: 'pauses' are vLLM's pause_scheduler, modelled with abort_mode = 'immediate'")


def session_length(cfg: SpecConfig, index: int) -> int:
    """The longest sequence request ``index`` reaches: its prompt and output, then, for a
    streaming-input session, each update's prompt and output (the last sampled token of a
    turn is discarded, ``Scheduler._update_request_as_session``)."""
    prompt, max_tokens = cfg.requests[index]
    if index not in cfg.resumable:
        return prompt + max_tokens
    return prompt + max_tokens + sum(u + m - 1 for u, m in cfg.stream_updates)


def _validate_offloading(cfg: SpecConfig) -> None:
    """``kv_offloading``: vLLM's OffloadingConnector (kv_both) as the connector; it loads from its own
    CPU tier and sends nothing, never fails a load, and turns ``defer_block_free`` on with async steps."""
    if not cfg.kv_offloading:
        return
    _require(cfg.kv_connector and not (cfg.remote_loads or cfg.remote_sends or cfg.kv_invalid_blocks
                                       or cfg.kv_load_whole_prompt),
             f"{cfg.name}: 'kv_offloading' needs kv_connector, without remote_loads, remote_sends, "
             f"kv_invalid_blocks and kv_load_whole_prompt (it loads only what it stored)")
    _require(cfg.defer_block_free == (cfg.batch_queue_depth > 1),
             f"{cfg.name}: 'kv_offloading' needs defer_block_free exactly when batch_queue_depth > 1 "
             f"(vLLM turns it on for a KV consumer with overlapping batches)")
    _require(not cfg.structured_output, f"{cfg.name}: 'kv_offloading' is modelled without structured output")


def _validate_streaming(cfg: SpecConfig) -> None:
    """Streaming-input sessions are modelled on the plain scheduler path: no KV connector,
    prefix caching, sliding window, speculative decoding, grammar or SGLang abort."""
    if not cfg.resumable:
        _require(not cfg.stream_updates, f"{cfg.name}: 'stream_updates' needs 'resumable' requests")
        return
    _require(all(0 <= i < len(cfg.requests) for i in cfg.resumable),
             f"{cfg.name}: 'resumable' lists a request index that does not exist")
    _require(all(u >= 1 and m >= 1 for u, m in cfg.stream_updates),
             f"{cfg.name}: each of 'stream_updates' needs at least 1 new prompt token and max_tokens >= 1")
    _require(len(cfg.stream_updates) <= 4, f"{cfg.name}: 'stream_updates' lists at most 4 updates")
    _require(not (cfg.kv_connector or cfg.enable_prefix_caching or cfg.sliding_window or cfg.num_speculative_tokens
                  or cfg.structured_output or cfg.abort_mode == "deferred") and cfg.enable_chunked_prefill,
             f"{cfg.name}: 'resumable' is modelled with chunked prefill and without KV connectors, prefix caching, "
             f"sliding windows, speculative decoding, grammars and deferred aborts")
    for i in cfg.resumable:
        need = cfg.blocks_for(session_length(cfg, i))
        _require(need <= cfg.num_blocks, f"{cfg.name}: session r{i} reaches {need} blocks but num_blocks is "
                                         f"{cfg.num_blocks} (raise num_blocks)")


def _validate_images(cfg: SpecConfig) -> None:
    """Encoder inputs (spec/encoder.py): inside their request's prompt, apart, each item one length,
    at most once per request; a cache and a budget that hold the largest image (vLLM's
    ``compute_mm_encoder_budget`` raises both to it); the plain scheduler path around them."""
    if not cfg.images:
        _require(not cfg.encoder_cache_size and not cfg.encoder_compute_budget,
                 f"{cfg.name}: 'encoder_cache_size'/'encoder_compute_budget' need 'images'")
        return
    _require(len(cfg.images) <= 8, f"{cfg.name}: 'images' lists at most 8 images")
    lengths: dict[int, int] = {}
    for req, offset, length, item in cfg.images:
        _require(0 <= req < len(cfg.requests), f"{cfg.name}: 'images' names request r{req}, which does not exist")
        _require(offset >= 0 and length >= 1 and offset + length <= cfg.requests[req][0],
                 f"{cfg.name}: an image of r{req} must lie inside its prompt (offset >= 0, length >= 1)")
        _require(lengths.setdefault(item, length) == length, f"{cfg.name}: image item {item} has two lengths")
    for req in range(len(cfg.requests)):
        mine = sorted((o, n, i) for r, o, n, i in cfg.images if r == req)
        _require(len({i for _, _, i in mine}) == len(mine), f"{cfg.name}: r{req} names an image item twice")
        _require(all(a[0] + a[1] <= b[0] for a, b in zip(mine, mine[1:])), f"{cfg.name}: r{req}'s images overlap")
    largest = max(lengths.values())
    _require(cfg.encoder_cache_size >= largest and cfg.encoder_compute_budget >= largest,
             f"{cfg.name}: 'encoder_cache_size' and 'encoder_compute_budget' must hold the largest image "
             f"({largest} embeddings)")
    _require(not (cfg.enable_prefix_caching or cfg.num_speculative_tokens or cfg.kv_connector or cfg.sliding_window
                  or cfg.resumable or cfg.abort_mode == "deferred") and cfg.enable_chunked_prefill,
             f"{cfg.name}: 'images' are modelled with chunked prefill and without prefix caching, speculative "
             f"decoding, KV connectors, sliding windows, streaming sessions and deferred aborts")


def _validate_mamba(cfg: SpecConfig) -> None:
    """A Mamba group (spec/mamba.py): a known mode, prefix caching only in "align" (MambaManager's
    assertion), room for a request's state blocks beside its attention blocks, the plain paths."""
    if not cfg.mamba_cache_mode:
        return
    _require(cfg.mamba_cache_mode in ("none", "align"), f"{cfg.name}: 'mamba_cache_mode' must be 'none' or 'align'")
    _require(cfg.mamba_cache_mode == "align" or not cfg.enable_prefix_caching,
             f"{cfg.name}: Mamba prefix caching needs mamba_cache_mode = 'align' (or enable_prefix_caching = false)")
    _require(not (cfg.num_speculative_tokens or cfg.kv_connector or cfg.sliding_window or cfg.resumable
                  or cfg.abort_mode == "deferred") and cfg.enable_chunked_prefill,
             f"{cfg.name}: 'mamba_cache_mode' is modelled with chunked prefill and without speculative decoding, "
             f"KV connectors, sliding windows, streaming sessions and deferred aborts")
    for i, (prompt, max_tokens) in enumerate(cfg.requests):
        need = cfg.blocks_for(prompt + max_tokens) + 2
        _require(need <= cfg.num_blocks, f"{cfg.name}: request r{i} needs {need} blocks with its Mamba states but "
                 f"num_blocks is {cfg.num_blocks} (raise num_blocks)")


def validate(cfg: SpecConfig) -> None:
    """Reject configs the spec cannot give a meaning to (one-line errors)."""
    _require(bool(cfg.name), "config: 'name' must not be empty")
    for key, (lowest, highest, why) in LIMITS.items():  # first: blocks_for() divides by block_size
        if key == "forced_preemptions":
            lowest, highest, why = 0, MAX_RESETS, "the live monitor's unlimited"
        value = getattr(cfg, key)
        _require(value is None or lowest <= value <= highest,
                 f"{cfg.name}: '{key}' must be {lowest}..{highest} ({why}; got {value})")
    _require(not cfg.sync_scheduler or (cfg.batch_queue_depth > 1 and cfg.decode_stagger in (None, 1)
                                        and not cfg.num_speculative_tokens),
             f"{cfg.name}: 'sync_scheduler' models pipeline parallelism without async scheduling: it needs "
             f"batch_queue_depth > 1, no decode_stagger (the stagger is AsyncScheduler's) and no drafts "
             f"(EngineCore.post_step hands them over before their step's output is processed: not modelled)")
    _require(1 <= len(cfg.requests) <= MAX_REQUESTS, f"{cfg.name}: 'requests' must list 1 to {MAX_REQUESTS} requests")
    for i, (prompt, max_tokens) in enumerate(cfg.requests):
        _require(prompt >= 1, f"{cfg.name}: request r{i} needs a prompt of at least 1 token")
        _require(max_tokens >= 1, f"{cfg.name}: request r{i} needs max_tokens >= 1")
        _require(prompt <= MAX_TOKENS and max_tokens <= MAX_TOKENS,
                 f"{cfg.name}: request r{i}: prompt_len and max_tokens must be <= {MAX_TOKENS} (a token count)")
        ahead = cfg.batch_queue_depth * cfg.num_speculative_tokens + cfg.lookahead_tokens  # past the end
        need = cfg.blocks_for(prompt + max_tokens + ahead) * cfg.num_kv_groups
        _require(
            need <= cfg.num_blocks,
            f"{cfg.name}: request r{i} needs {need} blocks alone but num_blocks is "
            f"{cfg.num_blocks}; it would preempt itself forever (raise num_blocks)",
        )
    _require(cfg.loop in ("exact", "free"), f"{cfg.name}: 'loop' must be 'exact' or 'free'")
    _require(cfg.stale_mode in ("deliver", "drop"), f"{cfg.name}: 'stale_mode' must be 'deliver' or 'drop'")
    _validate_abort_mode(cfg)
    _validate_pauses(cfg)
    if cfg.num_lookahead_tokens is not None:
        _require(0 <= cfg.num_lookahead_tokens <= cfg.num_speculative_tokens + 1 and (
                 cfg.num_speculative_tokens > 0 or cfg.num_lookahead_tokens == 0),
                 f"{cfg.name}: 'num_lookahead_tokens' must be 0..num_speculative_tokens + 1 "
                 f"(0 without speculative decoding)")
    _require(all(0 <= i < len(cfg.requests) for i in cfg.structured_output),
             f"{cfg.name}: 'structured_output' lists a request index that does not exist")
    _require(all(0 <= i < len(cfg.requests) for i in cfg.skip_reading_prefix_cache),
             f"{cfg.name}: 'skip_reading_prefix_cache' lists a request index that does not exist")
    _require(not (cfg.skip_reading_prefix_cache and cfg.kv_connector),
             f"{cfg.name}: 'skip_reading_prefix_cache' is modelled without a KV connector (vLLM also skips the "
             f"connector's external hit for such a request)")
    if cfg.sliding_window:
        _require(not cfg.num_speculative_tokens,
                 f"{cfg.name}: 'sliding_window' is modelled without speculative decoding")
    if cfg.kv_connector:
        _require(not cfg.sliding_window and not cfg.enable_prefix_caching and not cfg.num_speculative_tokens,
                 f"{cfg.name}: 'kv_connector' is modelled without sliding window, prefix caching "
                 f"and speculative decoding")
        _require(cfg.kv_load_failure_policy in ("recompute", "fail"),
                 f"{cfg.name}: 'kv_load_failure_policy' must be 'recompute' or 'fail'")
    _require(all(0 <= i < len(cfg.requests) for i in cfg.remote_loads + cfg.remote_sends)
             and (cfg.kv_connector or not (cfg.remote_loads or cfg.remote_sends)),
             f"{cfg.name}: 'remote_loads'/'remote_sends' need kv_connector and existing request indices")
    _require(cfg.kv_connector or not cfg.kv_invalid_blocks, f"{cfg.name}: 'kv_invalid_blocks' needs kv_connector")
    _validate_offloading(cfg)
    _validate_streaming(cfg)
    _validate_images(cfg)
    _validate_mamba(cfg)
    _require(cfg.policy in ("fcfs", "priority"), f"{cfg.name}: 'policy' must be 'fcfs' or 'priority'")
    _require(not cfg.priorities or len(cfg.priorities) == len(cfg.requests),
             f"{cfg.name}: 'priorities' needs one value per request")
    if not cfg.enable_chunked_prefill:
        longest = max(p + m - 1 for p, m in cfg.requests)
        _require(
            longest <= cfg.token_budget,
            f"{cfg.name}: without chunked prefill a resumed request recomputes up to {longest} "
            f"tokens in one step, over token_budget {cfg.token_budget} (vLLM requires "
            f"max_num_batched_tokens >= max_model_len)",
        )
    if cfg.eos_positions is not None:
        _require(
            len(cfg.eos_positions) == len(cfg.requests),
            f"{cfg.name}: 'eos_positions' needs one list per request",
        )
        for i, choices in enumerate(cfg.eos_positions):
            _require(bool(choices), f"{cfg.name}: 'eos_positions' for r{i} is empty")
            _require(
                all(0 <= e for e in choices),
                f"{cfg.name}: 'eos_positions' must be >= 0 (0 = never)",
            )
            _require(
                all(e <= MAX_TOKENS for e in choices),
                f"{cfg.name}: 'eos_positions' must be <= {MAX_TOKENS} (a token count)",
            )
