"""A thin driver over vLLM 0.33.0's real scheduler classes, runnable on a CPU-only host.

The driver builds a real ``vllm.v1.core.sched.async_scheduler.AsyncScheduler`` (or the
synchronous ``vllm.v1.core.sched.scheduler.Scheduler``) offline: no GPU, no weights,
no tokenizer, no hub.  It exposes the three engine-side operations the async
pipeline is made of (``schedule``, ``deliver`` = process one step's output, ``abort``)
plus an immutable, sorted ``snapshot`` of the counters the spec talks about.

The driver does not run an engine loop.  The caller plays
``EngineCore.step_with_batch_queue`` (vllm/v1/engine/core.py): keep at most
``depth`` steps scheduled but undelivered, deliver them oldest first, and apply
aborts just before a delivery.  Depth 2 with one request (P=10, M=3)::

    >>> from asyncspec.engine.vllm_driver import DriverConfig, VllmDriver
    >>> drv = VllmDriver(DriverConfig(async_scheduling=True))
    >>> drv.add_request("r0", prompt_len=10, max_tokens=3)
    >>> s1 = drv.schedule()            # prefill: 10 tokens
    >>> s2 = drv.schedule()            # decode of a still-unknown token: 1 token
    >>> (s1.num_scheduled_tokens["r0"], s2.num_scheduled_tokens["r0"])
    (10, 1)
    >>> drv.snapshot().requests["r0"].num_output_placeholders
    2
    >>> res = drv.deliver(s1, {"r0": [7]})   # the output of the first step
    >>> res.new_token_ids["r0"]
    (7,)
    >>> drv.snapshot().requests["r0"].num_output_placeholders
    1

Install notes: ``engine/vllm_install.md``; the installer is ``.ci/install-vllm``.
"""

from __future__ import annotations

import functools
import itertools
import importlib.metadata
import json
import logging
import os
import random
import tempfile
import threading
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

VLLM_VERSION = "0.33.0"
"""The vLLM release whose scheduler this driver targets (and the spec describes)."""

_VOCAB_SIZE = 1000
_FIRST_PROMPT_TOKEN = 3  # ids 0..2 are left to bos/eos/pad of the tiny model

# Per-user scratch folder: vLLM's cache root and the tiny model's config.json.
_SCRATCH = Path(tempfile.gettempdir()) / f"asyncspec-vllm-{os.getuid()}"

# Environment the vLLM import and config path need on a CPU-only, hub-less host.
# Set only where the user has not chosen a value.
_ENV_DEFAULTS: dict[str, str] = {
    "VLLM_TARGET_DEVICE": "cpu",
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "VLLM_CACHE_ROOT": str(_SCRATCH / "vllm-cache"),
}

_TINY_LLAMA_CONFIG: dict[str, Any] = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 4,
    "vocab_size": _VOCAB_SIZE,
    "bos_token_id": 1,
    "eos_token_id": 2,
    "max_position_embeddings": 1 << 20,
    "torch_dtype": "float32",
}


class VllmUnavailable(RuntimeError):
    """vLLM is missing, not importable, or not the pinned release."""


# --------------------------------------------------------------------------- version


def _installed_vllm_version() -> str | None:
    """The installed distribution's version, or None if vllm is not installed."""
    try:
        return importlib.metadata.version("vllm")
    except importlib.metadata.PackageNotFoundError:
        return None


def _version_mismatch_message(found: str | None) -> str:
    """One line naming the pinned release and what was found."""
    if found is None:
        return (
            f"vllm {VLLM_VERSION} is required but vllm is not installed/importable; "
            "run .ci/install-vllm"
        )
    return (
        f"vllm {VLLM_VERSION} is required but vllm {found} is installed; "
        "run .ci/install-vllm"
    )


def check_vllm_version(allow_other: bool = False) -> str:
    """Return the installed vLLM version; raise VllmUnavailable unless it is usable.

    Usable means ``import vllm`` works and (unless ``allow_other``) the version is
    exactly ``VLLM_VERSION``.  The cheap metadata check runs first, so a missing or
    wrong install is reported without paying for the (several-second) import.
    """
    found = _installed_vllm_version()
    if found is None or (found != VLLM_VERSION and not allow_other):
        raise VllmUnavailable(_version_mismatch_message(found))
    try:
        _vllm()
    except ImportError as exc:
        raise VllmUnavailable(
            f"vllm {VLLM_VERSION} is required but importing vllm {found} failed: {exc}"
        ) from exc
    return found


