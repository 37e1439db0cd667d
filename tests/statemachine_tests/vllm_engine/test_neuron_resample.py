"""Finding N1 (``docs/findings_neuron.md``) on vLLM's own engine: a recompute chunk's sample.

The worker model's Neuron trace (``tests/test_worker_drop_mode.py``): one request
(prompt 2, ``max_tokens`` 4), token budget 3, async scheduling (queue of 2), two
outputs delivered, ``reset_prefix_cache`` preempts it, it resumes with a 3-token
recompute chunk that ends inside its old outputs, then a 1-token row at position 3.

vLLM 0.33.0's engine (the ``vllm-engine`` target: ``EngineCore``, ``AsyncScheduler``,
the V1 runner) is run on exactly that schedule twice, as shipped (in the test's own process)
and with the rule changed (in a fresh process):

* as shipped: the spec and vLLM agree.  vLLM's runner discards the chunk's sample
  (``GPUModelRunner._prepare_inputs``: ``discard_request_mask`` compares with
  ``num_tokens``, prompt *and* outputs);
* with vllm-neuron's rule put in that one line (``_get_partial_prefill_req_ids``
  compares with ``num_prompt_tokens`` only): the runner returns the chunk's sample,
  and vLLM's scheduler appends it as a new output (``Scheduler.update_from_output``,
  ``_update_request_with_output``: it expects the runner to return nothing for a
  request still prefilling).  The request's stream repeats its second token.

The second run uses the private import overlay (``engine/vllm/overlay.py``); the rule is
written here, from our reading of the plugin at 9fc042e, none of its code.
"""
from __future__ import annotations

import contextlib
import io
import json
import subprocess
import sys
from typing import Any
from unittest import mock

from tests.vllm_guard import require_pinned_vllm

require_pinned_vllm()

VLLM_RULE = "self.optimistic_seq_lens_cpu[:num_reqs].numpy() < num_tokens_np"
NEURON_RULE = ("self.optimistic_seq_lens_cpu[:num_reqs].numpy() < np.array("
               "[self.requests[r].num_prompt_tokens for r in self.input_batch.req_ids], dtype=np.int32)")

PROBE = """
import json, sys
from asyncspec.engine.vllm.vllm_mutants import RUNNER, VllmMutant
from asyncspec.engine.vllm.overlay import install
if sys.argv[1] != sys.argv[2]:
    install(VllmMutant("neuron_prompt_only_discard", RUNNER, "GPUModelRunner._prepare_inputs",
                       "vllm-neuron 9fc042e NeuronModelRunner._get_partial_prefill_req_ids",
                       sys.argv[1], sys.argv[2], "a sample is discarded only inside the prompt"))
from asyncspec.engine.vllm.engine_config import EngineDriverConfig
from asyncspec.statemachine_tests.vllm_engine import engine_case as ec
from asyncspec.statemachine_tests.vllm_engine.engine_campaign import EngineTargets
from asyncspec.statemachine_tests.vllm_engine.engine_run import EngineRun
config = EngineDriverConfig(depth=2, num_blocks=16, max_num_batched_tokens=3, max_num_seqs=2, max_model_len=32)
case = ec.EngineCase(config, (ec.EngineRequest((5, 9), 4),), stale_mode="drop", resets=1)
events = ([ec.EngineEvent(ec.ADD_REQUEST, 0)] + [ec.EngineEvent(ec.STEP)] * 3
          + [ec.EngineEvent(ec.RESET_PREFIX_CACHE)] + [ec.EngineEvent(ec.STEP)] * 8)
run = EngineRun(case, EngineTargets().get(config), {})
for event in events:
    if not run.apply(event):
        break
rows = [{"event": str(r.event), "scheduled": [list(s) for s in r.actual.scheduled],
         "delivered": [[req, list(toks)] for req, toks in r.actual.delivered],
         "fed": list(run.result.fed.get(r.index, ())), "differences": [d.field for d in r.differences]}
        for r in run.result.rows]
print("PROBE " + json.dumps({"stream": list(case.requests[0].stream), "rows": rows}))
"""


def _probe(rule: str) -> dict[str, Any]:
    """The case on vLLM's engine with ``rule`` as the runner's discard condition (a fresh process
    with the overlay; vLLM's own rule needs no overlay, so it runs in this process's vLLM)."""
    if rule == VLLM_RULE:
        out = io.StringIO()
        with contextlib.redirect_stdout(out), mock.patch.object(sys, "argv", ["-c", VLLM_RULE, rule]):
            exec(PROBE, {"__name__": "__probe__"})  # noqa: S102 - the probe above, as a fresh process runs it
        done = subprocess.CompletedProcess(PROBE, 0, out.getvalue(), "")
    else:
        done = subprocess.run([sys.executable, "-c", PROBE, VLLM_RULE, rule], capture_output=True, text=True,
                              timeout=600)
    line = next((x for x in done.stdout.splitlines() if x.startswith("PROBE ")), None)
    assert done.returncode == 0 and line is not None, (done.stdout[-2000:], done.stderr[-2000:])
    result: dict[str, Any] = json.loads(line.removeprefix("PROBE "))
    return result


def _after_reset(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return rows[[r["event"] for r in rows].index("reset_prefix_cache") + 1:]


def test_vllm_schedules_the_models_trace_and_discards_the_recompute_chunks_sample() -> None:
    probe = _probe(VLLM_RULE)
    rows = probe["rows"]
    assert not any(r["differences"] for r in rows)
    schedules = [r for r in _after_reset(rows) if r["event"] == "schedule" and r["scheduled"]]
    # (request, tokens, sampled position; 0 = a non-final chunk): the recompute chunk, then position 3
    assert schedules[0]["scheduled"] == [[0, 3, 0]] and schedules[0]["fed"] == ["r0@0:5,9,%d" % probe["stream"][0]]
    assert schedules[1]["scheduled"] == [[0, 1, 3]] and schedules[1]["fed"] == ["r0@3:%d" % probe["stream"][1]]
    delivered = [tok for r in rows for _, toks in r["delivered"] for tok in toks]
    assert delivered == probe["stream"]


def test_with_neurons_rule_the_recompute_chunks_sample_becomes_an_extra_output() -> None:
    probe = _probe(NEURON_RULE)
    rows = _after_reset(probe["rows"])
    first = next(r for r in rows if r["differences"])
    assert first["event"] == "deliver"
    assert {"delivered", "r0.num_output_tokens"} <= set(first["differences"])
    assert first["delivered"] == [[0, [probe["stream"][1]]]]  # r0#2 again, after r0#1 and r0#2
