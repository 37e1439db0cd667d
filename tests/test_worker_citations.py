"""The worker half is cited like the scheduler half: every action and property of spec/worker*.py
names the vLLM function it models (@models) or the vllm-neuron one (@models_static, a file at a
commit, listed apart by drift); the rest are the model's own bookkeeping, each with its reason."""
from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

from asyncspec.fidelity.cited import property_names, spec_citations, static_references
from asyncspec.fidelity.fingerprint import locate
from asyncspec.fidelity.source import SourceError, VllmSource
from asyncspec.spec.cites import CITATIONS, NEURON_RUNNER, STATIC_REFERENCES, models_static
from asyncspec.spec.worker import WORKER_ALWAYS

ROOT = Path(__file__).resolve().parent.parent
MODULES = ("worker", "worker_v1", "worker_v2", "worker_neuron")

NOT_MODELLING: dict[str, str] = {
    "worker.prompt_token": "names a token (the model's token identity)",
    "worker.token_name": "text of a violation message",
    "worker.Row.fresh": "a row's position arithmetic (starts at 0: new or resumed)",
    "worker.Row.needs": "a row's position arithmetic",
    "worker.Row.expected": "a row's position arithmetic (the token W1 requires)",
    "worker.WDraft.of": "the draft: the model's mutable working copy",
    "worker.WDraft.error": "the draft: records a property's first violation (ghost)",
    "worker.WDraft.freeze": "the draft: the model's mutable working copy",
    "worker.check_feed": "W1's per-row check (ghost); the property w1_feed carries the citation",
    "worker.step_events": "witnesses (ghost)",
    "worker.finish_step": "the efficiency check and the sampled-token ghost after a step",
    "worker.forget_dropped_samples": "the sampled-token ghost of W1's cross-check",
    "worker.worker_properties": "which properties apply to a strategy",
    "worker_neuron._is_sample": "a token predicate (kept sample, not padding or discarded)",
    "worker_neuron.output_index": "where a step's output record is in the model's queue",
}
"""Functions of spec/worker*.py that model no vLLM or vllm-neuron function, with the reason."""


def _functions(module: str) -> list[str]:
    """``module.qualname`` of every function and method defined in ``spec/<module>.py``."""
    tree = ast.parse((ROOT / "spec" / f"{module}.py").read_text(encoding="utf-8"))
    out = []
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            out.append(f"{module}.{node.name}")
        elif isinstance(node, ast.ClassDef):
            out += [f"{module}.{node.name}.{m.name}" for m in node.body if isinstance(m, ast.FunctionDef)]
    return out


def _cited() -> set[str]:
    for module in MODULES:
        importlib.import_module(f"asyncspec.spec.{module}")
    return {name for name in (*CITATIONS, *STATIC_REFERENCES) if name.split(".")[0] in MODULES}


def test_every_worker_function_is_cited_or_says_why_not() -> None:
    functions = {f for m in MODULES for f in _functions(m)}
    cited = _cited()
    assert sorted(functions - cited - set(NOT_MODELLING)) == []
    assert sorted(set(NOT_MODELLING) & cited) == [], "an exemption for a cited function"
    assert sorted(set(NOT_MODELLING) - functions) == [], "an exemption for a function that is gone"
    assert len(functions) >= 55 and len(cited) >= 40


def test_every_worker_property_and_strategy_action_is_cited() -> None:
    _cited()
    names = property_names()
    for w in WORKER_ALWAYS:
        spec = next(s for s, n in names.items() if n == w.name)
        assert spec in CITATIONS or spec in STATIC_REFERENCES, w.name
    for action in ("worker_v1.execute", "worker_v2.execute", "worker_neuron.execute_empty_step"):
        assert action in CITATIONS, action
    neuron_actions = ("execute", "execute_empty_step", "output_thread_step", "_swap", "_guard", "_sample")
    assert all(f"worker_neuron.{a}" in STATIC_REFERENCES for a in neuron_actions)


def test_drift_sees_the_worker_half() -> None:
    deps = spec_citations()
    assert "property W1_feed_is_last_sampled" in deps["vllm.v1.worker.gpu_model_runner.GPUModelRunner._prepare_input_ids"]
    assert "spec worker_v2._fed" in deps["vllm.v1.worker.gpu.input_batch.combine_sampled_and_draft_tokens"]
    assert not [t for t in deps if not t.startswith("vllm.")]  # static references are not dependents


def test_the_worker_citations_exist_in_the_installed_vllm() -> None:
    try:
        installed = VllmSource.installed()
    except SourceError as exc:
        pytest.skip(str(exc))
    _cited()
    targets = {t for c in CITATIONS.values() if c.spec.split(".")[0] in MODULES for t in c.targets}
    assert len(targets) >= 20 and sorted(t for t in targets if locate(installed, t) is None) == []


def test_static_references_name_the_file_and_commit_of_the_neuron_findings() -> None:
    findings = (ROOT / "docs" / "findings_neuron.md").read_text(encoding="utf-8")
    refs = static_references()
    assert refs and {r.source for r in refs} == {NEURON_RUNNER}
    assert NEURON_RUNNER.file in findings and NEURON_RUNNER.commit in findings
    assert all(r.spec.startswith("worker") and r.symbols for r in refs)


def test_models_static_needs_a_symbol() -> None:
    with pytest.raises(ValueError, match="qualified names"):
        models_static(NEURON_RUNNER)
