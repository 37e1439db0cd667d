"""GPU check of the ``vllm-engine`` target and of vLLM end to end, in under 5 minutes.

On a CUDA machine with vLLM 0.33.0's CUDA build: ``python bench/gpu_engine_fuzz.py``.

1. The ``vllm-engine`` target on the device: EngineCore over vLLM's own
   ``GPUModelRunner`` with real CUDA streams, events, the async output copy and
   the real slot-mapping kernel (no process stubs; only the KV-spec stubs and
   the oracle model), a fixed campaign at depths 1, 2 and 3 against the spec;
   then a third as many cases of the ``spec-decode`` profile (``ngram_gpu``:
   the real pinned staging buffers and greedy rejection-sampling kernel,
   which the CPU run stands in for; docs/vllm-engine.md).
2. vLLM's ``LLM`` end to end with a tiny random-weight Llama (dummy weights, a
   local config, token-id prompts, ``VLLM_BATCH_INVARIANT=1``): the greedy
   token streams with async scheduling on and off must be identical.
3. The live monitor (``docs/monitor.md``): the same ``LLM`` run with
   ``scheduler_cls="asyncspec.monitor.MonitoredAsyncScheduler"`` (engine core
   in-process, ``VLLM_ENABLE_V1_MULTIPROCESSING=0``, so that its counters can be
   read): its streams must equal part 2's async ones, with no divergence; its
   overhead ratio to the scheduler's own time is printed, in full checking and
   with ``ASYNCSPEC_MONITOR_CHECK_EVERY=64``.

``--device cpu`` runs part 1 on the CPU (what the test suite runs) and, for
part 3, the monitor on vLLM's CPU engine (``monitor/selftest.py``, the same
checks: identical outputs, no divergence, the overhead ratio); it skips part 2
and the ``LLM`` of part 3, which need vLLM's compiled ops.  It prints its figures and one
summary line; exit 0 all clean, 1 a divergence or a stream mismatch, 2 the
device or vLLM build is not there.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import replace
from typing import Any


def _device_problem(device: str) -> str | None:
    if device == "cpu":
        return None
    try:
        import torch
    except ImportError:
        return "torch is not installed"
    if not torch.cuda.is_available():
        return "no CUDA device (run with --device cpu for the CPU part)"
    try:
        import vllm._C  # noqa: F401  (the CUDA build's compiled ops)
    except ImportError as exc:
        return f"vLLM's CUDA build is not installed ({exc})"
    return None


def engine_part(device: str, examples: int, seed: int) -> dict[str, Any]:
    """Part 1: the fixed campaign on ``device`` (depths 1, 2, 3), then speculative decoding."""
    from asyncspec.statemachine_tests.vllm_engine.engine_campaign import run_fixed
    from asyncspec.statemachine_tests.vllm_engine.engine_profile import (
        DEFAULT_ENGINE_PROFILE, SPEC_DECODE_ENGINE_PROFILE,
    )

    t0 = time.perf_counter()
    summary = run_fixed(examples, seed, (1, 2, 3), replace(DEFAULT_ENGINE_PROFILE, device=device))
    spec = SPEC_DECODE_ENGINE_PROFILE
    drafts = run_fixed(max(1, examples // 3), seed, spec.depths, replace(spec, device=device))
    summary["spec_decode"] = {k: drafts[k] for k in ("examples", "divergences", "first_divergence", "depths")}
    summary["spec_decode"]["coverage"] = {k: v for k, v in drafts["coverage"].items() if "draft" in k or "spec" in k}
    summary["divergences"] += drafts["divergences"]
    summary["seconds"] = round(time.perf_counter() - t0, 1)
    return summary


def llm_part(num_prompts: int, max_tokens: int) -> dict[str, Any]:
    """Part 2: async and sync greedy streams of vLLM's ``LLM`` with dummy weights (CUDA only)."""
    os.environ["VLLM_BATCH_INVARIANT"] = "1"
    from vllm import LLM, SamplingParams

    from asyncspec.engine.vllm.vllm_config import model_dir

    prompts = [{"prompt_token_ids": [3 + (7 * i + 13 * j) % 900 for j in range(5 + i % 23)]}
               for i in range(num_prompts)]
    params = SamplingParams(temperature=0.0, max_tokens=max_tokens, ignore_eos=True)
    streams: dict[bool, list[list[int]]] = {}
    seconds: dict[bool, float] = {}
    for async_scheduling in (False, True):
        llm = LLM(model=model_dir(), load_format="dummy", skip_tokenizer_init=True, dtype="float32",
                  enforce_eager=True, async_scheduling=async_scheduling, gpu_memory_utilization=0.3,
                  max_model_len=256, seed=0)
        t0 = time.perf_counter()
        outputs = llm.generate(prompts, params, use_tqdm=False)
        seconds[async_scheduling] = time.perf_counter() - t0
        streams[async_scheduling] = [list(o.outputs[0].token_ids) for o in outputs]
        del llm
    mismatched = sum(a != b for a, b in zip(streams[False], streams[True]))
    return {"prompts": num_prompts, "max_tokens": max_tokens, "mismatched_streams": mismatched,
            "sync_seconds": round(seconds[False], 2), "async_seconds": round(seconds[True], 2)}


