"""``--vllm-path DIR`` for ``fuzz`` and ``replay``: this same command again with DIR's ``vllm`` the one imported.

DIR is a vLLM source tree (a git checkout or an unpacked sdist, unbuilt: the
scheduler path never loads ``vllm._C``).  Which ``vllm`` is imported is fixed
by ``sys.path`` before any vLLM import, so the command is re-executed with DIR
first on ``PYTHONPATH`` (as ``cli/mrv2_reexec.py`` does for Model Runner V2);
the run then names that tree's version and folder (``engine/vllm/vllm_identity.py``).
"""
from __future__ import annotations

import os
from pathlib import Path

from asyncspec.cli.common import fail_usage, run_again

REEXEC_MARK = "ASYNCSPEC_VLLM_PATH"
"""Set in the re-executed command's environment to DIR (resolved): it is never re-executed twice."""


def vllm_path_problem(folder: Path) -> str | None:
    """Why ``folder`` is not a vLLM source tree (one line), or None."""
    if not folder.is_dir():
        return f"--vllm-path {folder}: no such folder; give a vLLM source tree (the folder holding vllm/__init__.py)"
    if not (folder / "vllm" / "__init__.py").is_file():
        return (f"--vllm-path {folder} is not a vLLM source tree (no vllm/__init__.py in it); give the folder "
                "that holds the vllm package (a git checkout or an unpacked sdist)")
    return None


def vllm_path_environment(base: dict[str, str], folder: Path) -> dict[str, str]:
    """``base`` with ``folder`` (resolved) first on ``PYTHONPATH`` and the re-exec mark set."""
    tree = str(folder.resolve())
    path = base.get("PYTHONPATH", "")
    return dict(base, PYTHONPATH=tree + (os.pathsep + path if path else ""), **{REEXEC_MARK: tree})


def imports_tree(folder: Path) -> bool:
    """Whether the next ``import vllm`` of this process loads ``folder``'s package (nothing imported)."""
    from asyncspec.engine.vllm.vllm_identity import package_dir

    return package_dir() == (folder / "vllm").resolve()


def reexec_for_vllm_path(folder: Path | None) -> None:
    """Run this same command again with ``folder``'s ``vllm`` first on the path (before any vLLM import),
    or say in one line what is wrong with ``folder``; return at once when there is no ``folder`` or this
    process already imports it."""
    if folder is None:
        return
    problem = vllm_path_problem(folder)
    if problem is not None:
        fail_usage(problem)
    if imports_tree(folder):
        return
    if os.environ.get(REEXEC_MARK) == str(folder.resolve()):  # already run again: do not loop
        fail_usage(f"--vllm-path {folder}: vllm is still imported from elsewhere with that folder first on "
                   "PYTHONPATH; run from outside a folder holding another vllm package")
    run_again(vllm_path_environment(dict(os.environ), folder))
