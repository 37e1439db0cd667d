"""Logprobs on the engine target: what vLLM returns for a request with ``logprobs`` and ``prompt_logprobs``,
held to the oracle model.

A request of a case with ``EngineRequest.logprobs`` k > 0 is sent with ``SamplingParams(logprobs=k,
prompt_logprobs=k)``.  Prompt logprobs make vLLM skip its prefix cache for the request
(``SamplingParams.__post_init__`` sets ``skip_reading_prefix_cache``; the spec follows through
``Workload.skip_reading``), and its runner assembles them chunk by chunk into one tensor it returns with
the step that completes the prompt (``GPUModelRunner._get_prompt_logprobs_dict``), which the scheduler puts
in that step's ``EngineCoreOutput.new_prompt_logprobs_tensors`` (``Scheduler.update_from_output``).

The oracle model's logits are one-hot at the token it predicts (``fake_model.compute_logits``), so every
row is known exactly:

* **prompt row p** (p = 0 .. P - 2): the target is prompt token p + 1, ranked 1 if it is the token the
  model predicts after position p and lower otherwise; the best of the top k is that prediction
  (``oracle_model.output_token`` over the prompt's hidden values: no images, no period, no penalty);
* **a sampled token**: it is its own target, ranked 1, and the best of the top k (greedy sampling, the
  default ``raw_logprobs`` mode, no penalty);
* **once, with the first token**: the prompt's P - 1 rows come with the request's first output, never
  again (a preempted request recomputes its prompt without a hit, into the same tensor).

The first row that breaks one of these is the request's ``logprobs_gap`` (``RequestObs``), a line the spec
side leaves empty, so it shows as a divergence.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from asyncspec.engine.vllm import oracle_model as om

LOGPROBS_COVERAGE = ("prompt_logprobs_delivered", "prompt_logprobs_chunked", "prompt_logprobs_after_preemption",
                     "sampled_logprobs_delivered")
"""Categories of the ``logprobs`` part: prompt logprobs delivered, for a prompt computed in more than one
chunk, for a request preempted before they came; outputs whose sampled tokens carried logprobs."""


def predictions(prompt: Sequence[int]) -> list[int]:
    """The token the oracle model predicts after each prompt position but the last."""
    hidden, out = om.START, []
    for position, token in enumerate(prompt[:-1]):
        hidden = om.next_hidden(hidden, token, position)
        out.append(om.output_token(hidden, position))
    return out


def _rows(logprobs: Any) -> tuple[list[list[int]], list[int]]:
    """(token ids per row, rank of each row's target) of a ``LogprobsTensors`` or ``LogprobsLists``."""
    ranks = getattr(logprobs, "selected_token_ranks", None)
    if ranks is None:
        ranks = logprobs.sampled_token_ranks
    ids = logprobs.logprob_token_ids
    as_list = (lambda x: x.tolist()) if hasattr(ids, "tolist") else list
    return [[int(t) for t in row] for row in as_list(ids)], [int(r) for r in as_list(ranks)]


def prompt_gap(prompt: Sequence[int], logprobs: Any) -> str:
    """The first prompt row that is not the oracle's (one line), or ""."""
    ids, ranks = _rows(logprobs)
    expected = predictions(prompt)
    if len(ids) != len(expected):
        return f"prompt logprobs have {len(ids)} rows, the prompt of {len(prompt)} tokens needs {len(expected)}"
    for p, (row, rank, predicted) in enumerate(zip(ids, ranks, expected)):
        target = prompt[p + 1]
        if row[0] != target or (rank == 1) != (target == predicted) or (len(row) > 1 and row[1] != predicted):
            return (f"prompt row {p}: target {row[0]} rank {rank}, top {row[1:2]}; the oracle: target {target}, "
                    f"predicted {predicted}")
    return ""


def sampled_gap(tokens: Sequence[int], logprobs: Any) -> str:
    """The first sampled token whose logprobs row is not its own at rank 1 (one line), or ""."""
    if logprobs is None:
        return f"{len(tokens)} sampled tokens came without logprobs"
    ids, ranks = _rows(logprobs)
    if len(ids) != len(tokens):
        return f"{len(tokens)} sampled tokens came with {len(ids)} logprobs rows"
    for j, (token, row, rank) in enumerate(zip(tokens, ids, ranks)):
        if row[0] != token or rank != 1 or (len(row) > 1 and row[1] != token):
            return f"sampled token {token} (output {j + 1} of the step): row {row[:2]} rank {rank}"
    return ""


@dataclass
class LogprobsCheck:
    """Per case: each logprobs request's prompt and what came back so far."""

    prompts: dict[int, tuple[int, ...]]  # request -> prompt, for requests with logprobs
    gaps: dict[int, str] = field(default_factory=dict)  # request -> its first gap
    outputs_seen: set[int] = field(default_factory=set)  # requests that have had an output with tokens
    prompt_delivered: set[int] = field(default_factory=set)
    coverage: dict[str, int] = field(default_factory=dict)  # the run's coverage counts (EngineRun sets them)

    def on_output(self, req: int, output: Any, prefill_chunks: int, preempted: bool) -> None:
        """One ``EngineCoreOutput`` of request ``req`` (``prefill_chunks``: steps its prompt took so far;
        ``preempted``: it has been preempted)."""
        if req not in self.prompts or req in self.gaps:
            return
        tokens = [int(t) for t in output.new_token_ids]
        prompt_logprobs = output.new_prompt_logprobs_tensors
        gap = ""
        if prompt_logprobs is not None:
            if req in self.prompt_delivered:
                gap = "prompt logprobs delivered a second time"
            elif req in self.outputs_seen:
                gap = "prompt logprobs came after the request's first output"
            else:
                gap = prompt_gap(self.prompts[req], prompt_logprobs)
                self.prompt_delivered.add(req)
                self._count(prefill_chunks, preempted)
        elif tokens and req not in self.outputs_seen:
            gap = "the first output came without the prompt logprobs"
        if tokens and not gap:
            gap = sampled_gap(tokens, output.new_logprobs)
            self.coverage["sampled_logprobs_delivered"] = self.coverage.get("sampled_logprobs_delivered", 0) + (not gap)
        if tokens:
            self.outputs_seen.add(req)
        if gap:
            self.gaps[req] = gap

    def _count(self, prefill_chunks: int, preempted: bool) -> None:
        for name, n in (("prompt_logprobs_delivered", 1), ("prompt_logprobs_chunked", int(prefill_chunks > 1)),
                        ("prompt_logprobs_after_preemption", int(preempted))):
            self.coverage[name] = self.coverage.get(name, 0) + n
