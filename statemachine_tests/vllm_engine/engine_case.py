"""A case of the ``vllm-engine`` target: an engine configuration, requests with real token ids, engine events.

The engine's events are the client's and the busy loop's, at the engine's own
granularity:

========================  =====================================================
``step``                  one engine-loop call (``step_fn()`` + ``post_step``)
``add_request rN``        the client submits request N (in id order)
``abort rN``              a client abort through the input queue, between steps
``abort_in_step rN``      a client abort that arrives while a step runs
                          (``EngineCore.aborts_queue``: drained right before the
                          next ``update_from_output``)
``reset_prefix_cache``    the utility call, between steps
``pause_abort``           ``EngineCore.pause_scheduler(mode="abort")``, between
                          steps (``clear_cache`` as the case says)
``pause_keep``            ``EngineCore.pause_scheduler(mode="keep")``
``resume``                ``EngineCore.resume_scheduler()``
``stream_update rN``      session N's next input (a resumable request with its id)
``stream_close rN``       the end of session N's input stream (``AsyncLLM``'s final,
                          non-resumable request)
========================  =====================================================

``pause_scheduler(mode="wait")`` is ``EngineCoreProc``'s only: the in-process
``EngineCore`` raises ``ValueError: 'wait' mode can't be used in inproc-engine
mode``, so this target has no ``pause_wait`` (the ``vllm`` target drives it).

Each request's expected token stream is the oracle model's
(``engine/vllm/oracle_model.py``), computed one token at a time; its stop
position (EOS unless ``ignore_eos``, or a stop token) is what the spec gets as
the request's EOS position.
"""
from __future__ import annotations

import functools
import random
from dataclasses import asdict, dataclass, field, fields
from typing import Any, NamedTuple

from asyncspec.engine.vllm import oracle_model as om
from asyncspec.engine.vllm.engine_config import EngineDriverConfig

from asyncspec.statemachine_tests.core.harness import RequestSpec, Workload
from asyncspec.statemachine_tests.core.workload import LIMITS as WORKLOAD_LIMITS, MAX_TOKENS

STEP = "step"
ADD_REQUEST = "add_request"
ABORT = "abort"
ABORT_IN_STEP = "abort_in_step"
RESET_PREFIX_CACHE = "reset_prefix_cache"
PAUSE_ABORT, PAUSE_KEEP, RESUME = "pause_abort", "pause_keep", "resume"
PAUSE_MODES = {PAUSE_ABORT: "abort", PAUSE_KEEP: "keep"}
"""The engine's pause events and the ``PauseMode`` each passes to ``EngineCore.pause_scheduler``."""
STREAM_UPDATE, STREAM_CLOSE = "stream_update", "stream_close"
ENGINE_EVENT_KINDS = (STEP, ADD_REQUEST, ABORT, ABORT_IN_STEP, RESET_PREFIX_CACHE, *PAUSE_MODES, RESUME,
                      STREAM_UPDATE, STREAM_CLOSE)
_PER_REQUEST = (ADD_REQUEST, ABORT, ABORT_IN_STEP, STREAM_UPDATE, STREAM_CLOSE)


class EngineEvent(NamedTuple):
    """One engine event; ``req`` for the per-request kinds."""

    kind: str
    req: int | None = None

    def __str__(self) -> str:
        return self.kind if self.req is None else f"{self.kind} r{self.req}"


def parse_engine_event(text: str) -> EngineEvent:
    """Inverse of ``str(EngineEvent)``; ``ValueError`` (one line) otherwise."""
    parts = text.split()
    if not parts or parts[0] not in ENGINE_EVENT_KINDS:
        raise ValueError(f"unknown engine event {text!r} (one of {', '.join(ENGINE_EVENT_KINDS)})")
    if parts[0] in _PER_REQUEST:
        if len(parts) != 2 or not parts[1].startswith("r") or not parts[1][1:].isdigit():
            raise ValueError(f"engine event {text!r} needs a request name like r0")
        return EngineEvent(parts[0], int(parts[1][1:]))
    if len(parts) != 1:
        raise ValueError(f"engine event {parts[0]!r} takes no argument")
    return EngineEvent(parts[0])


