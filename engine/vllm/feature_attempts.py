"""Issue 28's scheduler-side features, attempted on a CPU: the encoder cache, KV offloading, Mamba groups.

Each ``run_*`` builds vLLM's real ``AsyncScheduler`` (vllm/v1/core/sched/async_scheduler.py)
offline and plays ``EngineCore.step_with_batch_queue`` at depth 2, as
``scheduler_driver.py`` does: at most two steps scheduled but undelivered, the
oldest delivered first with a fabricated ``ModelRunnerOutput`` (one token per
non-chunk request, none for a prefill chunk).  What vLLM did is returned as
plain records, one per ``schedule()`` or ``update_from_output()``, so a test
can hold vLLM to the outcome ``docs/fuzzing.md`` ("Features not modelled yet")
records.  ``attempt_stock_encoder_scheduler`` is the real attempt that fails:
its one-line error is the record.

Nothing here is modelled by the spec yet; these are the recipes the next
engineer starts from.
"""

from __future__ import annotations

import copy
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from asyncspec.engine.vllm.encoder_model import NUM_IMAGE_TOKENS, TINY_PALIGEMMA_CONFIG, image, stand_in_processor
from asyncspec.engine.vllm.vllm_config import DriverConfig, configs_for, default_prompt, model_dir
from asyncspec.engine.vllm.vllm_environment import config_only_dir, load_vllm

BLOCK_SIZE = 16


def error_line(exc: BaseException) -> str:
    """``Type: first line of the message``: how docs/fuzzing.md records a failed attempt."""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}".rstrip(": ")


# ---- building -----------------------------------------------------------------------


def tiny_model_dir(name: str, config: dict[str, Any]) -> str:
    """A scratch folder holding only ``config``, as ``config.json`` (``vllm_environment.config_only_dir``)."""
    return config_only_dir(name, config)


def full_attention_group(layer: str = "model.layers.0.self_attn.attn") -> Any:
    """One ``KVCacheGroupSpec`` of ``FullAttentionSpec`` (vllm/v1/kv_cache_interface.py)."""
    v = load_vllm()
    spec = v.FullAttentionSpec(block_size=BLOCK_SIZE, num_kv_heads=1, head_size=1, dtype=v.torch.float32)
    return v.KVCacheGroupSpec([layer], spec)


def build_vllm_config(model: str, *, max_num_batched_tokens: int = 64, prefix_caching: bool = False,
                      kv_transfer_config: Any = None, num_blocks: int = 64) -> Any:
    """A ``VllmConfig`` as ``vllm_config._build_configs`` builds one, for any local model folder."""
    v = load_vllm()
    model_config = v.ModelConfig(model=model, skip_tokenizer_init=True, dtype="float32", seed=0,
                                 max_model_len=256)
    scheduler_config = v.SchedulerConfig(
        max_num_seqs=8, max_num_batched_tokens=max_num_batched_tokens, max_model_len=256,
        is_encoder_decoder=False, enable_chunked_prefill=True, async_scheduling=True)
    vllm_config = v.VllmConfig(
        model_config=model_config, scheduler_config=scheduler_config,
        cache_config=v.CacheConfig(block_size=BLOCK_SIZE, enable_prefix_caching=prefix_caching),
        kv_transfer_config=kv_transfer_config)
    vllm_config.scheduler_config.async_scheduling = True  # the CPU platform turns it off
    vllm_config.cache_config.num_gpu_blocks = num_blocks + 1  # + the null block
    return vllm_config


def build_scheduler(vllm_config: Any, groups: list[Any], num_blocks: int = 64,
                    block_size: int = BLOCK_SIZE) -> Any:
    """vLLM's ``AsyncScheduler`` over ``groups`` (``Scheduler.__init__``, scheduler.py);
    ``block_size``: the scheduler's block size, the LCM of the groups' block sizes."""
    v = load_vllm()
    kv_cache_config = v.KVCacheConfig(num_blocks=num_blocks + 1, kv_cache_tensors=[], kv_cache_groups=groups)
    return v.AsyncScheduler(
        vllm_config=vllm_config, kv_cache_config=kv_cache_config,
        structured_output_manager=v.StructuredOutputManager(vllm_config),
        block_size=block_size, hash_block_size=BLOCK_SIZE, log_stats=True)


def new_request(req_id: str, prompt: list[int], max_tokens: int, arrival: float,
                mm_features: list[Any] | None = None) -> Any:
    """A ``vllm.v1.request.Request`` with EOS configured as the engine does and the block hasher."""
    v = load_vllm()
    params = v.SamplingParams(max_tokens=max_tokens)
    params.update_from_generation_config({}, eos_token_id=2)
    return v.Request(request_id=req_id, prompt_token_ids=list(prompt), sampling_params=params,
                     pooling_params=None, arrival_time=arrival, mm_features=mm_features,
                     block_hasher=v.block_hasher(BLOCK_SIZE, v.hash_fn))