def _llm_streams(prompts: list[Any], params: Any, **kwargs: Any) -> tuple[list[list[int]], Any]:
    """Greedy streams of one ``LLM`` (async scheduling on) and its in-process scheduler."""
    from vllm import LLM

    from asyncspec.engine.vllm.vllm_config import model_dir

    llm = LLM(model=model_dir(), load_format="dummy", skip_tokenizer_init=True, dtype="float32",
              enforce_eager=True, async_scheduling=True, gpu_memory_utilization=0.3, max_model_len=256,
              seed=0, **kwargs)
    outputs = llm.generate(prompts, params, use_tqdm=False)
    client: Any = llm.llm_engine.engine_core  # InprocClient (no multiprocessing) -> its EngineCore
    return [list(o.outputs[0].token_ids) for o in outputs], client.engine_core.scheduler


def monitor_part(num_prompts: int, max_tokens: int) -> dict[str, Any]:
    """Part 3 on CUDA: ``LLM`` with the monitor as ``scheduler_cls``, against the plain async run."""
    os.environ["VLLM_BATCH_INVARIANT"] = "1"
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    from vllm import SamplingParams

    prompts = [{"prompt_token_ids": [3 + (7 * i + 13 * j) % 900 for j in range(5 + i % 23)]}
               for i in range(num_prompts)]
    params = SamplingParams(temperature=0.0, max_tokens=max_tokens, ignore_eos=True)
    plain, _ = _llm_streams(prompts, params)
    report: dict[str, Any] = {"prompts": num_prompts}
    for every in ("1", "64"):
        os.environ["ASYNCSPEC_MONITOR_CHECK_EVERY"] = every
        streams, scheduler = _llm_streams(prompts, params,
                                          scheduler_cls="asyncspec.monitor.MonitoredAsyncScheduler")
        stats = scheduler.monitor.stats
        report[f"check_every_{every}"] = {
            "mismatched_streams": sum(a != b for a, b in zip(plain, streams)), "divergences": stats.divergences,
            "checked_steps": stats.checked_steps, "overhead_ratio": round(stats.overhead, 3),
            "summary": stats.summary()}
    return report


def monitor_cpu_part() -> dict[str, Any]:
    """Part 3 on the CPU: the monitor on vLLM's CPU engine (``monitor/selftest.py``)."""
    from asyncspec.monitor.selftest import run

    report: dict[str, Any] = {}
    for every in ("1", "64"):
        os.environ["ASYNCSPEC_MONITOR_CHECK_EVERY"] = every
        monitored, plain = run(2, seed=0, monitored=True), run(2, seed=0, monitored=False)
        report[f"check_every_{every}"] = {
            "mismatched_streams": int(monitored.outputs != plain.outputs),
            "divergences": monitored.stats.divergences, "checked_steps": monitored.stats.checked_steps,
            "overhead_ratio": round(monitored.stats.overhead, 3), "summary": monitored.stats.summary()}
    return report


def _monitor_ok(report: dict[str, Any]) -> bool:
    return all(r["mismatched_streams"] == 0 and r["divergences"] == 0 and r["checked_steps"] > 0
               for k, r in report.items() if k.startswith("check_every_"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--examples", type=int, default=300)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--prompts", type=int, default=64)
    parser.add_argument("--max-tokens", type=int, default=32)
    args = parser.parse_args(argv)
    os.environ["VLLM_TARGET_DEVICE"] = args.device
    problem = _device_problem(args.device)
    if problem:
        print(f"gpu_engine_fuzz: {problem}", file=sys.stderr)
        return 2
    report: dict[str, Any] = {"device": args.device, "engine": engine_part(args.device, args.examples, args.seed)}
    if args.device == "cuda":
        report["llm"] = llm_part(args.prompts, args.max_tokens)
        report["monitor"] = monitor_part(args.prompts, args.max_tokens)
    else:
        report["monitor"] = monitor_cpu_part()
    print(json.dumps(report, indent=1))
    engine = report["engine"]
    ok = engine["divergences"] == 0 and report.get("llm", {}).get("mismatched_streams", 0) == 0 \
        and _monitor_ok(report["monitor"])
    print(f"gpu_engine_fuzz on {args.device}: {engine['examples']} cases at depths {engine['depths']} "
          f"+ {engine['spec_decode']['examples']} with n-gram drafts, "
          f"{engine['divergences']} divergences (explained: {engine['explained']}), {engine['seconds']} s"
          + (f"; LLM async vs sync: {report['llm']['mismatched_streams']} of {args.prompts} streams differ"
             if "llm" in report else "")
          + f"; monitor: overhead {report['monitor']['check_every_1']['overhead_ratio']} (every step), "
            f"{report['monitor']['check_every_64']['overhead_ratio']} (every 64th)"
          + (" -> OK" if ok else " -> FAIL"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