@dataclass(frozen=True)
class EngineRequest:
    """One request: prompt ids, ``max_tokens``, and how it may stop."""

    prompt: tuple[int, ...]
    max_tokens: int
    ignore_eos: bool = True
    stop_token_ids: tuple[int, ...] = ()
    structured: bool = False  # carries a grammar (structured output: deferred sampling under async)
    penalized: bool = False  # frequency penalty: the sampler reads the output history the runner keeps
    period: int = 0  # > 0: the oracle model continues it periodically (n-gram drafts get accepted)
    images: tuple[tuple[int, int, int], ...] = ()  # encoder inputs: (offset, length, item) each, by offset
    logprobs: int = 0  # k > 0: SamplingParams(logprobs=k, prompt_logprobs=k), checked (logprobs_check.py)

    @functools.cached_property
    def stream(self) -> tuple[int, ...]:
        """The tokens a synchronous engine samples, up to ``max_tokens``: over the prompt as the model
        reads it, each image's positions holding the stand-in encoder's embeddings (``oracle_encoder.py``)."""
        fed = om.embedded_prompt(self.prompt, self.images) if self.images else self.prompt
        return tuple(om.expected_stream(fed, self.max_tokens, self.penalized, self.period))

    @functools.cached_property
    def stop_position(self) -> int:
        """The output position at which it stops on a token (0: it runs to ``max_tokens``)."""
        return om.first_stop(self.stream, self.stop_token_ids, self.ignore_eos)

    def stops_on_token(self) -> bool:
        """It stops on one of its ``stop_token_ids``, not on EOS (``check_stop`` tests EOS first): vLLM's
        ``stop_reason`` is then that token (the spec's stop kind 1, ``spec/stop.py``)."""
        if not self.stop_position:
            return False
        token = self.stream[self.stop_position - 1]
        return not (token == om.EOS_TOKEN_ID and not self.ignore_eos)


