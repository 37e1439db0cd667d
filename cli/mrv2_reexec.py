"""Model Runner V2 for ``fuzz --runner mrv2`` and the replay of its files: this same command again, in its environment.

Model Runner V2 needs its environment before vLLM is imported (``engine/vllm/mrv2_runner.py``).
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

from asyncspec.cli.common import fail_usage, run_again


def replay_runner(path: Path) -> str:
    """The model runner a ``vllm-engine`` replay file's case ran on (``v1`` if it does not say)."""
    from asyncspec.checker.schema import loads_json

    try:
        return str(loads_json(path.read_text(encoding="utf-8"))["case"]["engine"].get("runner", "v1"))
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return "v1"  # the replay itself reports what is wrong with the file


def reexec_for_mrv2() -> None:
    """Run this same command again in Model Runner V2's environment, or say in one line what is missing;
    return at once when this process already has that environment."""
    from asyncspec.engine.vllm.mrv2_runner import mrv2_environment, mrv2_problem, triton_dir, triton_install_command

    problem = mrv2_problem()
    if problem is None:
        return
    folder = triton_dir()
    if not (folder / "triton").is_dir():
        fail_usage(f"Model Runner V2 needs Triton in {folder} (or $ASYNCSPEC_TRITON_DIR): "
                   f"{sys.executable} {' '.join(triton_install_command(folder))}")
    if os.environ.get("VLLM_USE_V2_MODEL_RUNNER") == "1":  # already run again: do not loop
        fail_usage(problem)
    run_again(mrv2_environment(dict(os.environ), folder))
