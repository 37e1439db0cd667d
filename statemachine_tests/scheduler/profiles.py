"""Fuzz profiles: which region of vLLM's configuration space a campaign draws workloads from.

A ``Profile`` lists the values each workload setting may take (depths, block
sizes, pool sizes, budgets, chunked prefill, prefix caching, deferred frees,
stale mode, speculative tokens, structured output); ``workloads()`` is the
Hypothesis strategy that draws one ``Workload`` from it, and ``CHOICES`` the
bytes that pick the events of one example.
"""
from __future__ import annotations

from dataclasses import replace

from hypothesis import strategies as st

from asyncspec.spec import events as ev

from asyncspec.statemachine_tests.core.harness import ABORT, ADD_REQUEST, RESET_PREFIX_CACHE, RequestSpec, Workload
from asyncspec.statemachine_tests.scheduler import workload_draw
from asyncspec.statemachine_tests.scheduler.profile_type import (  # re-exported: profiles is where callers look
    COVERAGE as COVERAGE, CONNECTOR_COVERAGE as CONNECTOR_COVERAGE, HYBRID_COVERAGE as HYBRID_COVERAGE,
    KNOWN_BUG_SWITCHES as KNOWN_BUG_SWITCHES, KV_RECOVERY_COVERAGE as KV_RECOVERY_COVERAGE,
    LONG_PROMPT_COVERAGE as LONG_PROMPT_COVERAGE, OFFLOAD_COVERAGE as OFFLOAD_COVERAGE,
    PAUSE_COVERAGE as PAUSE_COVERAGE, POLICY_COVERAGE as POLICY_COVERAGE, PREFIX_CACHE_HIT as PREFIX_CACHE_HIT,
    SPEC_DECODE_COVERAGE as SPEC_DECODE_COVERAGE, STRUCTURED_OUTPUT_COVERAGE as STRUCTURED_OUTPUT_COVERAGE,
    Profile as Profile, switches_on as switches_on, with_known_bugs as with_known_bugs, with_switches as with_switches,
)

MAX_CHOICES = 200  # events picked by Hypothesis per example


BASE_PROFILE = Profile()
"""The base profile (``--profile base``; it was ``default`` until the default campaign became the mix
``all``): FCFS, one full-attention KV cache group, no connector, depths 1 and 2, both stale modes,
deferred frees on or off, prefix caching off."""
PREFIX_CACHING_PROFILE = Profile(prefix_caching=(False, True))
"""Prefix caching on as well (the spec models hits: ``EngineState.block_hashes``)."""
LARGE_PROFILE = Profile(block_sizes=(16,), num_blocks=(8, 16, 32, 64), token_budgets=(64, 128, 256, 32),
                        max_num_seqs=(8, 4, 16), max_requests=16, max_output=24,
                        prefix_caching=(False, True))
"""Realistic block size 16, up to 16 requests with prompts up to ~1,000 tokens."""
SPEC_DECODE_PROFILE = Profile(spec_tokens=(1, 2), min_prompt=2, prefix_caching=(False, True))
"""Speculative decoding, k in {1, 2} (an n-gram ``SpeculativeConfig`` on vLLM's side), prefix caching
on half the time (an admission over a cache hit is padded too: ``pads_spec_decode``):
the worker accepts 0..k drafts per request and step, a Hypothesis choice
(``deliver accept=r0:1``).  Prompts start at 2 tokens: a 1-token prompt
admitted behind running decodes is padded to 1 + k positions by vLLM
(docs/findings_vllm.md, V2), which the spec does not model."""
STRUCTURED_OUTPUT_PROFILE = Profile(depths=(2, 2, 1), spec_tokens=(0, 1, 2), structured_output=(True,),
                                    min_prompt=2)
"""Requests with a grammar (a recording stand-in), with and without speculative decoding:
a step that samples for a grammar request with tokens in flight defers its sampling."""
HYBRID_PROFILE = Profile(block_sizes=(4, 2, 16), num_blocks=(8, 12, 10, 16, 24, 48), sliding_windows=(1, 3, 3, 8, 4, 13, 32),
                         prefix_caching=(True, False), max_output=16, min_requests=3, defer_block_free=(False, False, True),
                         stale_modes=("drop", "deliver"), resets=(0, 0, 1, 2))