# ---- the depth-2 loop ---------------------------------------------------------------

KvOutput = Callable[[Any], Any]  # SchedulerOutput -> the KVConnectorOutput its execution reports, or None


@dataclass
class PipelineLoop:
    """``step_with_batch_queue`` at depth 2 over one scheduler; ``kv_output`` plays the worker's connector."""

    scheduler: Any
    kv_output: KvOutput | None = None

    def __post_init__(self) -> None:
        self.pending: deque[tuple[Any, set[str]]] = deque()  # (SchedulerOutput, its prefill-chunk ids)

    def schedule(self) -> Any:
        """One ``schedule()``; the step joins the batch queue."""
        out = self.scheduler.schedule()
        requests = self.scheduler.requests
        # A prefill chunk samples nothing: read when scheduled, as the runner sees the step.
        chunks = {rid for rid in out.num_scheduled_tokens if requests[rid].is_prefill_chunk}
        self.pending.append((out, chunks))
        return out

    def deliver(self) -> Any:
        """``update_from_output`` for the oldest step in the queue; returns its ``SchedulerOutput``."""
        v = load_vllm()
        out, chunks = self.pending.popleft()
        req_ids = list(out.num_scheduled_tokens)
        tokens = [[] if rid in chunks else [7] for rid in req_ids]
        model_output = v.ModelRunnerOutput(
            req_ids=req_ids, req_id_to_index={rid: i for i, rid in enumerate(req_ids)},
            sampled_token_ids=tokens, logprobs=None, prompt_logprobs_dict={}, pooler_output=[])
        model_output.kv_connector_output = self.kv_output(out) if self.kv_output else None
        self.scheduler.update_from_output(out, model_output)
        return out

    def step(self) -> Any:
        """Schedule one step, then deliver the oldest once two are in flight; returns the scheduled one."""
        out = self.schedule()
        if len(self.pending) >= 2:
            self.deliver()
        return out


# ---- 3. encoder inputs ----------------------------------------------------------------


def encoder_scheduler(max_num_batched_tokens: int) -> Any:
    """``AsyncScheduler`` of the tiny PaliGemma, built under ``stand_in_processor``."""
    model = tiny_model_dir("tiny-paligemma", TINY_PALIGEMMA_CONFIG)
    with stand_in_processor():
        vllm_config = build_vllm_config(model, max_num_batched_tokens=max_num_batched_tokens)
        return build_scheduler(vllm_config, [full_attention_group()])


def attempt_stock_encoder_scheduler() -> str:
    """The real attempt without the stand-in: vLLM's own PaliGemma processor; its error line."""
    model = tiny_model_dir("tiny-paligemma", TINY_PALIGEMMA_CONFIG)
    try:
        build_scheduler(build_vllm_config(model), [full_attention_group()])
    except Exception as exc:  # the outcome recorded, whatever vLLM raises
        return error_line(exc)
    return "built"


@dataclass(frozen=True)
class EncoderEvent:
    """The encoder cache right after one scheduler call."""

    call: str  # "schedule" or "update_from_output"
    step: int  # the step scheduled, or the step whose output was processed
    num_scheduled_tokens: dict[str, int]  # of that step
    scheduled_encoder_inputs: dict[str, list[int]]  # SchedulerOutput.scheduled_encoder_inputs
    free_encoder_mm_hashes: list[str]  # SchedulerOutput.free_encoder_mm_hashes (evictions)
    num_computed_tokens: dict[str, int]  # live requests
    num_output_placeholders: dict[str, int]
    referrers: dict[str, list[str]]  # EncoderCacheManager.cached: mm hash -> requests holding it
    num_free_slots: int  # EncoderCacheManager.num_free_slots
    num_freeable_slots: int  # EncoderCacheManager.num_freeable_slots


def _encoder_event(sched: Any, call: str, step: int, out: Any) -> EncoderEvent:
    ecm = sched.encoder_cache_manager
    reqs = sched.requests
    return EncoderEvent(
        call=call, step=step, num_scheduled_tokens=dict(out.num_scheduled_tokens),
        scheduled_encoder_inputs={k: list(x) for k, x in out.scheduled_encoder_inputs.items()},
        free_encoder_mm_hashes=list(out.free_encoder_mm_hashes),
        num_computed_tokens={r: int(q.num_computed_tokens) for r, q in reqs.items()},
        num_output_placeholders={r: int(q.num_output_placeholders) for r, q in reqs.items()},
        referrers={h: sorted(ids) for h, ids in ecm.cached.items()},
        num_free_slots=int(ecm.num_free_slots), num_freeable_slots=int(ecm.num_freeable_slots))