# --------------------------------------------------------------------------- vllm access


@dataclass(frozen=True)
class _Vllm:
    """The vLLM names the driver uses (vLLM is untyped for us: everything is Any)."""

    torch: Any
    ModelConfig: Any
    SchedulerConfig: Any
    CacheConfig: Any
    VllmConfig: Any
    KVCacheConfig: Any
    KVCacheGroupSpec: Any
    FullAttentionSpec: Any
    StructuredOutputManager: Any
    Scheduler: Any
    AsyncScheduler: Any
    Request: Any
    RequestStatus: Any
    SamplingParams: Any
    ModelRunnerOutput: Any
    block_hasher: Any  # get_request_block_hasher
    hash_fn: Any
    SpeculativeConfig: Any
    StructuredOutputsParams: Any
    StructuredOutputGrammar: Any
    DraftTokenIds: Any


def prepare_environment() -> None:
    """Set the CPU/offline variables vLLM reads (only those the user left unset).

    VLLM_TARGET_DEVICE=cpu (else ModelConfig cannot infer a device), HF_HUB_OFFLINE=1
    and TRANSFORMERS_OFFLINE=1 (no hub), VLLM_CACHE_ROOT at a per-user scratch folder
    (where vLLM caches the architecture inspection).  Call it before importing vllm
    yourself; the driver calls it before its own import.
    """
    for key, value in _ENV_DEFAULTS.items():
        os.environ.setdefault(key, value)


@functools.cache
def _vllm() -> _Vllm:
    """Import vLLM once, after setting the offline/CPU environment."""
    prepare_environment()
    import torch
    from vllm.config import CacheConfig, ModelConfig, SchedulerConfig, SpeculativeConfig, VllmConfig
    from vllm.sampling_params import SamplingParams, StructuredOutputsParams
    from vllm.utils.hashing import sha256
    from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash
    from vllm.v1.core.sched.async_scheduler import AsyncScheduler
    from vllm.v1.core.sched.scheduler import Scheduler
    from vllm.v1.kv_cache_interface import (
        FullAttentionSpec,
        KVCacheConfig,
        KVCacheGroupSpec,
    )
    from vllm.v1.outputs import DraftTokenIds, ModelRunnerOutput
    from vllm.v1.request import Request, RequestStatus
    from vllm.v1.structured_output import StructuredOutputManager
    from vllm.v1.structured_output.backend_types import StructuredOutputGrammar

    init_none_hash(sha256)
    _quiet_vllm_logger()
    return _Vllm(
        torch=torch,
        ModelConfig=ModelConfig,
        SchedulerConfig=SchedulerConfig,
        CacheConfig=CacheConfig,
        VllmConfig=VllmConfig,
        KVCacheConfig=KVCacheConfig,
        KVCacheGroupSpec=KVCacheGroupSpec,
        FullAttentionSpec=FullAttentionSpec,
        StructuredOutputManager=StructuredOutputManager,
        Scheduler=Scheduler,
        AsyncScheduler=AsyncScheduler,
        Request=Request,
        RequestStatus=RequestStatus,
        SamplingParams=SamplingParams,
        ModelRunnerOutput=ModelRunnerOutput,
        block_hasher=get_request_block_hasher,
        hash_fn=sha256,
        SpeculativeConfig=SpeculativeConfig,
        StructuredOutputsParams=StructuredOutputsParams,
        StructuredOutputGrammar=StructuredOutputGrammar,
        DraftTokenIds=DraftTokenIds,
    )


def _quiet_vllm_logger() -> None:
    """Keep vLLM's per-config warnings (e.g. the CPU block-size hint) out of fuzz logs.

    Only when the user has configured neither the logger nor VLLM_LOGGING_LEVEL.
    """
    vllm_logger = logging.getLogger("vllm")
    if "VLLM_LOGGING_LEVEL" not in os.environ and not vllm_logger.handlers:
        vllm_logger.setLevel(logging.ERROR)


# --------------------------------------------------------------------------- config