"""Hybrid KV cache groups: a sliding-window group (window W) beside the full-attention
group, sharing one pool (``SlidingWindowSpec``).  Prefix caching half the time: off, vLLM's
``KVCacheCoordinatorNoPrefixCache``; on, its ``HybridKVCacheCoordinator``, whose hit is full
attention's cut where the window group's right-to-left scan finds its run of cached blocks
(``spec/swa.py``).  Each request fits the pool alone with both groups.  Steered for the cut (a
preempted request whose full-attention tail outlives the window blocks it needs): three requests or
more, outputs up to 16 tokens, deferred frees a third of the time (they hold preemption back), blocks
of 2 beside 4 and 16, drop mode first, resets rarer; window 1 drawn first (a window of one token caches
no window block, so every hit is cut to 0) and window 3 twice (one cached block is a window's run: the
right-hand match of the scan).  In the default campaign (seed 0) the hybrid hit's vLLM mutants die at
examples 529 and 1323 (docs/fuzzing.md, the kill table)."""
CONNECTOR_PROFILE = Profile(num_blocks=(6, 8, 12, 32), kv_connectors=("toy", "toy", "nixl"))
"""A KV connector's scheduler half, role kv_both: ours (``engine/vllm/toy_connector.py``; each
request may ask for an asynchronous load of its prompt and for a send when it finishes) or
vLLM's NixlConnector (decode side, pull mode: a request may pull its whole prompt);
the worker reports loads (done or failed, under either ``kv_load_failure_policy``) and
sends whenever the choices say (``deliver recv=rN`` / ``fail=rN`` / ``sent=rN``)."""
OFFLOAD_PROFILE = Profile(depths=(2, 2, 1), block_sizes=(4, 2), num_blocks=(4, 6, 8, 12), token_budgets=(8, 16, 4),
                          min_requests=2, max_output=10, aborts=(True,), kv_connectors=("offloading",),
                          defer_block_free=(True,), resets=(0,), stale_modes=("deliver", "drop"),
                          offload_prompt_only=(True, False))
"""vLLM's OffloadingConnector (kv_both, a CPU tier; spec/offload.py), scheduler half real, the worker played by
the harness: every full prompt block computed (every full block, with ``offload_prompt_only`` off, half the
examples) is stored by a store job the worker reports later (``deliver stored=rN``);
``defer_block_free`` on exactly when steps overlap (vLLM's own choice for a KV consumer), aborts park frees behind
the fence, a reused block of a finished request's pending store is flushed; a preempted request waits for its
stores and comes back loading what it stored (``deliver recv=rN``).  Small pools for KV pressure."""
KV_RECOVERY_PROFILE = replace(CONNECTOR_PROFILE, block_sizes=(4,), kv_invalid_blocks=(True,), min_prompt=6)
"""KV-load failure recovery: ``connector``, and the worker may report a load's blocks from block j on invalid
(``deliver invalid@j=rN``: ``invalid_block_ids``); prompts of 6 tokens or more span two blocks of 4."""
PRIORITY_PROFILE = Profile(policies=("priority",), num_blocks=(4, 6, 4, 8), block_sizes=(4,), token_budgets=(16, 8),
                           max_num_seqs=(8,), min_requests=3, stale_modes=("deliver", "deliver", "drop"), max_output=16)
"""``policy="priority"``: each request gets priority 0..2 (lower first); the waiting queue is a
heap on (priority, arrival) and pass 1 preempts the largest (priority, arrival), taking back a
victim already scheduled in the step.  Without prefix caching, unless the priority-undo-keeps-hash
switch is on (``prefix_options``): vLLM keeps the hashes ``allocate_slots`` gave the blocks of a step
whose scheduling of a victim was then taken back, and the spec does not (docs/findings_vllm.md, V4).
Steered for its rarest witness, ``preempted_scheduled_undone`` (a victim already scheduled in the step):
three requests at least, up to eight running, outputs up to 16 tokens; on the spec 13 of 40 shards reach
it, against 2 of 40 with the draw before (two requests allowed, four or eight running, outputs up to 12)."""
LONG_PROMPT_PROFILE = Profile(block_sizes=(4, 16), num_blocks=(16, 32, 64), token_budgets=(16, 32, 64),
                              max_requests=4, long_prefill_thresholds=(4, 8, 0), long_prefill_adaptive=(False, True),
                              model_len_caps=True)