def run_encoder_cache() -> tuple[int, int, list[EncoderEvent]]:
    """Two image requests through ``AsyncScheduler`` at depth 2, an encoder cache of one image.

    ``r0``: prompt 22, image ``img-A`` at 4..20, budget 14 tokens a step; ``r1``
    (prompt 24, image ``img-B`` at 2..18) arrives after step 0 is scheduled, while
    ``img-A`` fills the cache.  Returns (encoder cache size, encoder compute budget,
    the events).
    """
    sched = encoder_scheduler(max_num_batched_tokens=14)
    loop = PipelineLoop(sched)
    sched.add_request(new_request("r0", default_prompt("r0", 22), 2, 1.0, [image("img-A", 4)]))
    events: list[EncoderEvent] = []
    scheduled = delivered = 0
    while sched.has_requests() or loop.pending:
        if scheduled == 1 and "r1" not in sched.requests:  # once, after step 0 is scheduled
            sched.add_request(new_request("r1", default_prompt("r1", 24), 2, 2.0, [image("img-B", 2)]))
        if sched.has_requests():
            events.append(_encoder_event(sched, "schedule", scheduled, loop.schedule()))
            scheduled += 1
        if len(loop.pending) >= 2 or not sched.has_requests():
            events.append(_encoder_event(sched, "update_from_output", delivered, loop.deliver()))
            delivered += 1
    return int(sched.encoder_cache_manager.cache_size), int(sched.max_num_encoder_input_tokens), events


# ---- 6. Mamba groups beside attention ----------------------------------------------


def attempt_mamba_with_attention_block_size() -> str:
    """The first attempt of the "none" mode: the scheduler's block size left at attention's 16
    while the Mamba group's is 256; the error line (the LCM rule, ``KVCacheCoordinator.__init__``)."""
    try:
        run_mamba_hybrid("none", scheduler_block_size=BLOCK_SIZE)
    except Exception as exc:  # the outcome recorded, whatever vLLM raises
        return f"{error_line(exc)} in {_innermost(exc)}"
    return "built"


def _innermost(exc: BaseException) -> str:
    import traceback

    frame = traceback.extract_tb(exc.__traceback__)[-1]
    return f"{frame.filename.rsplit('/vllm/', 1)[-1]} {frame.name}"


def run_mamba_hybrid(mamba_cache_mode: str, scheduler_block_size: int | None = None,
                     ) -> tuple[list[str], list[dict[str, tuple[int, list[list[int]]]]]]:
    """A ``FullAttentionSpec`` group and a ``MambaSpec`` group (kv_cache_interface.py) through
    ``AsyncScheduler`` at depth 2: r0 (prompt 40) and r1 (prompt 20), 3 tokens each.

    ``mamba_cache_mode`` "none": one state block per request (Mamba block size 256, the
    scheduler's block size their LCM unless ``scheduler_block_size`` says otherwise), no
    prefix caching; "align": prefix caching, state blocks of 16 (``CacheConfig.mamba_cache_mode``).  Returns the single-type managers'
    class names and, after every ``schedule()``, each live request's
    (num_computed_tokens, block ids per group).
    """
    v = load_vllm()
    from vllm.v1.kv_cache_interface import MambaSpec

    align = mamba_cache_mode == "align"
    vllm_config = copy.deepcopy(configs_for(DriverConfig(enable_prefix_caching=align))[0])
    vllm_config.cache_config.mamba_cache_mode = mamba_cache_mode
    mamba_block = BLOCK_SIZE if align else 256
    mamba = MambaSpec(block_size=mamba_block, shapes=((2,), (2,)), dtypes=(v.torch.float32, v.torch.float32),
                      mamba_cache_mode=mamba_cache_mode)
    groups = [full_attention_group("attn"), v.KVCacheGroupSpec(["mamba"], mamba)]
    sched = build_scheduler(vllm_config, groups, block_size=scheduler_block_size or mamba_block)
    managers = [type(m).__name__ for m in sched.kv_cache_manager.coordinator.single_type_managers]
    for i, (rid, prompt_len) in enumerate((("r0", 40), ("r1", 20))):
        sched.add_request(new_request(rid, default_prompt(rid, prompt_len), 3, float(i + 1)))
    loop = PipelineLoop(sched)
    seen: list[dict[str, tuple[int, list[list[int]]]]] = []
    while sched.has_requests():
        loop.step()
        kv = sched.kv_cache_manager
        seen.append({rid: (int(req.num_computed_tokens), [list(g) for g in kv.get_block_ids(rid)])
                     for rid, req in sched.requests.items()})
    while loop.pending:
        loop.deliver()
    return managers, seen


# ---- 4. the KV offloading connector, kv_both -------------------------------------------


