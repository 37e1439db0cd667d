"""Finding V3: vLLM 0.33.0's ``AsyncModelRunnerOutput`` contract vs vllm-neuron's output class.

vllm-neuron's ``AsyncNeuronModelRunnerOutput`` (``vllm_neuron/vllm/worker/
neuron_model_runner.py`` at commit 9fc042e) subclasses vLLM's
``AsyncModelRunnerOutput`` and defines ``get_output`` only.  These tests pin
what vLLM 0.33.0 demands of such a subclass (``docs/findings_vllm.md``, V3):
they fail if vLLM drops the abstract method or stops calling it.  The plugin
itself cannot be installed here, so the stand-in below has the same *interface*
(a subclass with ``get_output`` and nothing else), none of its code.
"""
from __future__ import annotations

import inspect

import pytest

from tests.vllm_guard import require_pinned_vllm

require_pinned_vllm()

from vllm.v1.executor import multiproc_executor  # noqa: E402
from vllm.v1.outputs import AsyncModelRunnerOutput, ModelRunnerOutput  # noqa: E402


class GetOutputOnly(AsyncModelRunnerOutput):
    """The interface vllm-neuron's output class implements: ``get_output`` alone."""

    def get_output(self) -> ModelRunnerOutput:
        raise NotImplementedError


def test_get_kv_connector_output_is_abstract_in_vllm_0_33() -> None:
    assert AsyncModelRunnerOutput.__abstractmethods__ == frozenset(
        {"get_output", "get_kv_connector_output"})


def test_a_subclass_with_get_output_only_cannot_be_constructed() -> None:
    # What sample_tokens() meets on its first non-empty async step.
    with pytest.raises(TypeError, match="abstract method.*get_kv_connector_output"):
        GetOutputOnly()  # type: ignore[abstract]  # the point of the test


def test_multiproc_output_thread_calls_it_when_get_output_fails() -> None:
    # The caller: WorkerProc.enqueue_output salvages the KV connector output of a
    # failed get_output() (async output thread, multiproc executor).
    source = inspect.getsource(multiproc_executor.WorkerProc.enqueue_output)
    get_output_at = source.index(".get_output()")
    except_at = source.index("except Exception", get_output_at)
    assert source.index(".get_kv_connector_output()", except_at) > except_at
