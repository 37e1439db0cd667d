"""The async-scheduling enablement decision (spec/enablement.py) and explain-config."""
from __future__ import annotations

import doctest

import pytest

from asyncspec.spec import enablement
from asyncspec.spec.enablement import RULES, AsyncSetting, decide
from tests.conftest import cli_json

CASES = [
    (AsyncSetting(), True, "auto-on", 2),
    (AsyncSetting(async_scheduling=False), False, "explicit-off", 1),
    (AsyncSetting(async_scheduling=True), True, "explicit-on", 2),
    (AsyncSetting(runner="pooling"), False, "pooling-model", 1),
    (AsyncSetting(executor="custom"), False, "executor-unsupported", 1),
    (AsyncSetting(rocm_deepep_ht_dbo=True, platform="rocm"), False, "rocm-deepep-dbo", 1),
    (AsyncSetting(speculative_method="ngram"), False, "v1-runner-incompatible", 1),
    (AsyncSetting(speculative_method="suffix"), False, "v1-runner-incompatible", 1),
    (AsyncSetting(speculative_method="eagle3"), True, "auto-on", 2),
    (AsyncSetting(speculative_method="ngram_gpu"), True, "auto-on", 2),
    (AsyncSetting(speculative_method="deepseek_mtp"), True, "auto-on", 2),
    (AsyncSetting(speculative_method="eagle", disable_padded_drafter_batch=True), False,
     "v1-runner-incompatible", 1),
    (AsyncSetting(pipeline_parallel_size=2), False, "v1-runner-incompatible", 2),
    (AsyncSetting(pipeline_parallel_size=2, v2_model_runner=True), True, "auto-on", 3),
    (AsyncSetting(speculative_method="ngram", v2_model_runner=True), True, "auto-on", 2),
    (AsyncSetting(platform="cpu"), False, "platform-cpu", 1),
    (AsyncSetting(async_scheduling=True, platform="cpu"), False, "platform-cpu", 1),
]


def test_doctests() -> None:
    assert doctest.testmod(enablement).failed == 0


@pytest.mark.parametrize("setting, enabled, rule, depth", CASES)
def test_decision(setting: AsyncSetting, enabled: bool, rule: str, depth: int) -> None:
    d = decide(setting)
    assert (d.enabled, d.rule, d.batch_queue_depth) == (enabled, rule, depth)
    assert d.error is None
    assert d.scheduler_class == ("AsyncScheduler" if enabled else "Scheduler")


def test_every_rule_is_reachable() -> None:
    assert {rule for _, _, rule, _ in CASES} == set(RULES)


@pytest.mark.parametrize("setting", [
    AsyncSetting(async_scheduling=True, speculative_method="ngram"),
    AsyncSetting(async_scheduling=True, pipeline_parallel_size=2),
    AsyncSetting(async_scheduling=True, executor="custom"),
    AsyncSetting(async_scheduling=True, rocm_deepep_ht_dbo=True),
])
def test_explicit_on_with_an_incompatibility_is_refused(setting: AsyncSetting) -> None:
    d = decide(setting)
    assert d.error is not None and not d.enabled


def test_explain_config_cli() -> None:
    code, data = cli_json("explain-config", "--speculative-method", "ngram")
    assert code == 0 and data["async_scheduling"] is False and data["rule"] == "v1-runner-incompatible"
    code, data = cli_json("explain-config", "--async-scheduling", "on", "--pp", "2")
    assert code == 1 and data["error"]
    code, data = cli_json("explain-config", "--pp", "2", "--model-runner", "v2")
    assert code == 0 and data["batch_queue_depth"] == 3
