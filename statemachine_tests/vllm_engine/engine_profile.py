"""What a ``vllm-engine`` campaign draws from: engine configurations, cases and their events.

An engine configuration is built once per campaign (``EngineTarget``), so a
profile offers a small menu of them per depth; a case picks one, draws its
requests (``engine_case.draw_requests``) and a list of choice bytes that become
engine events (``plan_events``): mostly engine steps, sometimes an arrival,
an abort between steps or during one, a ``reset_prefix_cache``.
"""
from __future__ import annotations

import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace

from hypothesis import strategies as st

from asyncspec.engine.vllm.engine_config import EngineDriverConfig
from asyncspec.spec import events as ev

from asyncspec.statemachine_tests.vllm_engine import engine_case as ec
from asyncspec.statemachine_tests.vllm_engine.combo_coverage import COMBO_COVERAGE
from asyncspec.statemachine_tests.vllm_engine.logprobs_check import LOGPROBS_COVERAGE
from asyncspec.statemachine_tests.vllm_engine.mamba_coverage import MAMBA_ENGINE_COVERAGE, MAMBA_STATE_BLOCKS, mamba_configs
from asyncspec.statemachine_tests.scheduler.draft_coverage import DRAFT_COVERAGE
from asyncspec.statemachine_tests.core.harness import ABORT, RESET_PREFIX_CACHE, Event, RequestSpec
from asyncspec.statemachine_tests.scheduler.profile_type import CONNECTOR_COVERAGE, KV_RECOVERY_COVERAGE
from asyncspec.statemachine_tests.scheduler.profiles import SPEC_DECODE_COVERAGE
from asyncspec.statemachine_tests.scheduler import workload_draw
from asyncspec.statemachine_tests.scheduler.workload_draw import ENCODER_COVERAGE, STREAMING_COVERAGE, encoder_categories
from asyncspec.statemachine_tests.vllm_engine.worker_coverage import (
    ENCODER_WORKER_COVERAGE, MRV2_ENCODER_WORKER_COVERAGE, WORKER_COVERAGE,
)

MAX_CHOICES = 160  # engine events picked per example
MAX_DRAIN = 600  # engine steps after the choices

ENGINE_COVERAGE: dict[str, tuple[str, ...]] = {
    **ev.FUZZ_COVERAGE,
    "prefix_cache_hit": (ev.PREFIX_CACHE_HIT,),
    "structured_output_deferral": (ev.STRUCTURED_OUTPUT_DEFERRAL,),
}
"""Spec-event categories the engine target reports; the worker-side ones come on top."""
PAUSE_ENGINE_COVERAGE: dict[str, tuple[str, ...]] = {
    "pause_in_flight": (ev.PAUSE_IN_FLIGHT,), "paused_output": (ev.PAUSED_OUTPUT,),
    "pause_held_waiting": (ev.PAUSE_HELD_WAITING,), "resumed_held": (ev.RESUMED_HELD,),
}
"""The pause categories (as the ``vllm`` target's ``pause`` part): a pause with steps in the batch queue,
a step processed while paused, a waiting request held by ``PAUSED_NEW``, a resume with work held."""


def _configs(depth: int, device: str, runner: str = "v1", k: int = 0, streaming: bool = False,
             sync: bool = False, kv: bool = False, images: bool = False,
             mamba: bool = False) -> tuple[EngineDriverConfig, ...]:
    """The menu of engine configurations at ``depth`` (``sync``: depth 2 over the plain Scheduler;
    ``kv``: the toy KV connector's, ``kv_connector_configs``; ``images``: ``image_configs``;
    ``mamba``: ``mamba_coverage.mamba_configs``)."""
    if mamba:
        return mamba_configs(depth, device)
    if kv:
        return kv_connector_configs(depth, device)
    if images:
        return image_configs(depth, device, runner)
    configs = _async_configs(depth, device, runner, k, streaming)
    return tuple(replace(c, sync_scheduler=True) for c in configs) if sync and depth == 2 else configs


def _async_configs(depth: int, device: str, runner: str, k: int, streaming: bool) -> tuple[EngineDriverConfig, ...]:
    if streaming:  # what the spec models sessions with: chunked prefill, no prefix caching (spec/streaming.py)
        return (EngineDriverConfig(depth=depth, device=device, runner=runner, block_size=4, num_blocks=8,
                                   max_num_seqs=3, max_num_batched_tokens=8, enable_chunked_prefill=True,
                                   enable_prefix_caching=False, max_model_len=32),)
    tight = EngineDriverConfig(depth=depth, device=device, runner=runner, block_size=4, num_blocks=8, max_num_seqs=4, max_num_batched_tokens=16,
                               enable_chunked_prefill=True, enable_prefix_caching=True, max_model_len=32,
                               num_speculative_tokens=k)
    no_chunk = EngineDriverConfig(depth=depth, device=device, runner=runner, block_size=4, num_blocks=16, max_num_seqs=3, max_num_batched_tokens=32,
                                  enable_chunked_prefill=False, enable_prefix_caching=False, max_model_len=32,
                                  num_speculative_tokens=k)
    return tight, no_chunk


