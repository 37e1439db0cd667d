"""``asyncspec drift`` and ``explain-config``: how the spec stands to a vLLM release and its settings.

Listed by ``cli/main.py``; what a command needs beyond click is imported when it runs.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, cast

import click

from asyncspec.cli.common import EXIT_OK, EXIT_VIOLATION, out
from asyncspec.cli.contract import Choice, ContractCommand


@click.command(cls=ContractCommand)
@click.argument("other", type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True, help='Print {"base", "other", "items": [...]}.')
def drift(other: Path, as_json: bool) -> None:
    """Which vLLM functions the spec and drivers depend on changed in OTHER
    (a vLLM wheel, sdist or source folder) against the installed vLLM.
    Exit 0 nothing drifted, 1 drift found, 2 bad input."""
    from asyncspec.fidelity.drift_command import drift_main

    sys.exit(drift_main(other, as_json))


@click.command(name="explain-config", cls=ContractCommand)
@click.option("--async-scheduling", "flag", type=Choice(["auto", "on", "off"]), default="auto", show_default=True)
@click.option("--runner", type=Choice(["generate", "pooling"]), default="generate", show_default=True)
@click.option("--executor", type=Choice(["mp", "uni", "ray", "external_launcher", "custom"]),
              default="mp", show_default=True)
@click.option("--speculative-method", default=None, help="e.g. eagle3, ngram, ngram_gpu, draft_model, suffix, mtp")
@click.option("--disable-padded-drafter-batch", is_flag=True)
@click.option("--pipeline-parallel-size", "--pp", "pp", type=click.IntRange(min=1), default=1, show_default=True)
@click.option("--model-runner", type=Choice(["v1", "v2"]), default="v1", show_default=True)
@click.option("--platform", type=Choice(["cuda", "rocm", "cpu", "other"]), default="cuda", show_default=True)
@click.option("--rocm-deepep-dbo", is_flag=True, help="ROCm with DBO and the deepep_high_throughput all2all")
@click.option("--scheduler-cls", default=None)
@click.option("--json", "as_json", is_flag=True)
def explain_config(flag: str, runner: str, executor: str, speculative_method: str | None,
                   disable_padded_drafter_batch: bool, pp: int, model_runner: str, platform: str,
                   rocm_deepep_dbo: bool, scheduler_cls: str | None, as_json: bool) -> None:
    """Say whether vLLM 0.33.0 runs async scheduling for a setting, and which rule decided.

    Exit 0 with a decision; 1 when vLLM refuses the setting (an explicit
    --async-scheduling that a rule forbids).
    """
    from asyncspec.checker.schema import JSON_SCHEMA_VERSION
    from asyncspec.spec.enablement import RULES, AsyncSetting, decide

    setting = AsyncSetting(
        async_scheduling={"auto": None, "on": True, "off": False}[flag], runner=cast(Any, runner),
        executor=cast(Any, executor), speculative_method=speculative_method,
        disable_padded_drafter_batch=disable_padded_drafter_batch, pipeline_parallel_size=pp,
        v2_model_runner=model_runner == "v2", rocm_deepep_ht_dbo=rocm_deepep_dbo,
        platform=cast(Any, platform), custom_scheduler_cls=scheduler_cls)
    d = decide(setting)
    if as_json:
        print(json.dumps({"schema_version": JSON_SCHEMA_VERSION, "async_scheduling": d.enabled, "rule": d.rule,
                          "reason": RULES[d.rule],
                          "error": d.error, "batch_queue_depth": d.batch_queue_depth,
                          "scheduler_class": d.scheduler_class}, indent=2))
    elif d.error is not None:
        out().print(f"vLLM refuses this setting: {d.error} (rule {d.rule})", markup=False)
    else:
        out().print(f"async scheduling: {'ON' if d.enabled else 'OFF'} — rule {d.rule}: {RULES[d.rule]}",
                    markup=False)
        out().print(f"scheduler: {d.scheduler_class}; batch queue depth (max_concurrent_batches): "
                    f"{d.batch_queue_depth}", markup=False)
    sys.exit(EXIT_VIOLATION if d.error is not None else EXIT_OK)