@dataclass(frozen=True)
class DriverConfig:
    """What the scheduler is built from.

    ``num_blocks`` counts usable KV blocks: the pool gets one more, because vLLM
    reserves block 0 as the null block.  ``defer_block_free`` is forced onto the
    scheduler after construction (vLLM only derives it from a KV-consumer connector,
    and vLLM's own tests force it the same way).
    """

    block_size: int = 16
    num_blocks: int = 64
    max_num_seqs: int = 8
    max_num_batched_tokens: int = 64
    enable_chunked_prefill: bool = True
    async_scheduling: bool = True
    defer_block_free: bool = False
    enable_prefix_caching: bool = False
    max_model_len: int = 256
    eos_token_id: int = 2
    num_speculative_tokens: int = 0  # k > 0: an n-gram SpeculativeConfig with k drafts per step


@functools.cache
def _model_dir() -> str:
    """A folder holding only a tiny Llama config.json (written atomically, reused)."""
    path = _SCRATCH / "tiny-llama"
    path.mkdir(parents=True, exist_ok=True)
    text = json.dumps(_TINY_LLAMA_CONFIG, indent=1, sort_keys=True)
    target = path / "config.json"
    if not target.exists() or target.read_text() != text:
        fd, tmp = tempfile.mkstemp(dir=path, suffix=".tmp")
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
        os.replace(tmp, target)
    return str(path)


_CONFIG_LOCK = threading.Lock()
_DRIVER_IDS = itertools.count(1)


@functools.cache
def _build_configs(cfg: DriverConfig) -> tuple[Any, Any]:
    """(VllmConfig, KVCacheConfig) for ``cfg``; cached, since vLLM never mutates them.

    Wraps the config classes in vllm/config/{model,scheduler,cache,vllm}.py.  The
    first ModelConfig of a process inspects the architecture (a subprocess; cached on
    disk under VLLM_CACHE_ROOT), later ones are cheap.  The CPU platform turns
    ``async_scheduling`` off during VllmConfig init; it is set back here so that
    ``max_concurrent_batches`` is 2 as on a GPU.

    With ``num_speculative_tokens`` k > 0 the config carries an n-gram
    ``SpeculativeConfig`` (vllm/config/speculative.py; no draft model, no
    lookahead slots, no drafting slots: the scheduler's arithmetic is the
    plain k-draft one).  vLLM refuses ``--async-scheduling`` with n-gram on the
    V1 runner (``VllmConfig.__post_init__``), so the flag is left unset while the
    config is built and set afterwards: the driver builds the scheduler classes
    directly, the enablement decision is checked separately
    (``statemachine_tests/enablement_check.py``).
    """
    v = _vllm()
    model_config = v.ModelConfig(
        model=_model_dir(),
        skip_tokenizer_init=True,
        dtype="float32",
        seed=0,
        max_model_len=cfg.max_model_len,
    )
    scheduler_config = v.SchedulerConfig(
        max_num_seqs=cfg.max_num_seqs,
        max_num_batched_tokens=cfg.max_num_batched_tokens,
        max_model_len=cfg.max_model_len,
        is_encoder_decoder=False,
        enable_chunked_prefill=cfg.enable_chunked_prefill,
        async_scheduling=cfg.async_scheduling if not cfg.num_speculative_tokens else None,
        policy="fcfs",
    )
    cache_config = v.CacheConfig(
        block_size=cfg.block_size, enable_prefix_caching=cfg.enable_prefix_caching
    )
    speculative_config = None
    if cfg.num_speculative_tokens:
        speculative_config = v.SpeculativeConfig(
            method="ngram",
            num_speculative_tokens=cfg.num_speculative_tokens,
            prompt_lookup_max=cfg.num_speculative_tokens,
            prompt_lookup_min=1,
        )
    vllm_config = v.VllmConfig(
        model_config=model_config,
        scheduler_config=scheduler_config,
        cache_config=cache_config,
        speculative_config=speculative_config,
    )
    vllm_config.scheduler_config.async_scheduling = cfg.async_scheduling
    num_pool_blocks = cfg.num_blocks + 1  # + the null block
    vllm_config.cache_config.num_gpu_blocks = num_pool_blocks
    kv_cache_config = v.KVCacheConfig(
        num_blocks=num_pool_blocks,
        kv_cache_tensors=[],
        kv_cache_groups=[
            v.KVCacheGroupSpec(
                ["layer"],
                v.FullAttentionSpec(
                    block_size=cfg.block_size,
                    num_kv_heads=1,
                    head_size=1,
                    dtype=v.torch.float32,
                ),
            )
        ],
    )
    return vllm_config, kv_cache_config