"""Long prompts (up to the pool) with ``long_prefill_token_threshold`` (fixed or adaptive) and a
``max_model_len`` that some requests' P + M exceed (they stop LENGTH at it; pass 1 caps a
running request at ``max_model_len - C - 1``)."""
DEPTH3_PROFILE = Profile(depths=(3,), block_sizes=(4,), num_blocks=(4, 5, 6, 8), token_budgets=(8, 4, 6, 16),
                         chunked_prefill=(True, True, False), max_num_seqs=(4, 3), min_requests=5, max_output=16,
                         defer_block_free=(False, False, False, True), stale_modes=("deliver", "deliver", "deliver", "drop"))
"""Real batch-queue depth 3: Model Runner V2 with pipeline parallelism 2 (``VLLM_USE_V2_MODEL_RUNNER``,
``ParallelConfig(pipeline_parallel_size=2)``): three steps in flight, a request decodes every other
``schedule()`` (``AsyncScheduler.decode_stagger`` 2), resumed requests are sent among the new ones.

Tuned for pass 2's stale-resume skip (``stale_resume_skip``): it needs a KV-pressure preemption, in
deliver mode without deferred frees, of a request whose output is in flight in a step that is not the
oldest, i.e. a victim decoding on the other phase of the stagger from the request that needed the block.
Five or six requests in a pool of 4-8 blocks of 4 tokens, with token budgets (4-16) small enough that
chunked prefills end on different steps (so requests decode on both phases) and outputs up to 16 tokens
(so they outgrow the pool): about half of the examples reach it (docs/fuzzing.md, "Real batch-queue
depth 3"), against 1-2 in 100 with the previous draw (depths 3, 3, 2, block sizes 4 and 16, pools up to
32 blocks, one to six requests).  Depth 2 is left to the other profiles."""
RESET_PROFILE = Profile(depths=(2, 1), defer_block_free=(False,), resets=(2,), prefix_caching=(True, False))
"""Two ``reset_prefix_cache`` calls allowed in every example, no deferred frees (they turn resets off),
prefix caching on half the time: resets with several requests running, with cached blocks in the pool."""
SELF_HIT_PROFILE = Profile(depths=(2,), block_sizes=(4,), num_blocks=(4, 6, 8), prefix_caching=(True,),
                           defer_block_free=(False,), stale_modes=("drop",), resets=(0,))
"""A request preempted by KV pressure with a step in flight drops it (drop mode) and, re-admitted before its
blocks are evicted, finds its whole sequence cached: the full hit ``KVCacheManager.get_computed_blocks`` caps
(the spec's hashes are per request, so a request hits only its own blocks; docs/fuzzing.md)."""
RESET_STORM_PROFILE = Profile(block_sizes=(4,), num_blocks=(12, 16), token_budgets=(64, 32), max_num_seqs=(4,),
                              defer_block_free=(False,), resets=(4,), prefix_caching=(True, False),
                              loops=("free", "exact"))
"""A reset storm (four resets: ``fuzz_example.reset_heavy``): arrivals first, resets from a fifth of the
choices and after each ``schedule()`` of the drain, several requests running at once (docs/fuzzing.md)."""
PAUSE_PROFILE = Profile(depths=(2, 2, 1), num_blocks=(6, 8, 12, 32), max_requests=5, pauses=(2, 1),
                        kv_connectors=("toy", "toy", ""), resets=(0, 1))
"""``EngineCore.pause_scheduler`` in every mode and ``resume_scheduler``, with steps in flight: a pause
holds what it may (``PAUSED_NEW``: the waiting queue; ``PAUSED_ALL``: everything), the engine loop
drains the steps in flight, arrivals made during the pause wait for the resume; two thirds of the
examples draw the toy KV connector, whose KV-holding requests ``PAUSED_NEW`` still admits and whose
pending sends keep the engine stepping under ``PAUSED_ALL``; half the draws of two requests or more take
the held-send shape (``workload_draw.held_send``, with the connector): r1 finishes at its first token and
sends while r0 decodes, so that a keep pause meets a ``schedule()`` with a request running."""
STREAMING_PROFILE = Profile(num_blocks=(8, 12, 16, 32), max_num_seqs=(2, 4, 1), chunked_prefill=(True,), max_output=6,
                            token_budgets=(8, 16, 4, 32), aborts=(True,), streaming=True)  # resumable requests: workload_draw.py
ENCODER_PROFILE = Profile(depths=(2, 2, 1), block_sizes=(4, 2), num_blocks=(8, 12, 16, 32), token_budgets=(8, 4, 16, 6),
                          max_num_seqs=(4, 2), chunked_prefill=(True,), max_output=6, policies=("fcfs", "priority"),
                          min_requests=4,
                          images=True)  # images and their encoder cache: workload_draw.images