def kv_connector_configs(depth: int, device: str) -> tuple[EngineDriverConfig, ...]:
    """The toy connector (``toy_connector.py``, both halves) where the spec models it: chunked
    prefill, no prefix caching; blocks of 4 so a load spans blocks; policy ``recompute`` at every
    depth, ``fail`` too at depth 2."""
    base = EngineDriverConfig(depth=depth, device=device, block_size=4, num_blocks=6, max_num_seqs=3,
                              max_num_batched_tokens=8, enable_chunked_prefill=True, enable_prefix_caching=False,
                              max_model_len=24, kv_connector=True)
    return (base, replace(base, kv_load_failure_policy="fail")) if depth > 1 else (base,)


def image_configs(depth: int, device: str, runner: str = "v1") -> tuple[EngineDriverConfig, ...]:
    """The tiny PaliGemma with the stand-in encoder (``oracle_encoder.py``) where the spec models images:
    chunked prefill, no prefix caching; token budgets of 6 and 4 (chunks start and end inside images,
    the recycled shape needs 6), blocks of 4 and 2, small pools."""
    base = EngineDriverConfig(depth=depth, device=device, runner=runner, block_size=4, num_blocks=6, max_num_seqs=4,
                              max_num_batched_tokens=6, enable_chunked_prefill=True, enable_prefix_caching=False,
                              max_model_len=24, images=True)
    return base, replace(base, block_size=2, num_blocks=10, max_num_seqs=3, max_num_batched_tokens=4, max_model_len=20)


ASYNC_ONLY_CATEGORIES = ("preemption_with_output_in_flight", "stale_delivery", "stale_drop", "deferred_free",
                         "wasted_step", "max_tokens_guard", "abort_in_flight", "structured_output_deferral")
"""Categories only a step in flight at ``schedule()`` reaches: a profile of depth 1 alone does not list them."""