def _configs_for(cfg: DriverConfig) -> tuple[Any, Any]:
    with _CONFIG_LOCK:
        return _build_configs(cfg)


def default_prompt(req_id: str, prompt_len: int, eos_token_id: int = 2) -> list[int]:
    """Deterministic prompt ids for ``req_id``: never EOS, unrelated across ids.

    Seeded by the id string (stable across processes), so two requests share a
    prefix-cache block only with negligible probability.
    """
    rng = random.Random(f"asyncspec-prompt:{req_id}")
    tokens: list[int] = []
    while len(tokens) < prompt_len:
        tok = rng.randrange(_FIRST_PROMPT_TOKEN, _VOCAB_SIZE)
        if tok != eos_token_id:
            tokens.append(tok)
    return tokens


# --------------------------------------------------------------------------- records


@dataclass(frozen=True)
class ScheduledStep:
    """One ``schedule()`` result.  Mappings are sorted by request id; do not mutate.

    ``is_prefill_chunk`` is read right after ``schedule()`` (a later schedule()
    overwrites the request attribute).  ``preempted_req_ids`` are the requests
    preempted since the previous schedule() (this call included) and
    ``finished_req_ids`` those finished since the previous schedule(), as the
    SchedulerOutput reports them.
    """

    index: int
    num_scheduled_tokens: Mapping[str, int]
    is_prefill_chunk: Mapping[str, bool]
    new_req_ids: tuple[str, ...]
    resumed_req_ids: tuple[str, ...]
    preempted_req_ids: tuple[str, ...]
    finished_req_ids: tuple[str, ...]
    total_num_scheduled_tokens: int
    num_scheduled_drafts: Mapping[str, int] = field(default_factory=dict)  # len(scheduled_spec_decode_tokens[r])
    pending_structured_output_tokens: bool = False  # the engine defers this step's sampling
    _raw: Any = field(default=None, repr=False, compare=False)
    _driver_id: int = field(default=0, repr=False, compare=False)

    @property
    def is_empty(self) -> bool:
        """True for a step that scheduled no token (it is still queued and delivered)."""
        return self.total_num_scheduled_tokens == 0


@dataclass(frozen=True)
class DeliveryResult:
    """What ``update_from_output`` emitted for one step, sorted by request id.

    ``new_token_ids`` holds the tokens of each EngineCoreOutput (already trimmed at
    a stop).  ``finish_reasons`` maps finished ids to vLLM's ``FinishReason`` in
    lower case ("stop", "length", "abort", "error", "repetition").
    """

    step_index: int
    new_token_ids: Mapping[str, tuple[int, ...]]
    finish_reasons: Mapping[str, str]


@dataclass(frozen=True)
class RequestSnapshot:
    """The counters of one live request (an entry of ``scheduler.requests``)."""

    req_id: str
    status: str
    num_tokens: int
    num_prompt_tokens: int
    num_output_tokens: int
    num_computed_tokens: int
    num_output_placeholders: int
    num_in_flight_tokens: int
    num_stale_output_tokens: int
    drop_stale_output: bool
    is_prefill_chunk: bool
    num_preemptions: int
    last_sched_seq: int
    block_ids: tuple[int, ...]
    output_token_ids: tuple[int, ...]


@dataclass(frozen=True)
class SchedulerSnapshot:
    """A deterministic view of the scheduler (requests sorted by id, queues in order)."""

    requests: Mapping[str, RequestSnapshot]
    running: tuple[str, ...]
    waiting: tuple[str, ...]
    kv_holding_waiting: tuple[str, ...]
    sched_step_seq: int
    processed_step_seq: int
    deferred_frees: tuple[tuple[int, tuple[int, ...]], ...]
    num_free_blocks: int


# --------------------------------------------------------------------------- grammar stand-in