@dataclass(frozen=True)
class EngineCase:
    """An engine configuration and the requests one example submits."""

    engine: EngineDriverConfig
    requests: tuple[EngineRequest, ...]
    defer_block_free: bool = False  # forced on the scheduler, as a KV-consumer connector would
    stale_mode: str = "deliver"  # "drop": requires_kv_delivery forced on, as a KV-producer connector would
    resets: int = 0  # reset_prefix_cache calls allowed
    decode_stagger: int = 1  # depth 3: 2 is MRV2 + PP 2's (the V1 runner cannot feed it)
    pauses: int = 0  # pause_scheduler calls allowed (each followed by a resume)
    clear_cache: bool = False  # pause_scheduler(clear_cache=...): the spec's reset_prefix_cache after the pause
    resumable: tuple[int, ...] = ()  # streaming-input sessions (Workload.resumable)
    stream_updates: tuple[tuple[int, int], ...] = ()  # each session's later inputs: (new tokens, max_tokens)
    remote_loads: tuple[int, ...] = ()  # requests the toy connector loads (engine.kv_connector)
    load_reports: tuple[str, ...] = ()  # per remote load, what the toy worker reports: recv, fail, invalid@j
    encoder_cache_size: int = 0  # SchedulerConfig.encoder_cache_size (images only: engine.images)
    encoder_compute_budget: int = 0  # SchedulerConfig.max_num_encoder_input_tokens (images only)

    def workload(self) -> Workload:
        """The spec's view of the case (EOS position = stop position)."""
        e = self.engine
        return Workload(
            requests=tuple(RequestSpec(len(r.prompt), r.max_tokens, r.stop_position) for r in self.requests),
            depth=e.depth, block_size=e.block_size, num_blocks=e.num_blocks,
            token_budget=e.max_num_batched_tokens, max_num_seqs=e.max_num_seqs,
            chunked_prefill=e.enable_chunked_prefill, prefix_caching=e.enable_prefix_caching,
            defer_block_free=self.defer_block_free, stale_mode="drop" if self.stale_mode == "drop" else "deliver",
            loop="exact", aborts=True,
            reset_prefix_cache=self.resets + (self.pauses if self.clear_cache else 0),
            pauses=self.pauses, resumable=self.resumable, stream_updates=self.stream_updates,
            structured_output=tuple(i for i, r in enumerate(self.requests) if r.structured),
            num_speculative_tokens=e.num_speculative_tokens, sync_scheduler=e.sync_scheduler,
            stops=tuple((i, 1, 0, 0, 0, 0, 0) for i, r in enumerate(self.requests) if r.stops_on_token()),
            kv_connector="toy" if e.kv_connector else "", kv_load_failure_policy=e.kv_load_failure_policy,
            remote_loads=self.remote_loads, kv_invalid_blocks=e.kv_connector, images=self.images,
            encoder_cache_size=self.encoder_cache_size, encoder_compute_budget=self.encoder_compute_budget,
            mamba_cache_mode=e.mamba_cache_mode,
            skip_reading=tuple(i for i, r in enumerate(self.requests) if r.logprobs),
        )

    @property
    def images(self) -> tuple[tuple[int, int, int, int], ...]:
        """Every request's images as the workload lists them: (request, offset, length, item)."""
        return tuple((i, o, n, item) for i, r in enumerate(self.requests) for o, n, item in r.images)

    def encoder_settings(self) -> tuple[int, int, int] | None:
        """(largest image, encoder cache size, compute budget) of a case with images, else None."""
        if not self.images:
            return None
        return max(n for _, _, n, _ in self.images), self.encoder_cache_size, self.encoder_compute_budget

    def kv_transfer_params(self, req: int) -> dict[str, Any] | None:
        """What request ``req`` carries for the toy connector (``toy_connector.py``): a load and
        the worker's report of it, or None."""
        if req not in self.remote_loads:
            return None
        return {"load": True, "report": self.load_reports[self.remote_loads.index(req)]}

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["requests"] = [{"prompt": list(r.prompt), "max_tokens": r.max_tokens, "ignore_eos": r.ignore_eos,
                             "stop_token_ids": list(r.stop_token_ids), "structured": r.structured,
                             "penalized": r.penalized, "period": r.period,
                             "images": [list(image) for image in r.images], "logprobs": r.logprobs}
                            for r in self.requests]
        data["resumable"] = list(self.resumable)  # JSON's arrays (asdict keeps tuples), as case_schema reads them
        data["stream_updates"] = [list(u) for u in self.stream_updates]
        data["remote_loads"] = list(self.remote_loads)
        data["load_reports"] = list(self.load_reports)
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> EngineCase:
        """Inverse of ``to_json``; ``ValueError`` (one line) unless ``data`` is valid against ``case_schema``."""
        from asyncspec.checker.schema import schema_problem

        problem = schema_problem({"case": data}, {"type": "object", "properties": {"case": case_schema()}})
        if problem:
            raise ValueError(problem)
        requests = tuple(EngineRequest(tuple(int(t) for t in r["prompt"]), int(r["max_tokens"]),
                                       bool(r["ignore_eos"]), tuple(int(t) for t in r["stop_token_ids"]),
                                       bool(r.get("structured", False)), bool(r.get("penalized", False)),
                                       int(r.get("period", 0)),
                                       tuple((int(o), int(n), int(i)) for o, n, i in r.get("images", ())),
                                       int(r.get("logprobs", 0)))
                         for r in data["requests"])
        return cls(EngineDriverConfig(**data["engine"]), requests, bool(data.get("defer_block_free", False)),
                   str(data.get("stale_mode", "deliver")), int(data.get("resets", 0)),
                   int(data.get("decode_stagger", 1)), int(data.get("pauses", 0)),
                   bool(data.get("clear_cache", False)), tuple(int(i) for i in data.get("resumable", ())),
                   tuple((int(u), int(m)) for u, m in data.get("stream_updates", ())),
                   tuple(int(i) for i in data.get("remote_loads", ())),
                   tuple(str(k) for k in data.get("load_reports", ())),
                   int(data.get("encoder_cache_size", 0)), int(data.get("encoder_compute_budget", 0)))