@dataclass(frozen=True)
class EngineProfile:
    """The engine configurations and case shapes of a campaign."""

    depths: tuple[int, ...] = (1, 2, 3)
    shape: ec.CaseShape = field(default_factory=ec.CaseShape)
    defer_block_free: tuple[bool, ...] = (False, True)
    stale_modes: tuple[str, ...] = ("deliver", "drop")
    resets: int = 2  # reset_prefix_cache calls a case may make
    reset_with_deferral: bool = False  # known vLLM bug V1 (docs/findings_vllm.md): off by default
    depth3_stagger: int = 1  # 2: depth 3 as MRV2 with pipeline parallelism 2 staggers decodes (MRV2 only)
    device: str = "cpu"
    runner: str = "v1"  # "mrv2": Model Runner V2 (a process set up by engine/vllm/mrv2_runner.py)
    spec_tokens: tuple[int, ...] = (0,)  # k: n-gram drafts per decode step (ngram_gpu), per configuration
    combos: bool = False  # report COMBO_COVERAGE (drafts with grammars, at depth 2)
    pauses: int = 0  # pause_scheduler calls a case may make (modes abort and keep: engine_case.py)
    clear_cache: tuple[bool, ...] = (False,)  # pause_scheduler(clear_cache=...), drawn per case
    streaming: bool = False  # streaming-input sessions (their own configuration: _configs)
    session_kv_deadlock: bool = False  # known vLLM bug V10: sessions whose blocks together overflow the pool
    sync_scheduler: bool = False  # depth 2 over the plain Scheduler (pipeline parallelism 2 without async scheduling)
    kv_connector: bool = False  # the toy KV connector's loads, their reports drawn per request (draw_loads)
    images: bool = False  # requests with images on the tiny PaliGemma (image_configs, draw_images)
    min_requests: int = 1  # requests per case, at least
    mamba: bool = False  # a Mamba group in mode none beside attention (mamba_coverage.py)

    def configs(self) -> tuple[EngineDriverConfig, ...]:
        return tuple(c for d in self.depths for k in self.spec_tokens
                     for c in _configs(d, self.device, self.runner, k, self.streaming, self.sync_scheduler,
                                       self.kv_connector, self.images, self.mamba))

    def config_part(self, config: EngineDriverConfig) -> str:
        """The campaign part a configuration belongs to: runner (``+spec-decode`` when it drafts) and
        depth, e.g. ``v1/depth3``; what a skipped part is named by (``skipped_parts`` of ``--json``)."""
        sync = "-sync" if config.sync_scheduler else ""
        if config.kv_connector:
            sync += f"+kv-{config.kv_load_failure_policy}"
        if config.images:
            sync += "+images"
        if config.mamba_cache_mode:
            sync += "+mamba"
        return f"{config.runner}{sync}{'+spec-decode' if config.num_speculative_tokens else ''}/depth{config.depth}"

    def config_capabilities(self, config: EngineDriverConfig) -> tuple[str, ...]:
        """What an engine of ``config`` drives (``engine/vllm/surfaces.py``): the engine's needs
        (``engine_config.needed_engine_capabilities``), the depth-3 decode stagger when this profile
        staggers, structured output when its cases carry grammars."""
        from asyncspec.engine.vllm import surfaces
        from asyncspec.engine.vllm.engine_config import needed_engine_capabilities

        stagger = (surfaces.DECODE_STAGGER,) if config.depth == 3 and self.depth3_stagger > 1 else ()
        grammar = (surfaces.STRUCTURED_OUTPUT,) if self.shape.structured_share > 0 else ()
        pause = (surfaces.PAUSE, surfaces.ENGINE_PAUSE) if self.pauses else ()
        sessions = (surfaces.STREAMING_INPUT,) if self.streaming else ()
        return (*needed_engine_capabilities(config), *stagger, *grammar, *pause, *sessions)

    def parts(self) -> list[str]:
        """The campaign's parts, in menu order, each once."""
        return list(dict.fromkeys(self.config_part(c) for c in self.configs()))

    def event_categories(self) -> dict[str, tuple[str, ...]]:
        """The categories counted from spec events, and the events each sums."""
        return {**ENGINE_COVERAGE, **(SPEC_DECODE_COVERAGE if any(self.spec_tokens) else {}),
                **(PAUSE_ENGINE_COVERAGE if self.pauses else {}),
                **(STREAMING_ENGINE_COVERAGE if self.streaming else {}),
                **(KV_ENGINE_COVERAGE if self.kv_connector else {}),
                **({k: ENCODER_COVERAGE[k] for k in encoder_categories(True, max(self.depths))} if self.images else {}),
                **(MRV2_PAYLOAD_COVERAGE if self.images and self.runner == "mrv2" else {})}

    def categories(self) -> list[str]:
        """Every category the summary lists (each reachable with this profile's defaults)."""
        drafts = list(DRAFT_COVERAGE) if any(self.spec_tokens) else []
        if self.combos:
            drafts += COMBO_COVERAGE  # drafts and grammars in flight together (combo_coverage.py)
        listed = [*self.event_categories(), *WORKER_COVERAGE, *drafts, *(ENCODER_WORKER_COVERAGE if self.images else ()),
                  *(MRV2_ENCODER_WORKER_COVERAGE if self.images and self.runner == "mrv2" else ()),
                  *(MAMBA_ENGINE_COVERAGE if self.mamba else ()),
                  *(LOGPROBS_COVERAGE if self.shape.logprobs_share else ())]
        if self.mamba:  # mode none has no prefix caching (mamba_configs)
            listed = [c for c in listed if c != "prefix_cache_hit"]
        if self.streaming:  # its one configuration has no prefix caching and its cases no grammar
            listed = [c for c in listed if c not in ("prefix_cache_hit", "structured_output_deferral")]
        if self.images:  # its configurations have no prefix caching (image_configs); ENCODER_RARE
            listed = [c for c in listed if c not in ("prefix_cache_hit", *ENCODER_RARE)]
        if self.kv_connector:  # no prefix caching, and KV_CONNECTOR_UNREACHABLE
            listed = [c for c in listed if c not in ("prefix_cache_hit", *KV_CONNECTOR_UNREACHABLE)]
        if self.runner == "mrv2":  # MRV2 is sent a resumed request as a new one (payload.as_mrv2)
            listed = [c for c in listed if c != "resumed_with_history"]
        if "drop" not in self.stale_modes:  # no case drops a preempted request's output in flight
            listed = [c for c in listed if c != "stale_drop"]
        if max(self.depths) == 1:  # the synchronous scheduler: no step is ever in flight at a schedule()
            listed = [c for c in listed if c not in ASYNC_ONLY_CATEGORIES]
        if self.sync_scheduler:  # placeholders and the deferred grammar step are AsyncScheduler's
            listed = [c for c in listed if c not in SYNC_UNREACHABLE]
        return listed