"""Requests with images (encoder inputs; ``spec/encoder.py``): vLLM's scheduler is built for a
config-only PaliGemma whose multimodal processor is a stand-in (``engine/vllm/encoder_model.py``),
with a small encoder cache (one to two of the largest image) and compute budget, four requests or
more over three items at most (shared, and competing for the cache), small token budgets
so that chunks start and end inside images; the priority policy half the time (its undo of a victim
already scheduled in the step takes its encoder inputs back too)."""
MAMBA_PROFILE = Profile(depths=(2, 2, 1), block_sizes=(2, 4), num_blocks=(6, 8, 6, 12), token_budgets=(6, 3, 8, 16),
                        max_num_seqs=(2, 3), chunked_prefill=(True,), prefix_caching=(True, True, False), max_output=8,
                        min_requests=3, long_prefill_thresholds=(0, 0, 3), mamba_modes=("align", "align", "none"))
"""A Mamba state group beside full attention (``spec/mamba.py``): vLLM's scheduler gets a ``MambaSpec`` group
after the attention group, in mamba_cache_mode "align" two thirds of the time (Mamba blocks of attention's size,
prefill chunks cut to block multiples, older states freed behind C - F, prefix caching half the time:
hits need a cached state) and "none" otherwise (one state block of 256 tokens per request, no prefix caching);
small pools, so the state blocks compete with attention's; a long-prefill threshold of 3 under blocks of 4
makes chunks advance inside a block."""
STOP_PROFILE = Profile(num_blocks=(8, 12, 16, 32), max_output=16, model_len_caps=True, stops=True)
"""How ``check_stop`` ends a request besides EOS (``spec/stop.py``): a stop token
(``stop_token_ids``; ``stop_reason`` the token), a pattern the model repeats
(``repetition_detection``; FINISHED_REPETITION, "repetition_detected"), ``min_tokens`` below, at and
beyond the stop signal (it holds back repetition only), outputs up to 16 tokens and a max_model_len
half the time (the length cap comes before both)."""
SYNC_PP_PROFILE = Profile(depths=(2, 2, 1), sync_scheduler=True, block_sizes=(4, 4, 16), num_blocks=(4, 5, 6, 8, 12),
                          token_budgets=(8, 4, 16), structured_output=(False, True), prefix_caching=(False, True))
"""Pipeline parallelism 2 without async scheduling: vLLM's plain ``Scheduler`` under a batch queue of two
(``EngineCore.step_with_batch_queue``, ``max_concurrent_batches`` = PP size: the V1 runner's only way to
overlap steps, which ``VllmConfig`` keeps off async scheduling). A decode whose step is in flight has
nothing to schedule (``num_tokens`` = C, no placeholders), so a request decodes at most every other step
while the queue's second slot goes to the others; prefill chunks pipeline. Grammars and prefix caching
are drawn with it; depth 1 a third of the time as the reference. Drafts are not: ``EngineCore.post_step``
hands the scheduler the drafts of a batch whose output it has not processed yet, which one rank
cannot reproduce (the last rank drafts), so the spec does not model it."""
ALL_PROFILE = Profile(mix=(BASE_PROFILE, DEPTH3_PROFILE, PREFIX_CACHING_PROFILE, PRIORITY_PROFILE, SPEC_DECODE_PROFILE,
                           STRUCTURED_OUTPUT_PROFILE, HYBRID_PROFILE, CONNECTOR_PROFILE, PRIORITY_PROFILE,
                           LONG_PROMPT_PROFILE, RESET_PROFILE, SELF_HIT_PROFILE, RESET_STORM_PROFILE, PAUSE_PROFILE,
                           KV_RECOVERY_PROFILE, STREAMING_PROFILE, ENCODER_PROFILE, OFFLOAD_PROFILE, MAMBA_PROFILE,
                           STOP_PROFILE))