def case_schema() -> dict[str, Any]:
    """The closed JSON Schema of an engine case (``EngineCase.to_json``), down to every request: each integer
    within what the spec and the engine can hold (``workload.LIMITS``)."""
    from asyncspec.checker.schema import annotation_schema

    def ranged(lowest: int, highest: int, why: str) -> dict[str, Any]:
        return {"type": "integer", "minimum": lowest, "maximum": highest, "x-hint": why}

    engine: dict[str, Any] = {f.name: annotation_schema(str(f.type)) for f in fields(EngineDriverConfig)}
    for key, ranges in {"block_size": "block_size", "num_blocks": "num_blocks", "max_num_seqs": "max_num_seqs",
                        "max_num_batched_tokens": "token_budget", "max_model_len": "model_len",
                        "num_speculative_tokens": "num_speculative_tokens"}.items():
        engine[key] = ranged(max(WORKLOAD_LIMITS[ranges][0], 1 if key == "max_model_len" else 0),
                             *WORKLOAD_LIMITS[ranges][1:])
    engine |= {"depth": ranged(1, 3, "1 = EngineCore.step, 2 and 3 = step_with_batch_queue"),
               "eos_token_id": ranged(0, 2**31 - 1, "a token id"),
               "device": {"enum": ["cpu", "cuda"]}, "runner": {"enum": ["v1", "mrv2"]},
               "kv_load_failure_policy": {"enum": ["recompute", "fail"]},
               "mamba_cache_mode": {"enum": ["", "none"], "x-hint": "align stops at the runner (docs/fuzzing.md)"}}
    token_id = ranged(0, 2**31 - 1, "a token id")
    request = {"type": "object", "additionalProperties": False,
               "required": ["prompt", "max_tokens", "ignore_eos", "stop_token_ids"],
               "properties": {"prompt": {"type": "array", "items": token_id, "minItems": 1, "maxItems": MAX_TOKENS},
                              "max_tokens": ranged(1, MAX_TOKENS, "a token count"),
                              "ignore_eos": {"type": "boolean"},
                              "stop_token_ids": {"type": "array", "items": token_id},
                              "structured": {"type": "boolean"}, "penalized": {"type": "boolean"},
                              "period": ranged(0, MAX_TOKENS, "a token count"),
                              "logprobs": ranged(0, 5, "top-k logprobs and prompt logprobs (0: none)"),
                              "images": {"type": "array", "maxItems": 8, "items": {
                                  "type": "array", "minItems": 3, "maxItems": 3,
                                  "items": ranged(0, MAX_TOKENS, "offset, length, item")}}}}
    return {"type": "object", "additionalProperties": False, "required": ["engine", "requests"],
            "properties": {"engine": {"type": "object", "properties": engine, "additionalProperties": False},
                           "requests": {"type": "array", "items": request, "minItems": 1},
                           "defer_block_free": {"type": "boolean"}, "stale_mode": {"enum": ["deliver", "drop"]},
                           "resets": ranged(*WORKLOAD_LIMITS["reset_prefix_cache"]),
                           "decode_stagger": ranged(1, 4, "the pipeline depth"),
                           "pauses": ranged(*WORKLOAD_LIMITS["pauses"]), "clear_cache": {"type": "boolean"},
                           "resumable": {"type": "array", "items": ranged(0, MAX_TOKENS, "a request index")},
                           "stream_updates": {"type": "array", "maxItems": 4, "items": {
                               "type": "array", "minItems": 2, "maxItems": 2,
                               "items": ranged(1, MAX_TOKENS, "new prompt tokens, then max_tokens")}},
                           "remote_loads": {"type": "array", "items": ranged(0, MAX_TOKENS, "a request index")},
                           "load_reports": {"type": "array", "items": {
                               "type": "string", "pattern": "^(recv|fail|invalid@[0-9]{1,3})$"}},
                           "encoder_cache_size": ranged(*WORKLOAD_LIMITS["encoder_cache_size"]),
                           "encoder_compute_budget": ranged(*WORKLOAD_LIMITS["encoder_compute_budget"])}}


def events_problem(case: EngineCase, events: list[EngineEvent]) -> str | None:
    """Why ``events`` cannot run on ``case`` (one line: the first naming a request the case has not), or None."""
    for i, event in enumerate(events, start=1):
        if event.req is not None and not 0 <= event.req < len(case.requests):
            return f"engine event {i} '{event}' names a request the case does not have (r0..r{len(case.requests) - 1})"
    return None


def device_problem(case: EngineCase) -> str | None:
    """Why this machine cannot run ``case``'s device (a CUDA case where torch sees no GPU), or None."""
    if case.engine.device != "cuda":
        return None
    import torch

    if torch.cuda.is_available():
        return None
    return "the case runs on device 'cuda' and this machine has no CUDA GPU (replay it on one, or set device 'cpu')"