KV_CONNECTOR_UNREACHABLE = ("preemption_with_output_in_flight", "stale_delivery", "stale_drop")
"""Unreachable under a ``kv_both`` connector: at depth 2 vLLM defers frees (a consumer, ``Scheduler.__init__``)
and then never preempts a request whose step is in flight (``Scheduler.schedule``: a deferred free does
not help the allocation, ``_request_blocks_can_be_freed``), so no output of a preempted request is in flight."""
SYNC_UNREACHABLE = ("wasted_step", "max_tokens_guard", "structured_output_deferral")
"""Categories of AsyncScheduler's placeholders and deferred sampling: none under the plain Scheduler."""
DEFAULT_ENGINE_PROFILE = EngineProfile()
MRV2_ENGINE_PROFILE = EngineProfile(depths=(1, 2, 3), runner="mrv2", depth3_stagger=2)
"""Model Runner V2 under Triton's interpreter (``engine/vllm/mrv2_runner.py``, a slow tier); depth 3 with
the decode stagger of pipeline parallelism 2, over one rank."""
SPEC_DECODE_ENGINE_PROFILE = EngineProfile(depths=(1, 2), spec_tokens=(2,),
                                           shape=ec.CaseShape(prompt_len=(2, 14), periodic_share=0.5))
"""Speculative decoding with vLLM's GPU n-gram drafter (``ngram_gpu``, k = 2), which keeps async
scheduling on (depth 2); depth 1 is the same drafter with ``--no-async-scheduling`` (drafts through
``EngineCore.post_step``).  Half the requests are periodic for the oracle model, so drafts are accepted
as well as rejected.  Prompts start at 2 tokens (a 1-token prompt is padded by vLLM,
docs/findings_vllm.md V2).  At depth 1 no request carries a grammar: vLLM's ``validate_tokens`` drops a
grammar request's unproposed (-1) drafts, where the spec's synchronous draft model gives every
continuing request k (docs/vllm-engine.md, "Not covered")."""
STRUCTURED_SPEC_ENGINE_PROFILE = replace(SPEC_DECODE_ENGINE_PROFILE, shape=ec.CaseShape(
    prompt_len=(2, 14), periodic_share=0.5, structured_share=0.5), combos=True)
"""Structured output and speculative decoding in the same engine: the spec-decode profile with half the
requests carrying a grammar (at depth 2; depth 1 carries none, as above), in the tight pool that preempts
and with resets and aborts drawn, so that they land while drafts and grammar state are in flight
(``combo_coverage.py``)."""
PAUSE_ENGINE_PROFILE = EngineProfile(depths=(2, 3, 1), pauses=2, clear_cache=(False, True))
"""``pause_scheduler`` (abort, keep; with and without ``clear_cache``) and ``resume_scheduler`` on the
in-process EngineCore, with steps in the batch queue: V1 runner, depths 2, 3 and 1."""
STREAMING_ENGINE_PROFILE = EngineProfile(depths=(2, 1), streaming=True, resets=0, shape=ec.CaseShape(
    max_requests=4, prompt_len=(1, 8), max_tokens=(1, 6), structured_share=0.0, penalized_share=0.0))
"""Streaming-input sessions on the in-process EngineCore (V1 runner, depths 2 and 1): about half the
requests are sessions of up to three more turns, whose inputs and end come between steps; a turn's kept
output and new ids reach the runner as prompt.  The spec models sessions with chunked prefill, without
prefix caching, drafts or grammars (``workload.streaming_problem``); a session stops only at
``max_tokens`` (the spec keeps one EOS position per request, and each turn's tokens are the oracle
model's continuation of that turn's prompt).  No ``reset_prefix_cache``: with a session holding its
blocks it raises (finding V8, the ``vllm`` target's ``--known-bug reset-with-session``)."""
STREAMING_ENGINE_COVERAGE: dict[str, tuple[str, ...]] = {"stream_resume": STREAMING_COVERAGE["stream_resume"]}
"""The streaming categories the engine reaches: a session takes its next input.  A turn that stops with
steps in flight needs a stop on a token, which a session here never has (above)."""
MRV2_SPEC_DECODE_ENGINE_PROFILE = replace(MRV2_ENGINE_PROFILE, depths=(1,), spec_tokens=(2,),
                                          shape=SPEC_DECODE_ENGINE_PROFILE.shape)
