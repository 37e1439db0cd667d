"""One-line mutants of SGLang 0.5.23's overlap path, applied in the driver's process only.

Each mutant names one function and replaces exactly one line of its source (the text must
occur exactly once, so a moved SGLang fails loudly instead of testing nothing).  The mutated
function is compiled in its own module's globals and rebound wherever SGLang holds it
(the class, the defining module, and modules that imported the name).  Nothing is written
to disk.  The kill table is in docs/fuzzing.md ("SGLang mutants").
"""
from __future__ import annotations

import importlib
import inspect
import sys
import textwrap
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Mutant:
    """``old`` → ``new`` inside ``module.qualname`` (``Class.method`` or a function)."""

    name: str
    module: str
    qualname: str
    old: str
    new: str
    why: str


M = "sglang.srt.managers."
MUTANTS: tuple[Mutant, ...] = (
    Mutant("future_map_rows_reversed", M + "overlap_utils", "resolve_forward_inputs",
           "batch.input_ids = future_map.output_tokens_buf[batch.req_pool_indices]",
           "batch.input_ids = future_map.output_tokens_buf[batch.req_pool_indices.flip(0)]",
           "FutureMap indexing: a decode row is fed another row's last token"),
    Mutant("future_map_stash_shifted", M + "overlap_utils", "FutureMap.stash",
           "self.output_tokens_buf[indices] = payload.bonus_tokens.to(",
           "self.output_tokens_buf[indices + 1] = payload.bonus_tokens.to(",
           "FutureMap indexing: a sampled token is stashed in the next pool row"),
    Mutant("relay_skipped", M + "scheduler", "Scheduler._relay_forward_payload",
           "elif batch_result.has_sampled_token_ids:", "elif False:",
           "FutureMap: the sampled tokens are never relayed; the next decode reads an old token"),
    Mutant("inflight_guard_off", M + "scheduler", "Scheduler._reqs_finishing_inflight",
           "if not self.enable_skip_finishing_decode or not self.result_queue:", "if True:",
           "the in-flight max-new-tokens guard never excludes a request"),
    Mutant("finishes_by_length_late", M + "schedule_batch", "Req.next_output_finishes_by_length",
           "return len(self.output_ids) + 1 >= self.sampling_params.max_new_tokens",
           "return len(self.output_ids) + 0 >= self.sampling_params.max_new_tokens",
           "the guard's length test is one token late"),
    Mutant("retracted_rows_processed", M + "scheduler_components.batch_result_processor",
           "SchedulerBatchResultProcessor.process_batch_result_decode",
           "req.finished() or req.is_retracted\n", "req.finished()\n",
           "the in-flight row of a retracted request is delivered, not skipped"),
    Mutant("finished_rows_processed", M + "scheduler_components.batch_result_processor",
           "SchedulerBatchResultProcessor.process_batch_result_decode",
           "req.finished() or req.is_retracted\n", "req.is_retracted\n",
           "the row behind a finished request (EOS waste) is delivered, not skipped"),
    Mutant("retraction_keeps_kv", M + "schedule_batch", "release_req",
           "release_kv_cache(req, tree_cache, checkpoint=False)", "pass",
           "retraction does not free the request's KV"),
    Mutant("release_leaks_last_slot", "sglang.srt.mem_cache.common", "release_kv_cache",
           "tree_cache.free_kv_row(req.kv, [(req.kv.cache_protected_len, owned_kv_len)])",
           "tree_cache.free_kv_row(req.kv, [(req.kv.cache_protected_len, owned_kv_len - 1)])",
           "a released request's (finished or retracted) last KV slot is never freed"),
    Mutant("retracted_flag_kept", M + "schedule_batch", "ScheduleBatch.prepare_for_extend",
           "req.is_retracted = False", "pass",
           "a re-prefilled request stays marked retracted: its rows are skipped"),
)

BY_NAME = {m.name: m for m in MUTANTS}


def _owner_and_function(m: Mutant) -> tuple[Any, str, Any]:
    module = importlib.import_module(m.module)
    owner: Any = module
    parts = m.qualname.split(".")
    for part in parts[:-1]:
        owner = getattr(owner, part)
    function = inspect.unwrap(getattr(owner, parts[-1]))
    return owner, parts[-1], function


def apply(name: str) -> None:
    """Apply mutant ``name``; ``ValueError`` (one line) if unknown or if SGLang moved."""
    if name not in BY_NAME:
        raise ValueError(f"unknown mutant {name!r} (known: {', '.join(BY_NAME)})")
    m = BY_NAME[name]
    owner, attr, function = _owner_and_function(m)
    source = textwrap.dedent(inspect.getsource(function))
    if source.count(m.old) != 1:
        raise ValueError(f"mutant {name}: the line to mutate occurs {source.count(m.old)} times in {m.qualname}")
    namespace: dict[str, Any] = {}
    exec(compile(source.replace(m.old, m.new), f"<mutant {name}>", "exec"), function.__globals__, namespace)
    mutated = namespace[function.__name__]
    wrapped = getattr(owner, attr)
    if wrapped is not function:
        raise ValueError(f"mutant {name}: {m.qualname} is decorated; the driver mutates plain functions only")
    setattr(owner, attr, mutated)
    for module in list(sys.modules.values()):
        if module is not None and getattr(module, "__name__", "").startswith("sglang") \
                and getattr(module, attr, None) is wrapped and module is not owner:
            setattr(module, attr, mutated)