"""The default campaign, one over the configuration space: shard k draws its workloads from part
k mod 20 (``Profile.part``; shards are fixed by (S, k), so ``--jobs`` and Ray give the same result);
every category any part enables is reported, every witness any part reaches is expected.  Depth 3
is part 1, so that a short run (15 shards) has two depth-3 shards; priority is drawn twice as often
as the others, its witnesses (``preempted_scheduled_undone`` above all) being the rarest per shard
(docs/fuzzing.md, "The default campaign").  Parts 10-12 (``reset``, ``self-hit``, ``reset-storm``) are
the streams ``asyncspec mutate-vllm`` once drew on its own: the mutants only they kill are kills a
user's campaign makes (docs/fuzzing.md, "The kill table"); parts 13-18 (``pause``, ``kv-recovery``,
``streaming``, ``encoder``, ``offload``, ``mamba``) are issue 28's; part 19 (``stop``) is check_stop's other
stops (issue 27)."""
PROFILES = {"all": ALL_PROFILE, "base": BASE_PROFILE, "prefix-caching": PREFIX_CACHING_PROFILE,
            "large": LARGE_PROFILE, "spec-decode": SPEC_DECODE_PROFILE, "structured-output": STRUCTURED_OUTPUT_PROFILE,
            "hybrid": HYBRID_PROFILE, "connector": CONNECTOR_PROFILE, "priority": PRIORITY_PROFILE,
            "long-prompt": LONG_PROMPT_PROFILE, "depth3": DEPTH3_PROFILE, "reset": RESET_PROFILE,
            "self-hit": SELF_HIT_PROFILE, "reset-storm": RESET_STORM_PROFILE, "pause": PAUSE_PROFILE,
            "kv-recovery": KV_RECOVERY_PROFILE, "streaming": STREAMING_PROFILE, "encoder": ENCODER_PROFILE,
            "offload": OFFLOAD_PROFILE, "mamba": MAMBA_PROFILE, "stop": STOP_PROFILE,
            "sync-pp": SYNC_PP_PROFILE}
DEFAULT_PROFILE_NAME = "all"
"""What ``asyncspec fuzz --target reference|vllm`` runs without ``--profile`` (and ``pytest --asyncspec``)."""
DEFAULT_EXAMPLES = 1800
"""The default campaign's size (``fuzz --target reference|vllm`` with neither ``--examples`` nor
``--seconds``): on the spec, every seed of 8 reached every category and reachable witness at 1,800
examples, and 3 of 16 at 440 (docs/fuzzing.md, "The default campaign")."""


def for_target(profile: Profile, target: str) -> Profile:
    """The profile a campaign on ``target`` runs: on ``reference``, a mix keeps only the parts the
    reference scheduler models (``reference_gaps``); a single profile is kept as it is (and refused
    by ``fuzz`` if the reference does not model it)."""
    modelled = tuple(part for part in profile.mix if not reference_gaps(part))
    if target != "reference" or not modelled:
        return profile
    return replace(profile, mix=modelled)


def profile_name(profile: Profile) -> str:
    """The ``--profile`` name of ``profile`` (also as ``for_target`` left it for the reference;
    ``custom`` for one built in Python)."""
    base = with_known_bugs(profile, ())
    name = next((name for name, p in PROFILES.items() if base in (p, for_target(p, "reference"))), "custom")
    return "+".join((name, *switches_on(profile)))


def part_names(profile: Profile) -> list[str]:
    """The names of a mix's parts in order (shard k runs part k mod len), or the profile's own name."""
    return [profile_name(part) for part in profile.mix] if profile.mix else [profile_name(profile)]


