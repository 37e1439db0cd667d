"""The scheduler driver on older vLLM releases, each in its own venv (slow tier).

A venv per release, made with ``python3 -m venv DIR && PYTHON=DIR/bin/python bash
.ci/install-vllm VERSION`` and the project installed editable (``pip install -e .
--no-deps`` plus its dependencies), under ``$ASYNCSPEC_VLLM_VENVS`` (default
``/root/venvs``) as ``vllm-VERSION``.  A release whose venv is absent is skipped,
with the reason.  In the venv the probe runs, the driver serves two requests to
their end at batch-queue depth 2, and a config that needs a capability the
release lacks is refused with ``MissingCapability`` before anything is built.
The engine core driver (V1 runner, depths 1 and 2, a structured request; depth 3
where the release has ``AsyncScheduler.decode_stagger``) runs in the same venvs.
"""
from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

VENVS = Path(os.environ.get("ASYNCSPEC_VLLM_VENVS", "/root/venvs"))

SCRIPT = r"""
import json
from asyncspec.engine.vllm import surfaces
from asyncspec.engine.vllm.capabilities import MissingCapability
from asyncspec.engine.vllm.scheduler_driver import DriverConfig, VllmDriver
from asyncspec.engine.vllm.vllm_identity import driven_vllm

caps = surfaces.installed_capabilities()
drv = VllmDriver(DriverConfig(num_blocks=31))
drv.add_request("a", prompt_len=20, max_tokens=3)
drv.add_request("b", prompt_len=5, max_tokens=2)
drv.add_request("g", prompt_len=6, max_tokens=2, structured_output=True)
queue, tokens, fills = [], {}, 0
for _ in range(40):
    if drv.has_requests() and len(queue) < 2:
        step = drv.schedule()
        if step.num_scheduled_tokens:
            fills += len(drv.grammar_bitmask(step))
            queue.append(step)
            continue
    if not queue:
        break
    step = queue.pop(0)
    sampled = {rid: [7] for rid in step.num_scheduled_tokens if not step.is_prefill_chunk[rid]}
    for rid, new in drv.deliver(step, sampled).new_token_ids.items():
        tokens[rid] = tokens.get(rid, 0) + len(new)
refused = {}
for name, cfg in [("adaptive", DriverConfig(long_prefill_token_threshold=8, long_prefill_adaptive=True)),
                  ("mrv2", DriverConfig(mrv2_pp=True)), ("connector", DriverConfig(kv_connector=True))]:
    try:
        VllmDriver(cfg)
    except MissingCapability as exc:
        refused[name] = [exc.capability, exc.reason]
print("RESULT " + json.dumps({"vllm": driven_vllm().as_json(), "present": caps.names(), "missing": caps.missing,
                              "tokens": tokens, "fills": fills, "left": drv.has_requests(),
                              "refused": refused}))
"""


def _run_in(version: str, script: str = SCRIPT) -> dict[str, Any]:
    """``script``'s result in ``vllm-<version>``'s venv (skip when that venv is absent)."""
    python = VENVS / f"vllm-{version}" / "bin" / "python"
    if not python.exists():
        pytest.skip(f"no venv for vllm {version} at {python.parent.parent} (make it with .ci/install-vllm {version})")
    done = subprocess.run([str(python), "-c", script], capture_output=True, text=True, timeout=600,
                          cwd=Path(__file__).resolve().parents[2])
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    assert done.returncode == 0 and lines, done.stderr[-3000:]
    result: dict[str, Any] = json.loads(lines[-1][len("RESULT "):])
    return result


@pytest.mark.slow
@pytest.mark.parametrize("version", ["0.30.0", "0.31.0", "0.32.0"])
def test_the_scheduler_driver_runs_an_older_release(version: str) -> None:
    result = _run_in(version)
    identity = result["vllm"]
    assert isinstance(identity, dict) and identity["version"] == version and identity["version_source"] == "metadata"
    assert result["tokens"] == {"a": 3, "b": 2, "g": 2} and result["left"] is False
    assert isinstance(result["fills"], int) and result["fills"] >= 2  # the grammar constrained g's samples
    present, missing, refused = result["present"], result["missing"], result["refused"]
    assert isinstance(present, list) and isinstance(missing, dict) and isinstance(refused, dict)
    assert "scheduler" in present
    for name, capability in [("adaptive", "scheduler.long-prefill-adaptive"), ("mrv2", "mrv2.config"),
                             ("connector", "scheduler.kv-holding-waiting")]:
        if capability in missing:
            assert refused[name] == [capability, missing[capability]], name
    if version == "0.30.0":
        assert {"scheduler.long-prefill-adaptive", "scheduler.kv-holding-waiting"} <= set(missing)
    if version in ("0.31.0", "0.32.0"):
        assert "_validate_v2_model_runner requires Triton" in str(missing["mrv2.config"])


ENGINE_SCRIPT = r"""
import json
from asyncspec.engine.vllm import surfaces
from asyncspec.engine.vllm.capabilities import MissingCapability
from asyncspec.engine.vllm.engine_config import EngineDriverConfig
from asyncspec.engine.vllm.engine_core_driver import EngineCoreDriver

done = {}
for depth, stagger in [(1, 1), (2, 1), (3, 3)]:
    try:
        drv = EngineCoreDriver(EngineDriverConfig(depth=depth))
        drv.new_scheduler(decode_stagger=stagger)
    except MissingCapability as exc:
        done[depth] = [exc.capability, exc.reason]
        continue
    drv.add_request("a", list(range(3, 15)), max_tokens=4, ignore_eos=True)
    drv.add_request("b", list(range(20, 26)), max_tokens=3, ignore_eos=True, structured=True)
    steps = 0
    while drv.has_work() and steps < 100:
        drv.step()
        steps += 1
    done[depth] = {"steps": steps, "idle": not drv.has_work(), "passes": len(drv.fed_rows())}
print("RESULT " + json.dumps({"depths": done, "missing": surfaces.installed_capabilities().missing}))
"""


@pytest.mark.slow
@pytest.mark.parametrize("version", ["0.30.0", "0.31.0", "0.32.0"])
def test_the_engine_core_driver_runs_an_older_release(version: str) -> None:
    result = _run_in(version, ENGINE_SCRIPT)
    depths, missing = result["depths"], result["missing"]
    assert isinstance(depths, dict) and isinstance(missing, dict)
    for depth in ("1", "2"):
        assert depths[depth]["idle"] is True and depths[depth]["passes"] >= 4, depth
    if "engine.decode-stagger" in missing:
        assert depths["3"] == ["engine.decode-stagger", missing["engine.decode-stagger"]]
    else:
        assert depths["3"]["idle"] is True
    assert ("engine.decode-stagger" in missing) == (version == "0.30.0")
    assert ("runner.mrv2" in missing) == (version in ("0.30.0", "0.31.0"))  # load_model(model=...) ignored there