def case_problem(case: EngineCase) -> str | None:
    """Why ``case`` cannot run (one line), or None."""
    e = case.engine
    if e.depth not in (1, 2, 3):
        return "depth must be 1, 2 or 3"
    if case.stale_mode not in ("deliver", "drop"):
        return "stale_mode must be deliver or drop"
    if not case.requests:
        return "a case needs at least one request"
    if len({r.prompt[0] for r in case.requests if r.prompt}) != len(case.requests):
        return "prompts must be non-empty and start with distinct tokens (the spec has no cross-request sharing)"
    if (problem := sessions_problem(case) or loads_problem(case) or images_problem(case)
            or mamba_case_problem(case) or logprobs_problem(case)) is not None:
        return problem
    margin = draft_margin(e)
    for i, r in enumerate(case.requests):
        if r.max_tokens < 1 or len(r.prompt) + r.max_tokens + margin > e.max_model_len - (1 if margin else 0):
            return f"r{i}: max_tokens must be >= 1 and P + M (+ draft margin) within max_model_len {e.max_model_len}"
        if -(-(len(r.prompt) + r.max_tokens + margin) // e.block_size) > e.num_blocks:
            return f"r{i} does not fit the pool alone"
        if r.period and len(r.prompt) <= r.period:
            return f"r{i}: a periodic request's prompt must be longer than its period"
        if margin and len(r.prompt) < 2:
            return f"r{i}: with speculative decoding prompts have 2 tokens or more (docs/findings_vllm.md, V2)"
    return None


def sessions_problem(case: EngineCase) -> str | None:
    """Why ``case``'s streaming-input sessions cannot run (one line), or None: the spec's limits
    (``workload.streaming_problem``), each session within ``max_model_len`` with all its turns, and
    sessions that stop only at ``max_tokens`` (the spec keeps one EOS position per request)."""
    from asyncspec.statemachine_tests.core.workload import streaming_problem

    if not case.resumable:
        return "stream_updates needs resumable requests" if case.stream_updates else None
    if (problem := streaming_problem(case.workload())) is not None:
        return problem
    for i in case.resumable:
        r = case.requests[i]
        if not r.ignore_eos or r.stop_token_ids or r.structured or r.penalized or r.period:
            return f"session r{i} must ignore EOS and have no stop tokens, grammar, penalty or period"
        if case.workload().session_len(i) > case.engine.max_model_len - 1:
            return f"session r{i} with all its turns exceeds max_model_len {case.engine.max_model_len}"
    return None


def logprobs_problem(case: EngineCase) -> str | None:
    """Why ``case``'s logprobs requests cannot be checked (one line), or None: the oracle knows every row of
    a plain request (no grammar, penalty, period, images or session: ``logprobs_check.py``) on an engine
    without drafts or a connector (the spec models skipping the prefix cache without one)."""
    asking = [i for i, r in enumerate(case.requests) if r.logprobs]
    if not asking:
        return None
    if case.engine.num_speculative_tokens or case.engine.kv_connector:
        return "logprobs requests run on an engine without drafts or a KV connector"
    for i in asking:
        r = case.requests[i]
        if r.structured or r.penalized or r.period or r.images or i in case.resumable:
            return f"r{i} asks for logprobs, so it has no grammar, penalty, period, images or session"
    return None


def images_problem(case: EngineCase) -> str | None:
    """Why ``case``'s images cannot run (one line), or None: an engine built for them (``engine.images``,
    either runner), no periodic request among them, and the spec's limits (``workload.encoder_problem``)."""
    from asyncspec.statemachine_tests.core.workload import encoder_problem

    if not case.images:
        return encoder_problem(case.workload())
    if not case.engine.images:
        return "images need engine.images (the tiny PaliGemma and its stand-in encoder)"
    if any(r.period for r in case.requests if r.images):
        return "a request with images has no period (the oracle would repeat image embeddings)"
    return encoder_problem(case.workload())


def mamba_case_problem(case: EngineCase) -> str | None:
    """Why ``case``'s Mamba group cannot run (one line), or None: mode ``none`` on the V1 runner (``align``
    needs the model's state copy functions, a CPU limit: docs/fuzzing.md), without images, and the
    spec's limits (``workload.mamba_problem``)."""
    from asyncspec.statemachine_tests.core.workload import mamba_problem

    e = case.engine
    if not e.mamba_cache_mode:
        return None
    if e.mamba_cache_mode != "none" or e.runner != "v1" or e.images:
        return "a Mamba group runs on the engine target in mamba_cache_mode 'none', on the V1 runner, without images"
    return mamba_problem(case.workload())


def loads_problem(case: EngineCase) -> str | None:
    """Why ``case``'s toy-connector loads cannot run (one line), or None: the spec models the
    connector on the V1 runner at depths 1 and 2 without prefix caching, drafts or sessions; a
    load claims a request's prompt but its last token, and ``invalid@j`` names one of its blocks."""
    e = case.engine
    if not e.kv_connector:
        return "remote_loads need engine.kv_connector" if case.remote_loads or case.load_reports else None
    if e.runner != "v1" or e.depth > 2 or e.enable_prefix_caching or e.num_speculative_tokens or case.resumable:
        return "kv_connector runs on the V1 runner at depth 1 or 2, without prefix caching, drafts or sessions"
    if len(case.load_reports) != len(case.remote_loads) or len(set(case.remote_loads)) != len(case.remote_loads):
        return "load_reports has one report per remote load, and remote_loads names each request once"
    for req, report in zip(case.remote_loads, case.load_reports):
        if not 0 <= req < len(case.requests) or len(case.requests[req].prompt) < 2:
            return f"remote load r{req}: a request of the case with a prompt of 2 tokens or more"
        loaded_blocks = -(-(len(case.requests[req].prompt) - 1) // e.block_size)
        if report.startswith("invalid@") and int(report[len("invalid@"):]) >= loaded_blocks:
            return f"remote load r{req}: {report} names a block past its {loaded_blocks} loaded blocks"
    return None


def draft_margin(e: EngineDriverConfig) -> int:
    """Positions past P + M - 1 that speculative decoding may schedule (``harness.draft_margin``):
    a request must fit the pool and ``max_model_len`` with them, as the spec has no ``max_model_len``."""
    return e.depth * e.num_speculative_tokens


@dataclass(frozen=True)
class CaseShape:
    """How requests are drawn for a case (prompt and output lengths, stop kinds)."""

    max_requests: int = 6
    prompt_len: tuple[int, int] = (1, 14)
    max_tokens: tuple[int, int] = (1, 12)
    eos_share: float = 0.5  # requests that may stop on EOS (the rest ignore it)
    stop_token_share: float = 0.2  # requests with a stop token taken from their own stream
    structured_share: float = 0.25  # requests with a grammar
    penalized_share: float = 0.25  # requests with a frequency penalty
    periodic_share: float = 0.0  # requests the oracle model continues periodically (speculative decoding)
    periods: tuple[int, ...] = (2, 3)
    logprobs_share: float = 0.0  # plain requests asking for logprobs and prompt logprobs (k = 1 or 2)
    vocab: tuple[int, int] = field(default=(om.FIRST_TOKEN_ID, om.FIRST_TOKEN_ID + om.OUTPUT_RANGE))


def draw_requests(rng: random.Random, count: int, shape: CaseShape, max_len: int) -> tuple[EngineRequest, ...]:
    """``count`` requests with distinct first prompt tokens, each within ``max_len`` tokens."""
    lo, hi = shape.vocab
    firsts = rng.sample(range(lo, hi), count)
    out = []
    for first in firsts:
        period = 0
        if shape.periodic_share and rng.random() < shape.periodic_share:
            period = rng.choice(shape.periods)
        prompt_len = rng.randint(max(shape.prompt_len[0], period + 1), min(shape.prompt_len[1], max_len - 1))
        prompt = (first, *(rng.randrange(lo, hi) for _ in range(prompt_len - 1)))
        max_tokens = rng.randint(shape.max_tokens[0], min(shape.max_tokens[1], max_len - prompt_len))
        ignore_eos = rng.random() >= shape.eos_share
        structured = rng.random() < shape.structured_share
        penalized = rng.random() < shape.penalized_share
        stops: tuple[int, ...] = ()
        if rng.random() < shape.stop_token_share:
            stream = om.expected_stream(prompt, max_tokens, penalized, period)
            stops = (stream[rng.randrange(len(stream))],)
        logprobs = 0
        if shape.logprobs_share and not (structured or penalized or period) and rng.random() < shape.logprobs_share:
            logprobs = rng.choice((1, 2))
        out.append(EngineRequest(prompt, max_tokens, ignore_eos, stops, structured, penalized, period,
                                 logprobs=logprobs))
    return tuple(out)
