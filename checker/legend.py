"""The tables' short names in vLLM's words: the one legend of every counter table.

``asyncspec check`` and ``replay`` (``checker/table.py``), the fuzz divergence
table (``statemachine_tests/core/report.py``) and the trace explorer
(``explorer/page.py``) print counters by letter (docs/spec.md, section 1); each
prints, with the table, the lines of this legend for the names it shows, so a
vLLM reviewer reads a trace without the docs.

>>> print(legend_text(["C", "N"]))
legend (vLLM v1 names):
  N = Request.num_tokens
  C = Request.num_computed_tokens
>>> SHORT_OF_FIELD["num_output_placeholders"]
'H'
"""
from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple


class Entry(NamedTuple):
    """One short name a table prints, the field it abbreviates, and vLLM's name for it."""

    short: str  # as a table prints it (a column head, a row label's tail, a key in a cell)
    field: str  # the spec's or an observation's field it abbreviates ("" when it is no field)
    vllm: str  # what vLLM 0.33.0 calls it (vllm/v1/...)


ENTRIES: tuple[Entry, ...] = (
    Entry("P", "num_prompt_tokens", "Request.num_prompt_tokens"),
    Entry("M", "max_tokens", "Request.max_tokens (SamplingParams.max_tokens)"),
    Entry("eos", "eos_position", "the output position whose sampled token is EOS (the model's, no vLLM field)"),
    Entry("status", "status", "Request.status; STOPPED, LENGTH, ABORTED, ERROR = RequestStatus.FINISHED_STOPPED, "
                              "_LENGTH_CAPPED, _ABORTED, _ERROR"),
    Entry("*", "", "after a status: Request.drop_stale_output, with stale tokens in flight"),
    Entry("N", "num_tokens", "Request.num_tokens"),
    Entry("O", "num_output_tokens", "Request.num_output_tokens"),
    Entry("C", "num_computed_tokens", "Request.num_computed_tokens"),
    Entry("H", "num_output_placeholders", "Request.num_output_placeholders"),
    Entry("F", "num_in_flight_tokens", "Request.num_in_flight_tokens"),
    Entry("X", "num_stale_output_tokens", "Request.num_stale_output_tokens"),
    Entry("D", "drop_stale_output", "Request.drop_stale_output"),
    Entry("L", "last_sched_seq", "Request.last_sched_seq"),
    Entry("chunk", "is_prefill_chunk", "Request.is_prefill_chunk"),
    Entry("blocks", "block_table", "the request's KV blocks, SingleTypeKVCacheManager.req_to_blocks "
                                   "(ids are vLLM's block_id - 1)"),
    Entry("tokens", "output_tokens", "Request.output_token_ids"),
    Entry("batch queue", "", "EngineCore.batch_queue, oldest first, one SchedulerOutput per [...]: "
                             "r0:3@1+1d = 3 tokens of r0 (num_scheduled_tokens) sampling output position 1, "
                             "with 1 draft (scheduled_spec_decode_tokens); r0:3 = a chunk that samples nothing; "
                             "∅ = an empty step"),
    Entry("free blocks", "", "BlockPool.free_block_queue, next allocated first"),
    Entry("waiting", "", "Scheduler.waiting, front first"),
    Entry("running", "", "Scheduler.running"),
    Entry("Q/R", "", "Scheduler.sched_step_seq / Scheduler.processed_step_seq"),
    Entry("parked", "", "Scheduler.deferred_frees (fence:blocks, freed once processed_step_seq >= fence)"),
)
"""Every short name, in the order a legend lists them."""

LEGEND_HEAD = "legend (vLLM v1 names):"
"""The first line of every legend (a test finds the legend by it)."""

VLLM_NAME: dict[str, str] = {e.short: e.vllm for e in ENTRIES}
"""Short name -> vLLM's name."""

SHORT_OF_FIELD: dict[str, str] = {e.field: e.short for e in ENTRIES if e.field and e.field != e.short}
"""A field a table abbreviates -> its short name (``num_computed_tokens`` -> ``C``)."""


def legend_entries(shorts: Iterable[str]) -> list[Entry]:
    """The entries of ``shorts`` that have one, in the legend's order (unknown names are left out)."""
    wanted = set(shorts)
    return [e for e in ENTRIES if e.short in wanted]


def legend_text(shorts: Iterable[str]) -> str:
    """The legend of a text table: a head line, then ``  N = Request.num_tokens``, one a line."""
    return "\n".join([LEGEND_HEAD, *(f"  {e.short} = {e.vllm}" for e in legend_entries(shorts))])