@dataclass(frozen=True)
class OffloadEvent:
    """What one ``schedule()`` handed the offloading connector's worker, and the pool after it."""

    step: int
    num_scheduled_tokens: dict[str, int]
    load_jobs: dict[int, str]  # OffloadingConnectorMetadata.load_jobs: job id -> request
    store_jobs: dict[int, tuple[str, int]]  # job id -> (request, GPU blocks stored)
    status: dict[str, tuple[str, int]]  # live request -> (RequestStatus name, num_computed_tokens)
    num_free_blocks: int
    deferred_frees: list[tuple[int, list[int]]]  # Scheduler.deferred_frees: (fence, block ids)


def offloading_scheduler(num_blocks: int) -> Any:
    """``AsyncScheduler`` whose connector is vLLM's ``OffloadingConnector`` (kv_both, a CPU tier
    of 1 MiB; offloading_connector.py), prefix caching on, ``num_blocks`` usable GPU blocks."""
    load_vllm()  # the CPU / offline environment before any vLLM import
    from vllm.config import KVTransferConfig

    transfer = KVTransferConfig(kv_connector="OffloadingConnector", kv_role="kv_both",
                                kv_connector_extra_config={"cpu_bytes_to_use": 1 << 20})
    vllm_config = build_vllm_config(model_dir(), prefix_caching=True, kv_transfer_config=transfer,
                                    num_blocks=num_blocks)
    return build_scheduler(vllm_config, [full_attention_group()], num_blocks=num_blocks)


def completing_worker(out: Any) -> Any:
    """The worker half: every job a step carries completes within that step
    (``OffloadingWorkerMetadata.completed_jobs``, offloading/common.py); an asynchronous
    load also reports its request in ``finished_recving`` (vllm/v1/outputs.py ``KVConnectorOutput``)."""
    load_vllm()  # the CPU / offline environment before any vLLM import
    from vllm.distributed.kv_transfer.kv_connector.v1.offloading.common import OffloadingWorkerMetadata
    from vllm.v1.outputs import KVConnectorOutput

    meta = out.kv_connector_metadata
    jobs = {job: 1 for job in [*meta.load_jobs, *meta.store_jobs]}
    loaded = {job.req_id for job in meta.load_jobs.values() if not job.sync}
    return KVConnectorOutput(finished_recving=loaded or None,
                             kv_connector_worker_meta=OffloadingWorkerMetadata(completed_jobs=jobs))


def _offload_event(sched: Any, step: int, out: Any) -> OffloadEvent:
    meta = out.kv_connector_metadata
    return OffloadEvent(
        step=step, num_scheduled_tokens=dict(out.num_scheduled_tokens),
        load_jobs={j: str(job.req_id) for j, job in meta.load_jobs.items()},
        store_jobs={j: (str(job.req_id), len(job.src_spec.block_ids)) for j, job in meta.store_jobs.items()},
        status={r: (q.status.name, int(q.num_computed_tokens)) for r, q in sched.requests.items()},
        num_free_blocks=int(sched.kv_cache_manager.block_pool.get_num_free_blocks()),
        deferred_frees=[(int(f), [b.block_id for b in blocks]) for f, blocks in sched.deferred_frees])


ABORT_STEP = 6  # run_offloading aborts B2 right after scheduling this step


def run_offloading(num_blocks: int = 12) -> tuple[bool, list[OffloadEvent]]:
    """Prompt A (48 tokens, 3 blocks) is stored to the CPU tier, evicted from the GPU pool by
    three 60-token requests (B2 aborted while step ``ABORT_STEP`` is in flight), then asked
    for again (``A2``, the same prompt): a CPU hit.
    Returns (``Scheduler.defer_block_free`` as vLLM set it, one event per ``schedule()``)."""
    sched = offloading_scheduler(num_blocks)
    loop = PipelineLoop(sched, kv_output=completing_worker)
    prompt_a = default_prompt("A", 48)
    arrivals: dict[int, list[tuple[str, list[int]]]] = {
        0: [("A", prompt_a)], 4: [(f"B{k}", default_prompt(f"B{k}", 60)) for k in range(3)], 12: [("A2", prompt_a)]}
    events: list[OffloadEvent] = []
    for step in range(20):
        for k, (rid, prompt) in enumerate(arrivals.get(step, [])):
            sched.add_request(new_request(rid, prompt, 2, step + k / 10))
        out = loop.step()
        if step == ABORT_STEP:  # between steps, with this step in flight: its blocks' free is deferred
            sched.finish_requests(["B2"], load_vllm().RequestStatus.FINISHED_ABORTED)
        events.append(_offload_event(sched, step, out))
    while loop.pending:
        loop.deliver()
    return bool(sched.defer_block_free), events