"""``--runner mrv2 --profile spec-decode``: the synchronous scheduler (depth 1) over Model Runner V2 with
the GPU n-gram drafter (k = 2), drafts through ``EngineCore.post_step``; the scan kernel runs under
Triton's interpreter, its finalize kernel is a stand-in (``mrv2_stubs.NgramFinalizeKernel``)."""
SYNC_PP_ENGINE_PROFILE = EngineProfile(depths=(2,), sync_scheduler=True)
"""Pipeline parallelism 2 without async scheduling, as the V1 runner runs it: the plain ``Scheduler`` under
``step_with_batch_queue`` with a queue of two (``max_concurrent_batches``), one rank playing both stages.  A
decode in flight leaves its request nothing to schedule until its output is processed."""
KV_ENGINE_COVERAGE: dict[str, tuple[str, ...]] = {
    **{k: v for k, v in CONNECTOR_COVERAGE.items() if k != "kv_send_delayed_free"}, **KV_RECOVERY_COVERAGE}
"""The connector categories the engine's toy worker reaches (it sends nothing): loads, failed loads,
aborts while loading, invalid blocks and the partial recompute of a load's valid prefix."""
KV_RECOVERY_ENGINE_PROFILE = EngineProfile(depths=(2, 1), kv_connector=True, resets=0,
                                           shape=ec.CaseShape(max_requests=4, prompt_len=(6, 14), max_tokens=(1, 8)))
"""KV-load failure recovery on the in-process EngineCore with the toy connector's both halves
(``toy_connector.py``): about half the requests are loaded, the worker reporting each load one step
after it started, done, failed, or with its blocks from block j on invalid, and writing what the load
brought into the oracle model's KV store but the invalid blocks, so the recomputed suffix must produce
the oracle model's tokens.  vLLM's own choices for a ``kv_both`` connector: frees deferred at depth 2
(a consumer), ``requires_kv_delivery`` on (a producer).  Policies recompute and fail; V1 runner, depths 2
and 1; prompts of 6 tokens or more span two blocks of 4; no ``reset_prefix_cache``."""
MRV2_PAYLOAD_COVERAGE = {"encoder_input_dropped": ("encoder_input_dropped",)}
"""With images on MRV2, the spec's side of ``encoder_input_updates`` (``spec/encoder.payload_updates``,
``encoder_obs``): a step drops an image's data.  Its counterpart ``encoder_input_resent`` (a step sends
an image's data again) is emitted but not listed: these shapes never re-send (a preempted request comes
back as a new one, and nothing rewinds a running request without drafts or KV loads; docs/fuzzing.md)."""

ENCODER_RARE = ("stale_delivery", "stale_drop")
"""Reached by the ``encoder`` part but rarely (0 to 4 times in its 100 cases on seeds 0-2: a preemption
with a step in flight, then the stale mode drawn), so not required of it: the ``v1`` part reaches them
in every run.  Their counts are still reported."""
ENCODER_ENGINE_PROFILE = EngineProfile(depths=(2, 1), images=True, resets=0, min_requests=4, shape=ec.CaseShape(
    max_requests=5, prompt_len=(2, 10), max_tokens=(1, 6), penalized_share=0.0))
"""Requests with images on the in-process EngineCore over the V1 runner (depths 2 and 1): the tiny PaliGemma
(its processor a stand-in, ``encoder_model.py``) whose encoder is the oracle's (``oracle_encoder.py``), four
or five requests whose images the ``vllm`` target's ``encoder`` part draws (``workload_draw.images``, half
the time the recycled shape of vllm#52482, ``workload_draw.recycled_images``): a small encoder cache
and compute budget, shared items; the runner computes each scheduled item, keeps it by identifier, frees
what ``free_encoder_mm_hashes`` names and gathers each step's image positions from its cache, so a wrong
entry, a stale one or a miss shows in the sampled tokens.  No ``reset_prefix_cache`` (the spec's encoder
model leaves it out), no prefix caching, drafts, connectors or sessions (``workload.encoder_problem``)."""
MAMBA_ENGINE_PROFILE = EngineProfile(depths=(2, 1), mamba=True, min_requests=3, shape=ec.CaseShape(
    max_requests=5, prompt_len=(1, 12), max_tokens=(1, 8)))