class _BitmaskOnlyBackend:
    """What ``StructuredOutputManager.grammar_bitmask`` needs from a backend:
    ``allocate_token_bitmask`` (xgrammar's layout: one int32 per 32 tokens)."""

    def __init__(self, torch: Any) -> None:
        self._torch = torch

    def allocate_token_bitmask(self, max_num_seqs: int) -> Any:
        return self._torch.full((max_num_seqs, (_VOCAB_SIZE + 31) // 32), -1,
                                dtype=self._torch.int32)


@functools.cache
def recording_grammar_class() -> type:
    """``RecordingGrammar``: a ``StructuredOutputGrammar`` (vllm/v1/structured_output/
    backend_types.py) that accepts every token and records what it saw.

    ``accepted`` is the grammar's token sequence (``accept_tokens`` appends,
    ``rollback`` removes the tentative draft tokens again); ``fills`` holds, for
    each bitmask row filled (``fill_bitmask``), how many tokens the grammar had
    accepted at that moment.
    """
    base = _vllm().StructuredOutputGrammar

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


# --------------------------------------------------------------------------- driver


class VllmDriver:
    """Owns one real vLLM scheduler and a FIFO of its undelivered steps."""

    def __init__(self, config: DriverConfig | None = None) -> None:
        """Build ``AsyncScheduler`` or ``Scheduler`` (vllm/v1/core/sched/scheduler.py,
        ``Scheduler.__init__``) from cached configs; cheap after the first call."""
        self.config = config if config is not None else DriverConfig()
        self._v = _vllm()
        vllm_config, kv_cache_config = _configs_for(self.config)
        cls = self._v.AsyncScheduler if self.config.async_scheduling else self._v.Scheduler
        self._scheduler: Any = cls(
            vllm_config=vllm_config,
            kv_cache_config=kv_cache_config,
            structured_output_manager=self._v.StructuredOutputManager(vllm_config),
            block_size=self.config.block_size,
            log_stats=False,
        )
        self._scheduler.defer_block_free = self.config.defer_block_free
        self._block_hasher: Any = self._v.block_hasher(
            self.config.block_size, self._v.hash_fn
        )
        self._id = next(_DRIVER_IDS)
        # Structured output without a backend or tokenizer: the manager only
        # needs somewhere to allocate bitmask rows; every grammar is a RecordingGrammar.
        self._scheduler.structured_output_manager.backend = _BitmaskOnlyBackend(self._v.torch)
        self.grammars: dict[str, Any] = {}  # req id -> RecordingGrammar
        self._pending: deque[int] = deque()
        self._next_index = 0
        self._num_added = 0

    # ---- raw access --------------------------------------------------------------

    @property
    def scheduler(self) -> Any:
        """The wrapped vLLM scheduler (for checks the snapshot does not cover)."""
        return self._scheduler

    @property
    def num_pending_steps(self) -> int:
        """Steps scheduled but not yet delivered (the engine's batch-queue length)."""
        return len(self._pending)

    # ---- operations --------------------------------------------------------------

    def add_request(
        self,
        req_id: str,
        prompt_len: int,
        max_tokens: int,
        prompt_token_ids: list[int] | None = None,
        structured_output: bool = False,
    ) -> None:
        """Queue a new request; wraps ``Scheduler.add_request`` (scheduler.py).

        EOS is configured as the engine does, through
        ``SamplingParams.update_from_generation_config`` (vllm/sampling_params.py).
        With ``structured_output`` the request carries a grammar (a regex in its
        ``StructuredOutputsParams``) whose compiled form is a ``RecordingGrammar``:
        installed at once, as if compilation had finished, so the request waits in
        ``WAITING_FOR_STRUCTURED_OUTPUT_GRAMMAR`` only until the next schedule().
        """
        if prompt_token_ids is None:
            prompt_token_ids = default_prompt(req_id, prompt_len, self.config.eos_token_id)
        elif len(prompt_token_ids) != prompt_len:
            raise ValueError(
                f"prompt_len={prompt_len} but {len(prompt_token_ids)} prompt ids given"
            )
        structured = self._v.StructuredOutputsParams(regex="[a-z]*") if structured_output else None
        params = self._v.SamplingParams(max_tokens=max_tokens, structured_outputs=structured)
        params.update_from_generation_config({}, eos_token_id=self.config.eos_token_id)
        self._num_added += 1
        request = self._v.Request(
            request_id=req_id,
            prompt_token_ids=list(prompt_token_ids),
            sampling_params=params,
            pooling_params=None,
            arrival_time=float(self._num_added),
            block_hasher=self._block_hasher,
        )
        if structured_output:
            grammar = recording_grammar_class()(req_id)
            request.structured_output_request.grammar = grammar
            self.grammars[req_id] = grammar
        self._scheduler.add_request(request)

    def schedule(self) -> ScheduledStep:
        """Run one ``Scheduler.schedule()`` (scheduler.py; the async override of
        ``_update_after_schedule`` is in async_scheduler.py) and record the step."""
        out = self._scheduler.schedule()
        counts = {rid: int(n) for rid, n in sorted(out.num_scheduled_tokens.items())}
        requests = self._scheduler.requests
        chunk = {rid: bool(requests[rid].is_prefill_chunk) for rid in counts}
        step = ScheduledStep(
            index=self._next_index,
            num_scheduled_tokens=counts,
            is_prefill_chunk=chunk,
            new_req_ids=tuple(sorted(r.req_id for r in out.scheduled_new_reqs)),
            resumed_req_ids=tuple(sorted(out.scheduled_cached_reqs.resumed_req_ids)),
            preempted_req_ids=tuple(sorted(out.preempted_req_ids or ())),
            finished_req_ids=tuple(sorted(out.finished_req_ids)),
            total_num_scheduled_tokens=int(out.total_num_scheduled_tokens),
            num_scheduled_drafts={
                rid: len(ids) for rid, ids in sorted(out.scheduled_spec_decode_tokens.items())
            },
            pending_structured_output_tokens=bool(out.pending_structured_output_tokens),
            _raw=out,
            _driver_id=self._id,
        )
        self._next_index += 1
        self._pending.append(step.index)
        return step

    def deliver(self, step: ScheduledStep, sampled: Mapping[str, list[int]]) -> DeliveryResult:
        """Process the output of the oldest undelivered step; wraps
        ``Scheduler.update_from_output`` (scheduler.py).

        ``sampled`` must give the tokens of every scheduled request that was not a
        prefill chunk (``[]`` is allowed, e.g. for an aborted request); prefill-chunk
        requests always get ``[]`` whatever ``sampled`` says, as the model runner
        returns no token for a partial prefill.  Steps must be delivered in the order
        they were scheduled (vLLM's ``sched_step_seq``/``processed_step_seq`` rely on it).
        """
        self._check_deliverable(step)
        output = self._model_runner_output(step, sampled)
        engine_outputs = self._scheduler.update_from_output(step._raw, output)
        self._pending.popleft()
        return _delivery_result(step.index, engine_outputs)

    def abort(self, req_ids: Iterable[str]) -> None:
        """Abort requests; wraps ``Scheduler.finish_requests(ids, FINISHED_ABORTED)``.
        Unknown or already finished ids are ignored, as vLLM does."""
        ids = list(req_ids)
        if ids:
            self._scheduler.finish_requests(ids, self._v.RequestStatus.FINISHED_ABORTED)

    def has_requests(self) -> bool:
        """``Scheduler.has_requests()``: unfinished requests or unsent finished ids."""
        return bool(self._scheduler.has_requests())

    def snapshot(self) -> SchedulerSnapshot:
        """An immutable, sorted view of the live requests and scheduler counters.

        Requests are those still in ``scheduler.requests`` (a finished request leaves
        it in ``_free_blocks``).  Block ids come from ``KVCacheManager.get_block_ids``
        (vllm/v1/core/kv_cache_manager.py), free blocks from
        ``BlockPool.get_num_free_blocks`` (block_pool.py; the null block not counted).
        """
        sched = self._scheduler
        requests = {
            rid: self._request_snapshot(sched.requests[rid]) for rid in sorted(sched.requests)
        }
        return SchedulerSnapshot(
            requests=requests,
            running=tuple(r.request_id for r in sched.running),
            waiting=tuple(r.request_id for r in sched.waiting),
            kv_holding_waiting=tuple(r.request_id for r in sched.kv_holding_waiting),
            sched_step_seq=int(sched.sched_step_seq),
            processed_step_seq=int(sched.processed_step_seq),
            deferred_frees=tuple(
                (int(fence), tuple(b.block_id for b in blocks))
                for fence, blocks in sched.deferred_frees
            ),
            num_free_blocks=int(sched.kv_cache_manager.block_pool.get_num_free_blocks()),
        )

    def grammar_bitmask(self, step: ScheduledStep) -> dict[str, int]:
        """``Scheduler.get_grammar_bitmask`` for ``step``, as the engine calls it
        right before ``sample_tokens`` (``EngineCore.step``/``step_with_batch_queue``).

        Returns, per structured-output request that got a bitmask, the number of
        tokens its grammar had accepted when the request's first row was filled
        (the grammar state the sampled position is constrained from).
        """
        for g in self.grammars.values():
            g.fills.clear()
        self._scheduler.get_grammar_bitmask(step._raw)
        return {rid: g.fills[0] for rid, g in self.grammars.items() if g.fills}

    def update_draft_token_ids(self, req_ids: list[str], drafts: list[list[int]]) -> None:
        """The synchronous engine's ``post_step``: the worker's draft ids reach the
        scheduler (``Scheduler.update_draft_token_ids``)."""
        self._scheduler.update_draft_token_ids(self._v.DraftTokenIds(list(req_ids), drafts))

    def update_draft_token_ids_in_output(self, step: ScheduledStep, req_ids: list[str],
                                         drafts: list[list[int]]) -> None:
        """``step_with_batch_queue`` before sampling a deferred step: the worker's
        drafts replace the -1 placeholders (``Scheduler.update_draft_token_ids_in_output``)."""
        self._scheduler.update_draft_token_ids_in_output(
            self._v.DraftTokenIds(list(req_ids), drafts), step._raw)

    # ---- helpers -----------------------------------------------------------------

    def _check_deliverable(self, step: ScheduledStep) -> None:
        if step._driver_id != self._id or step._raw is None:
            raise ValueError(f"step {step.index} was not scheduled by this driver")
        if not self._pending or self._pending[0] != step.index:
            oldest = self._pending[0] if self._pending else None
            raise ValueError(
                f"step {step.index} delivered out of order (oldest undelivered: {oldest})"
            )

    def _model_runner_output(
        self, step: ScheduledStep, sampled: Mapping[str, list[int]]
    ) -> Any:
        """A fabricated ``ModelRunnerOutput`` (vllm/v1/outputs.py) for ``step``."""
        unknown = sorted(set(sampled) - set(step.num_scheduled_tokens))
        if unknown:
            raise ValueError(f"step {step.index} did not schedule {unknown}")
        req_ids = list(step._raw.num_scheduled_tokens)
        tokens: list[list[int]] = []
        for rid in req_ids:
            if step.is_prefill_chunk[rid]:
                tokens.append([])
            elif rid in sampled:
                tokens.append(list(sampled[rid]))  # vLLM trims this list in place
            else:
                raise ValueError(f"step {step.index}: no sampled tokens for {rid!r}")
        return self._v.ModelRunnerOutput(
            req_ids=req_ids,
            req_id_to_index={rid: i for i, rid in enumerate(req_ids)},
            sampled_token_ids=tokens,
            logprobs=None,
            prompt_logprobs_dict={},
            pooler_output=[],
        )

    def _request_snapshot(self, req: Any) -> RequestSnapshot:
        block_ids = self._scheduler.kv_cache_manager.get_block_ids(req.request_id)
        return RequestSnapshot(
            req_id=str(req.request_id),
            status=str(req.status.name),
            num_tokens=int(req.num_tokens),
            num_prompt_tokens=int(req.num_prompt_tokens),
            num_output_tokens=int(req.num_output_tokens),
            num_computed_tokens=int(req.num_computed_tokens),
            num_output_placeholders=int(req.num_output_placeholders),
            num_in_flight_tokens=int(req.num_in_flight_tokens),
            num_stale_output_tokens=int(req.num_stale_output_tokens),
            drop_stale_output=bool(req.drop_stale_output),
            is_prefill_chunk=bool(req.is_prefill_chunk),
            num_preemptions=int(req.num_preemptions),
            last_sched_seq=int(req.last_sched_seq),
            block_ids=tuple(int(b) for b in block_ids[0]),
            output_token_ids=tuple(int(t) for t in req.output_token_ids),
        )


def _delivery_result(index: int, engine_outputs: Mapping[int, Any]) -> DeliveryResult:
    """Flatten ``update_from_output``'s {client: EngineCoreOutputs} into sorted maps."""
    tokens: dict[str, tuple[int, ...]] = {}
    reasons: dict[str, str] = {}
    for client_outputs in engine_outputs.values():
        for out in client_outputs.outputs:
            rid = str(out.request_id)
            tokens[rid] = tokens.get(rid, ()) + tuple(int(t) for t in out.new_token_ids)
            if out.finish_reason is not None:
                reasons[rid] = str(out.finish_reason.name).lower()
    return DeliveryResult(
        step_index=index,
        new_token_ids=dict(sorted(tokens.items())),
        finish_reasons=dict(sorted(reasons.items())),
    )