@st.composite
def workloads(draw: st.DrawFn, profile: Profile = BASE_PROFILE) -> Workload:
    """A workload the spec and vLLM can both take (see ``workload_problem``)."""
    if profile.mix:  # the known-bug switch is the campaign's: every part takes it
        part = draw(st.sampled_from(profile.mix))
        return draw(workloads(with_switches(part, profile)))
    block_size = draw(st.sampled_from(profile.block_sizes))
    num_blocks = draw(st.sampled_from(profile.num_blocks))
    budget = draw(st.sampled_from(profile.token_budgets))
    chunked = draw(st.sampled_from(profile.chunked_prefill))
    defer = draw(st.sampled_from(profile.defer_block_free))
    depth = draw(st.sampled_from(profile.depths))
    k = draw(st.sampled_from(profile.spec_tokens))
    window = draw(st.sampled_from(profile.sliding_windows)) if any(profile.sliding_windows) else 0
    groups = 2 if window else 1  # every group holds the request's blocks (one shared pool)
    mamba = draw(st.sampled_from(profile.mamba_modes)) if any(profile.mamba_modes) else ""
    states = 2 if mamba else 0  # a Mamba group's state blocks beside the request's (workload.mamba_problem)
    margin = depth * k  # harness.draft_margin
    capacity = (num_blocks // groups - states) * block_size - margin
    if not chunked:  # max_model_len = budget, and drafts must fit below it
        capacity = min(capacity, budget - margin)
    if capacity < profile.min_prompt + 1:  # too small for any request: take the largest pool
        num_blocks = max(profile.num_blocks)
        capacity = (num_blocks // groups - states) * block_size - margin
        if not chunked:
            capacity = min(capacity, max(profile.token_budgets) - margin)
            budget = max(profile.token_budgets)
    n = draw(st.integers(profile.min_requests, profile.max_requests))
    requests = tuple(workload_draw.draw_request(draw, capacity, profile.max_output, profile.min_prompt)
                     for _ in range(n))
    structured: tuple[int, ...] = ()
    if draw(st.sampled_from(profile.structured_output)):
        structured = tuple(i for i in range(n) if draw(st.booleans()))
    connector = draw(st.sampled_from(profile.kv_connectors)) if any(profile.kv_connectors) else ""
    policy = "recompute"
    loads: tuple[int, ...] = ()
    sends: tuple[int, ...] = ()
    prompt_only = True
    if connector == "offloading":  # vLLM turns defer_block_free on for a KV consumer with steps overlapping
        defer = depth > 1
        prompt_only = draw(st.sampled_from(profile.offload_prompt_only))
    elif connector:
        policy = draw(st.sampled_from(profile.kv_failure_policies))
        loads = tuple(i for i in range(n) if requests[i].prompt_len > 1 and draw(st.booleans()))
        if connector == "toy":  # NixlConnector's decode side sends nothing
            sends = tuple(i for i in range(n) if draw(st.booleans()))
    if any(profile.pauses) and connector in ("", "toy") and n >= 2 and draw(st.booleans()):  # a keep pause the
        # engine steps through
        requests, loads, sends = workload_draw.held_send(requests, loads, sends, capacity, profile.max_output,
                                                         min(block_size, budget // 2))
        connector = "toy"
    policy_name = draw(st.sampled_from(profile.policies)) if "priority" in profile.policies else "fcfs"
    # offset so that the simplest draw (all 0) gives later arrivals higher priority (2, 1, 0, 2, ...):
    # then the victim is not the last admitted
    priorities = tuple((2 - i + draw(st.integers(0, 2))) % 3 for i in range(n)) if policy_name == "priority" else ()
    threshold = draw(st.sampled_from(profile.long_prefill_thresholds)) if any(profile.long_prefill_thresholds) else 0
    adaptive = bool(threshold) and draw(st.sampled_from(profile.long_prefill_adaptive))
    model_len = 0
    if profile.model_len_caps and draw(st.booleans()):
        model_len = max(r.prompt_len for r in requests) + 1 + draw(st.integers(0, 3))
        if not chunked:
            model_len = min(model_len, budget)
        if model_len <= max(r.prompt_len for r in requests):
            model_len = 0
    if model_len and threshold > model_len:  # vLLM's SchedulerConfig refuses a threshold above max_model_len
        threshold = model_len
    requests, resumable, updates = workload_draw.sessions(draw, profile.streaming, profile.max_output, requests,
                                                          num_blocks * block_size)
    images, cache, encode_budget = workload_draw.images(draw, requests, budget) if profile.images else ((), 0, 0)
    recycled = bool(profile.images) and n >= 4 and draw(st.booleans())
    if recycled:  # the shape of vllm#52482 (workload_draw.recycled_images); budget and seats set below
        requests, images, cache, encode_budget, budget = workload_draw.recycled_images(draw, requests, budget)
    requests, stops = workload_draw.stops(draw, requests, resumable) if profile.stops else (requests, ())
    resets = draw(st.sampled_from(profile.resets))
    if (defer or connector) and not profile.reset_with_deferral or resumable and not profile.reset_with_session:
        resets = 0  # parked frees or blocks held for a load make the reset fail (findings_vllm.md, 1)
    workload = Workload(
        requests=requests,
        depth=depth,
        block_size=block_size,
        num_blocks=num_blocks,
        token_budget=budget,
        max_num_seqs=draw(st.sampled_from(profile.max_num_seqs)),
        chunked_prefill=chunked,
        prefix_caching=draw(st.sampled_from(profile.prefix_options())) and mamba != "none",
        defer_block_free=defer,
        stale_mode=draw(st.sampled_from(profile.stale_modes)),
        loop=draw(st.sampled_from(profile.loops)),
        aborts=draw(st.sampled_from(profile.aborts)),
        reset_prefix_cache=resets,
        sync_scheduler=profile.sync_scheduler and depth == 2,
        num_speculative_tokens=k,
        structured_output=structured,
        sliding_window=window,
        kv_connector=connector,
        kv_load_failure_policy=policy,
        remote_loads=loads,
        remote_sends=sends,
        policy=policy_name,
        priorities=priorities,
        long_prefill_token_threshold=threshold,
        long_prefill_adaptive=adaptive,
        model_len=model_len,
        pauses=draw(st.sampled_from(profile.pauses)),
        kv_invalid_blocks=bool(connector) and draw(st.sampled_from(profile.kv_invalid_blocks)),  # (False,): no draw
        kv_offload_prompt_only=prompt_only,
        resumable=resumable, stream_updates=updates,
        images=images, encoder_cache_size=cache, encoder_compute_budget=encode_budget,
        mamba_cache_mode=mamba,
        stops=stops,
    )
    return replace(workload, max_num_seqs=4) if recycled else workload


CHOICES = st.binary(max_size=MAX_CHOICES)  # one byte per event: cheap to draw, shrinks to 0


SWARM_KINDS = (ADD_REQUEST, ABORT, RESET_PREFIX_CACHE)
"""The event kinds swarm testing may switch off for one example (the engine loop is always on)."""


def swarm_kinds() -> st.SearchStrategy[frozenset[str]]:
    """Swarm testing: the event kinds one example's choices may pick, each off half the time.

    A kind switched off is never picked while the choices last (an arrival still
    happens in the drain); the workload's own switches (aborts, resets, deferral,
    prefix caching, loop, stale mode) are the profile features, drawn per example
    by ``workloads``.  Shrinks towards every kind on.
    """
    return st.tuples(*(st.booleans() for _ in SWARM_KINDS)).map(
        lambda off: frozenset(k for k, o in zip(SWARM_KINDS, off) if not o))


SGLANG_ONLY = (ev.ABORT_DEFERRED, ev.DEFERRED_ABORT_DELIVERY, ev.DEFERRED_ABORT_WASTED_STEP)
"""Witnesses of SGLang's deferred abort (``Req.to_finish``), which no vLLM configuration has."""


def unreachable_witnesses(profile: Profile) -> dict[str, str]:
    """The spec's *sometimes* witnesses (``spec/events.py``) a campaign of ``profile`` cannot
    reach, and why (docs/fuzzing.md, "Saturation")."""
    if profile.mix:  # unreachable only if no part reaches it
        parts = [unreachable_witnesses(with_switches(part, profile)) for part in profile.mix]
        return {name: why for name, why in parts[0].items() if all(name in p for p in parts[1:])}
    out = {name: "SGLang only: vLLM's abort of a running request ends it at once (docs/sglang.md)"
           for name in SGLANG_ONLY}
    if True not in profile.prefix_options():
        out[ev.PREFIX_CACHE_HIT] = "prefix caching is off in this profile"
    if not any(profile.spec_tokens):
        out[ev.SPEC_DECODE_REJECTION] = out[ev.SPEC_DECODE_ALL_ACCEPTED] = "no speculative decoding in this profile"
    if True not in profile.structured_output or 2 not in profile.depths:
        out[ev.STRUCTURED_OUTPUT_DEFERRAL] = "no grammar requests at depth 2 in this profile"
    if not profile.reset_with_deferral:
        out[ev.RESET_PREFIX_CACHE_FAILED] = ("reset_prefix_cache(reset_running_requests=True) only fails "
                                             "with parked frees, which needs the reset-with-deferral switch "
                                             "(docs/findings_vllm.md, finding 1)")
    if 3 not in profile.depths:
        out[ev.STALE_RESUME_SKIP] = ("needs D = 3: at D <= 2 the stale step is processed before the next "
                                     "schedule() (docs/findings_vllm.md)")
    if "priority" not in profile.policies:
        out[ev.PRIORITY_PREEMPTION] = out[ev.PREEMPTED_SCHEDULED_UNDONE] = "FCFS only in this profile"
    if not any(profile.long_prefill_thresholds):
        out[ev.LONG_PREFILL_CAPPED] = "no long_prefill_token_threshold in this profile"
    if not profile.model_len_caps:
        out[ev.MODEL_LEN_CAPPED] = "no request exceeds max_model_len in this profile"
    if not profile.offloads():
        for name in OFFLOAD_EVENTS:
            out[name] = "no OffloadingConnector in this profile"
    else:
        for name in (ev.PREEMPT_IN_FLIGHT_DELIVER, ev.PREEMPT_IN_FLIGHT_DROP, ev.STALE_DELIVERY, ev.STALE_DROP):
            out[name] = ("with the OffloadingConnector vLLM defers frees whenever steps overlap, so a request with "
                         "a step in flight is never preempted (PR #49675), and resets are off")
        for name in (ev.KV_ASYNC_LOAD, ev.KV_LOAD_FAILED, ev.KV_SEND_DELAYED_FREE):
            out[name] = "the OffloadingConnector loads only what it stored (OFFLOAD_LOAD), never fails, sends nothing"
    if not any(profile.kv_connectors):
        for name in (ev.KV_ASYNC_LOAD, ev.KV_LOAD_FAILED, ev.KV_SEND_DELAYED_FREE, ev.KV_ABORT_DURING_LOAD):
            out[name] = "no KV connector in this profile"
    elif True not in profile.aborts:
        out[ev.KV_ABORT_DURING_LOAD] = "no aborts in this profile"
    if True not in profile.kv_invalid_blocks:  # drawn with a connector only
        out[ev.KV_INVALID_BLOCKS] = out[ev.KV_PARTIAL_RECOMPUTE] = "no invalid-block reports in this profile"
    if not any(profile.sliding_windows):
        out[ev.SLIDING_WINDOW_FREE] = "no sliding-window KV cache group in this profile"
    out |= workload_draw.streaming_unreachable(profile.streaming, profile.max_depth())
    out |= workload_draw.encoder_unreachable(profile.images, profile.max_depth())
    out |= workload_draw.mamba_unreachable(profile.mamba_modes, profile.max_depth())
    if not any(profile.pauses):
        for name in PAUSE_COVERAGE:
            out[name] = "no pause_scheduler calls in this profile"
    if profile.max_depth() < 2:
        for name in (ev.WASTED_STEP, ev.MAX_TOKENS_GUARD, ev.PREEMPT_IN_FLIGHT_DELIVER, ev.PREEMPT_IN_FLIGHT_DROP,
                     ev.STALE_DELIVERY, ev.STALE_DROP, ev.DEFERRED_FREE):
            out[name] = "needs a step in flight behind the one scheduled (depth 2 or 3)"
    return out


OFFLOAD_EVENTS = (ev.OFFLOAD_STORE, ev.OFFLOAD_STORE_FINISHED, ev.OFFLOAD_FLUSH, ev.OFFLOAD_FLUSH_PREEMPTED,
                  ev.OFFLOAD_STORE_DONE, ev.OFFLOAD_LOOKUP_DELAYED, ev.OFFLOAD_LOAD)
"""The offloading connector's witnesses (spec/offload.py): reachable only where it is drawn."""


def reference_gaps(profile: Profile) -> list[str]:
    """What ``profile`` draws that the reference scheduler does not model (it has one KV cache
    group, no connector, FCFS, no long-prefill threshold, no max_model_len, no speculative decoding
    and no structured output): these profiles are for the spec against vLLM only."""
    if profile.mix:
        return list(dict.fromkeys(g for part in profile.mix for g in reference_gaps(part)))
    gaps = [name for name, drawn in (
        ("speculative decoding", any(profile.spec_tokens)),
        ("structured output", True in profile.structured_output),
        ("a sliding-window KV cache group", any(profile.sliding_windows)),
        ("a KV connector", any(profile.kv_connectors)),
        ("the priority policy", "priority" in profile.policies),
        ("long_prefill_token_threshold", any(profile.long_prefill_thresholds)),
        ("a max_model_len requests exceed", profile.model_len_caps),
        ("pause_scheduler / resume_scheduler", any(profile.pauses)),
        ("streaming-input sessions", profile.streaming),
        ("images (encoder inputs)", profile.images),
        ("Mamba state groups", any(profile.mamba_modes)),
        ("stop tokens, min_tokens and repetition detection", profile.stops),
    ) if drawn]
    return gaps


def unreached_witnesses(spec_events: dict[str, int], profile: Profile) -> list[str]:
    """The witnesses ``profile`` can reach that a campaign with these spec-event counts missed."""
    skip = unreachable_witnesses(profile)
    return [name for name in ev.ALL_EVENTS if name not in skip and spec_events.get(name, 0) == 0]