"""A Mamba group beside attention in ``mamba_cache_mode`` ``none`` on the in-process EngineCore over the V1
runner (depths 2 and 1): the runner reports a ``MambaSpec`` layer (``runner_stubs.stub_runner``), vLLM's
hybrid KV manager gives each request one 256-token state block from the shared pool, the spec follows with
the same group (``spec/mamba.py``), each request's state block is compared (``swa_block_table``, the
payload) and the oracle model carries each request's state through it (``fake_model.py``), so a wrong or
reused state block shows in the sampled tokens.  Three to five requests in small pools (preemptions free
state blocks, some with steps in flight); no prefix caching (mode ``none``), drafts, connectors or sessions
(``workload.mamba_problem``)."""
MRV2_ENCODER_ENGINE_PROFILE = replace(ENCODER_ENGINE_PROFILE, runner="mrv2")
"""``--runner mrv2 --profile encoder``: the ``encoder`` profile over Model Runner V2 (depths 2 and 1): the
scheduler's ``encoder_input_updates`` (``Scheduler._get_encoder_input_updates``, sent to MRV2 only) install
and drop each item's data in MRV2's ``EncoderCache``; its ``EncoderRunner`` encodes what was scheduled over
the stand-in encoder (``mrv2_oracle.mrv2_encoder_oracle_class``) and gathers each step's image positions.
The updates and the scheduler's held sets are compared with the spec's (``spec/encoder.payload_updates``;
category ``encoder_input_dropped``, ``MRV2_PAYLOAD_COVERAGE``)."""
LOGPROBS_ENGINE_PROFILE = EngineProfile(depths=(2, 3, 1), stale_modes=("deliver",), resets=0, shape=ec.CaseShape(
    logprobs_share=0.6, structured_share=0.1, penalized_share=0.1))
"""Logprobs and prompt logprobs (k = 1 or 2) on the V1 runner at depths 2, 3 and 1 (``logprobs_check.py``):
about half the requests ask for them, so they skip the prefix cache (the spec follows:
``Workload.skip_reading``) while the others hit it in the same pools; vLLM's rows are held to the oracle
model's one-hot logits, and the prompt's rows must come once, with the first output, also after a
preemption recomputed the prompt.  Stale outputs are delivered (``requires_kv_delivery`` off) and no
``reset_prefix_cache`` is drawn: a preempted request's stale output that vLLM drops (drop mode, or the forced
preemptions of ``reset_prefix_cache(reset_running_requests=True)``) takes its prompt logprobs with it
(finding V12, docs/findings_vllm.md; ``--known-bug prompt-logprobs-stale-drop`` draws both)."""
MRV2_PROFILES = {"default": MRV2_ENGINE_PROFILE, "spec-decode": MRV2_SPEC_DECODE_ENGINE_PROFILE,
                 "encoder": MRV2_ENCODER_ENGINE_PROFILE}
"""The profiles ``--runner mrv2`` takes (``--profile``; ``default`` when left out)."""
ENGINE_PROFILES = {"default": DEFAULT_ENGINE_PROFILE, "spec-decode": SPEC_DECODE_ENGINE_PROFILE,
                   "pause": PAUSE_ENGINE_PROFILE, "streaming": STREAMING_ENGINE_PROFILE,
                   "sync-pp": SYNC_PP_ENGINE_PROFILE, "kv-recovery": KV_RECOVERY_ENGINE_PROFILE,
                   "encoder": ENCODER_ENGINE_PROFILE, "mamba": MAMBA_ENGINE_PROFILE,
                   "logprobs": LOGPROBS_ENGINE_PROFILE}
KNOWN_BUG_SWITCHES = {"reset-with-deferral": "reset_prefix_cache under deferred frees raises (finding V1)",
                      "prompt-logprobs-stale-drop": "a dropped stale output loses the prompt logprobs (finding V12)",
                      "session-kv-deadlock": "sessions waiting with their KV blocks deadlock a full pool (finding V10)"}


@st.composite
def engine_cases(draw: st.DrawFn, profile: EngineProfile) -> ec.EngineCase:
    """One case: a configuration from the menu, 1..max requests, deferral and reset options."""
    configs = profile.configs()
    config = configs[draw(st.integers(0, len(configs) - 1))]
    count = draw(st.integers(profile.min_requests, profile.shape.max_requests))
    rng = random.Random(draw(st.integers(0, 2**32 - 1)))
    # each request fits max_model_len and, alone, the pool (with the draft margin)
    states = MAMBA_STATE_BLOCKS if config.mamba_cache_mode else 0  # workload.mamba_problem
    max_len = min(config.max_model_len - 1, (config.num_blocks - states) * config.block_size) - ec.draft_margin(config)
    requests = ec.draw_requests(rng, count, profile.shape, max_len)
    if config.depth == 1 and config.num_speculative_tokens:  # see SPEC_DECODE_ENGINE_PROFILE
        requests = tuple(replace(r, structured=False) for r in requests)
    defer = draw(st.sampled_from(profile.defer_block_free))
    stale_mode = draw(st.sampled_from(profile.stale_modes))
    resets = profile.resets if (not defer or profile.reset_with_deferral) else 0
    stagger = profile.depth3_stagger if config.depth == 3 else 1
    clear_cache = bool(resets) and draw(st.sampled_from(profile.clear_cache))  # a reset, as resets are
    resumable, updates = (_sessions(rng, requests, config, profile.session_kv_deadlock) if profile.streaming
                          else ((), ()))
    requests = _as_sessions(requests, resumable)
    loads, reports = draw_loads(rng, requests, config) if config.kv_connector else ((), ())
    encoder = (0, 0)
    if config.images:
        requests, encoder = draw_images(draw, requests, config)
    if config.kv_connector:  # what vLLM derives for kv_both (Scheduler.__init__)
        defer, stale_mode = config.depth > 1, "drop"
    return ec.EngineCase(config, requests, defer_block_free=defer, stale_mode=stale_mode, resets=resets,
                         decode_stagger=stagger, pauses=profile.pauses, clear_cache=clear_cache,
                         resumable=resumable, stream_updates=updates, remote_loads=loads, load_reports=reports,
                         encoder_cache_size=encoder[0], encoder_compute_budget=encoder[1])


def draw_images(draw: st.DrawFn, requests: tuple[ec.EngineRequest, ...], config: EngineDriverConfig
                ) -> tuple[tuple[ec.EngineRequest, ...], tuple[int, int]]:
    """The requests with the images the ``vllm`` target's ``encoder`` part draws (``workload_draw.images``;
    half the draws of four requests or more, where the token budget allows, the recycled shape of
    vllm#52482: prompts cut to 3 tokens), and (encoder cache size, compute budget)."""
    specs = tuple(RequestSpec(len(r.prompt), r.max_tokens) for r in requests)
    budget = config.max_num_batched_tokens
    if len(requests) >= 4 and budget >= 2 * workload_draw.RECYCLE_PROMPT and draw(st.booleans()):
        short, images, cache, compute, _ = workload_draw.recycled_images(draw, specs, budget)
        requests = tuple(replace(r, prompt=r.prompt[:s.prompt_len]) for r, s in zip(requests, short))
    else:
        images, cache, compute = workload_draw.images(draw, specs, budget)
    mine = {i: tuple(sorted((o, n, item) for r, o, n, item in images if r == i)) for i in range(len(requests))}
    return tuple(replace(r, images=mine[i], period=0) for i, r in enumerate(requests)), (cache, compute)


def draw_loads(rng: random.Random, requests: Sequence[ec.EngineRequest],
               config: EngineDriverConfig) -> tuple[tuple[int, ...], tuple[str, ...]]:
    """Which requests the toy connector loads (about half, at least one) and what its worker reports
    of each: ``recv`` or ``fail`` a quarter each, else ``invalid@j`` for one of the loaded blocks."""
    loads = [i for i, r in enumerate(requests) if len(r.prompt) >= 2 and rng.random() < 0.5]
    if not loads:
        loads = [i for i, r in enumerate(requests) if len(r.prompt) >= 2][:1]
    reports = []
    for i in loads:
        roll = rng.random()
        loaded_blocks = -(-(len(requests[i].prompt) - 1) // config.block_size)
        reports.append("recv" if roll < 0.25 else "fail" if roll < 0.5 else f"invalid@{rng.randrange(loaded_blocks)}")
    return tuple(loads), tuple(reports)


def _sessions(rng: random.Random, requests: Sequence[ec.EngineRequest], config: EngineDriverConfig,
              overflow: bool = False) -> tuple[tuple[int, ...], tuple[tuple[int, int], ...]]:
    """Which requests are streaming-input sessions (about half, at least one) and their later
    inputs (1-3 of them, shared by every session as ``Workload.stream_updates`` is), each session
    fitting ``max_model_len`` and the pool with all its turns.  Unless ``overflow`` (the
    ``session-kv-deadlock`` switch), the sessions' blocks with all their turns fit the pool
    together: a session waits for its next turn holding its blocks, and sessions that together
    hold a full pool deadlock (docs/findings_vllm.md, V10)."""
    updates = tuple((rng.randint(1, 4), rng.randint(1, 4)) for _ in range(rng.randint(1, 3)))
    extra = sum(u + m - 1 for u, m in updates)
    room = min(config.max_model_len - 1, config.num_blocks * config.block_size)
    fits = [i for i, r in enumerate(requests) if len(r.prompt) + r.max_tokens + extra <= room]
    chosen: list[int] = []
    blocks = 0
    for i in fits:
        need = -(-(len(requests[i].prompt) + requests[i].max_tokens + extra) // config.block_size)
        if rng.random() < 0.5 and (overflow or blocks + need <= config.num_blocks):
            chosen.append(i)
            blocks += need
    if not chosen and fits:
        chosen.append(fits[0])
    return tuple(chosen), (updates if chosen else ())


def _as_sessions(requests: tuple[ec.EngineRequest, ...], resumable: Sequence[int]) -> tuple[ec.EngineRequest, ...]:
    """The sessions stop only at ``max_tokens`` (``STREAMING_ENGINE_PROFILE``)."""
    return tuple(replace(r, ignore_eos=True, stop_token_ids=()) if i in resumable else r
                 for i, r in enumerate(requests))


CHOICES = st.binary(max_size=MAX_CHOICES)


def pick(choice: int, arrived: int, total: int, enabled: Sequence[Event], abort_pending: bool,
         has_work: bool, schedules_next: bool = True) -> ec.EngineEvent | None:
    """The engine event ``choice`` selects (0, what Hypothesis shrinks to, is an engine step).

    0-199 a step, 200-227 the next arrival, 228-239 an abort between steps,
    240-249 an abort during the next step, 250-255 a ``reset_prefix_cache``;
    a choice whose event is not possible falls back to a step, then an arrival.
    Where the case may pause now, 244-247 are a ``pause_abort`` and 248-255 a ``pause_keep``;
    while paused, 220-227 a ``resume``, as is any choice once the engine has nothing to step,
    and 100-219 the next arrival (which the pause holds in ``waiting``).
    An abort during the next step only when that step will call ``schedule()``
    (``schedules_next``), and no pause while such an abort waits in ``aborts_queue``: a step
    that does not schedule (``has_requests()`` false: ``PAUSED_ALL``, or only paused sessions
    left) decides to process its oldest step before it drains the abort, whose finished
    request makes ``has_requests()`` true again; the spec's one ``update_from_output`` action
    decides after the abort, so it would schedule first.
    """
    paused = Event(ec.RESUME) in enabled
    streams = [e for e in enabled if e.kind in (ec.STREAM_UPDATE, ec.STREAM_CLOSE)]
    if 236 <= choice < 244 and streams:  # a session's next input (or its end), between steps
        return ec.EngineEvent(streams[choice % len(streams)].kind, streams[choice % len(streams)].req)
    if not abort_pending and (pause := _pause_pick(choice, enabled, has_work or arrived < total)) is not None:
        return pause
    if paused and 100 <= choice < 220 and arrived < total:
        return ec.EngineEvent(ec.ADD_REQUEST, arrived)
    abortable = [e.req for e in enabled if e.kind == ABORT and e.req is not None]
    if 228 <= choice < 240 and abortable:
        return ec.EngineEvent(ec.ABORT, abortable[choice % len(abortable)])
    if 240 <= choice < 250 and abortable and not abort_pending and schedules_next:
        return ec.EngineEvent(ec.ABORT_IN_STEP, abortable[choice % len(abortable)])
    if choice >= 250 and Event(RESET_PREFIX_CACHE) in enabled:
        return ec.EngineEvent(ec.RESET_PREFIX_CACHE)
    if (200 <= choice < 228 or not has_work) and arrived < total:
        return ec.EngineEvent(ec.ADD_REQUEST, arrived)
    return ec.EngineEvent(ec.STEP) if has_work else None


def _pause_pick(choice: int, enabled: Sequence[Event], busy: bool) -> ec.EngineEvent | None:
    """The pause event ``choice`` selects, if any (see ``pick``)."""
    if Event(ec.RESUME) in enabled:
        return ec.EngineEvent(ec.RESUME) if 220 <= choice < 228 or not busy else None
    kind = ec.PAUSE_ABORT if choice < 248 else ec.PAUSE_KEEP
    return ec.EngineEvent(kind) if choice >= 244 and Event(kind) in enabled else None


def drain(arrived: int, total: int, has_work: bool, paused: bool = False,
          enabled: Sequence[Event] = ()) -> ec.EngineEvent | None:
    """After the choices: a ``resume`` if paused, the remaining arrivals, every session's next
    inputs and end (``enabled``: a paused session's KV may starve a waiting request, as the
    client's next input is what frees it, configs/finding-stream-paused-starves.toml), then
    steps until the engine is idle."""
    if paused:
        return ec.EngineEvent(ec.RESUME)
    if arrived >= total:
        streams = [e for e in enabled if e.kind in (ec.STREAM_UPDATE, ec.STREAM_CLOSE) and e.req is not None]
        if streams:
            return ec.EngineEvent(streams[0].kind, streams[0].req)
    if arrived < total:
        return ec.EngineEvent(ec.ADD_REQUEST, arrived)
    return ec.EngineEvent(ec.STEP) if has_work else None


def planned(choices: bytes) -> Iterator[int | None]:
    """The choice bytes, then ``None`` for each drain step."""
    yield from choices
    for _ in range(MAX_DRAIN):
        yield None
