"""``--vllm-path DIR`` (issue 26, item 1): fuzz and replay drive the vllm package of a source tree.

Default tier: a bad DIR is one line and exit 2, the option belongs to the vLLM targets, the
re-execution puts DIR first on ``PYTHONPATH`` and makes DIR's ``vllm`` the one found, and a
release outside the range warns in one line under ``--allow-version`` (no vLLM is started).
Slow tier: an unpacked sdist of 0.32.0 (made from that venv's package folder) is driven from the
main python3 (0.33.0 installed), and the JSON names it.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from asyncspec.cli import vllm_path
from asyncspec.engine.vllm import vllm_environment
from tests.cli_contract import assert_matches_schema, assert_usage_error, invoke

RELEASE_032 = Path("/root/venvs/vllm-0.32.0/lib/python3.11/site-packages/vllm")


def _fake_tree(root: Path, version: str = "0.32.0") -> Path:
    """A folder holding an (empty) ``vllm`` package and an sdist's PKG-INFO."""
    (root / "vllm").mkdir(parents=True)
    (root / "vllm" / "__init__.py").write_text("")
    (root / "PKG-INFO").write_text(f"Metadata-Version: 2.1\nName: vllm\nVersion: {version}\n")
    return root


@pytest.mark.parametrize("command", [("fuzz", "--target", "vllm"), ("fuzz", "--target", "vllm-engine")])
def test_a_missing_folder_is_one_line_exit_2(command: tuple[str, ...], tmp_path: Path) -> None:
    assert_usage_error(invoke(*command, "--vllm-path", str(tmp_path / "nope")),
                       r"--vllm-path .*nope: no such folder; give a vLLM source tree")


def test_a_folder_without_the_vllm_package_is_one_line_exit_2(tmp_path: Path) -> None:
    (tmp_path / "vllm").mkdir()  # a folder named vllm, but no package in it
    assert_usage_error(invoke("fuzz", "--target", "vllm", "--vllm-path", str(tmp_path)),
                       r"is not a vLLM source tree \(no vllm/__init__.py in it\)")


def test_replay_checks_the_folder_and_the_target(tmp_path: Path) -> None:
    trace = tmp_path / "t.json"
    trace.write_text("{}")
    assert_usage_error(invoke("replay", str(trace), "--target", "vllm", "--vllm-path", str(tmp_path / "nope")),
                       r"no such folder")
    assert_usage_error(invoke("replay", str(trace), "--target", "reference", "--vllm-path", str(tmp_path)),
                       r"--vllm-path is an option of replay --target vllm and vllm-engine")


def test_other_targets_refuse_the_option(tmp_path: Path) -> None:
    assert_usage_error(invoke("fuzz", "--target", "reference", "--vllm-path", str(tmp_path)),
                       r"--vllm-path is an option of --target vllm and vllm-engine")


def test_ray_workers_cannot_take_the_checkout(tmp_path: Path) -> None:
    """--vllm-path re-executes this process; Ray's workers would import their own vLLM."""
    assert_usage_error(invoke("fuzz", "--target", "vllm", "--vllm-path", str(tmp_path), "--ray", "localhost:1"),
                       r"--vllm-path drives the checkout in this machine's processes, not in Ray's workers")


def test_the_reexec_environment_puts_the_tree_first(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tree = _fake_tree(tmp_path / "src")
    monkeypatch.setenv("PYTHONPATH", "/elsewhere")
    monkeypatch.delenv(vllm_path.REEXEC_MARK, raising=False)
    monkeypatch.setattr(sys, "argv", ["asyncspec", "fuzz", "--target", "vllm", "--vllm-path", str(tree)])
    seen: list[tuple[str, list[str], dict[str, str]]] = []

    def execve(exe: str, argv: list[str], env: dict[str, str]) -> None:
        seen.append((exe, argv, env))
        raise SystemExit(0)

    monkeypatch.setattr(os, "execve", execve)
    with pytest.raises(SystemExit):
        vllm_path.reexec_for_vllm_path(tree)
    exe, argv, env = seen[0]
    assert exe == sys.executable and argv[1:] == ["-m", "asyncspec", *sys.argv[1:]]
    assert env["PYTHONPATH"].split(os.pathsep) == [str(tree.resolve()), "/elsewhere"]
    assert env[vllm_path.REEXEC_MARK] == str(tree.resolve())
    # in that environment the next `import vllm` is the tree's (found, not imported)
    probe = ("import pathlib, sys; from asyncspec.cli.vllm_path import imports_tree; "
             "print(imports_tree(pathlib.Path(sys.argv[1])))")
    found = subprocess.run([sys.executable, "-c", probe, str(tree)], env=env, capture_output=True, text=True,
                           check=True, cwd=tmp_path)
    assert found.stdout.strip() == "True"


def test_no_reexec_when_the_tree_is_already_imported_and_no_loop(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    tree = _fake_tree(tmp_path / "src")
    monkeypatch.setattr(os, "execve", lambda *a: pytest.fail("re-executed"))
    monkeypatch.setattr(vllm_path, "imports_tree", lambda folder: True)
    vllm_path.reexec_for_vllm_path(tree)  # returns: this process already imports it
    vllm_path.reexec_for_vllm_path(None)
    monkeypatch.setattr(vllm_path, "imports_tree", lambda folder: False)
    monkeypatch.setenv(vllm_path.REEXEC_MARK, str(tree.resolve()))
    with pytest.raises(SystemExit) as stop:
        vllm_path.reexec_for_vllm_path(tree)
    assert stop.value.code == 2


def test_a_release_outside_the_range_warns_once_under_allow_version(monkeypatch: pytest.MonkeyPatch,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(vllm_environment, "_installed_vllm_version", lambda: "0.34.0.dev3")
    monkeypatch.setattr(vllm_environment, "load_vllm", lambda: None)
    vllm_environment._warn_outside_range.cache_clear()
    with pytest.raises(vllm_environment.VllmUnavailable, match="outside the supported releases"):
        vllm_environment.check_vllm_version(allow_other=False)
    assert vllm_environment.check_vllm_version(allow_other=True) == "0.34.0.dev3"
    vllm_environment.check_vllm_version(allow_other=True)
    lines = capsys.readouterr().err.splitlines()
    assert lines == ["asyncspec: warning: driving vllm 0.34.0.dev3, outside the supported releases 0.30.0 to "
                     "0.33.0 (--allow-version): a part whose surface it lacks is skipped"]
    monkeypatch.setattr(vllm_environment, "_installed_vllm_version", lambda: "0.32.0")
    vllm_environment.check_vllm_version(allow_other=True)
    assert capsys.readouterr().err == ""  # inside the range: no warning


def _sdist_of(release: Path, root: Path, version: str) -> Path:
    """An unpacked, unbuilt sdist made from an installed release's package folder: its Python files
    (hard links where the file system allows), no compiled extension, no ``_version.py``, a PKG-INFO."""
    def link(src: str, dst: str) -> None:
        try:
            os.link(src, dst)
        except OSError:
            shutil.copy2(src, dst)

    shutil.copytree(release, root / "vllm", copy_function=link,
                    ignore=shutil.ignore_patterns("*.so", "__pycache__", "_version.py"))
    (root / "PKG-INFO").write_text(f"Metadata-Version: 2.1\nName: vllm\nVersion: {version}\n")
    return root


def _fuzz(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``asyncspec fuzz ARGS`` from the main python3, in ``tmp_path``."""
    return subprocess.run([sys.executable, "-m", "asyncspec", "fuzz", *args, "--out-dir", str(tmp_path / "out")],
                          capture_output=True, text=True, timeout=900, cwd=tmp_path)


@pytest.mark.slow
@pytest.mark.skipif(not RELEASE_032.is_dir(), reason="no vllm 0.32.0 venv (.ci/install-vllm 0.32.0)")
def test_an_unpacked_sdist_of_0_32_0_is_driven_and_named(tmp_path: Path) -> None:
    tree = _sdist_of(RELEASE_032, tmp_path / "vllm-0.32.0", "0.32.0")
    p = _fuzz(tmp_path, "--target", "vllm", "--profile", "base", "--examples", "10", "--json",
              "--vllm-path", str(tree))
    assert p.returncode == 0, p.stderr[-2000:]
    data = json.loads(p.stdout)
    assert data["vllm"]["version"] == "0.32.0" and data["vllm"]["version_source"] == "PKG-INFO"
    assert data["vllm"]["path"] == str((tree / "vllm").resolve())
    assert "scheduler" in data["vllm"]["capabilities"] and data["examples"] == 10
    assert_matches_schema(data, "fuzz")


@pytest.mark.slow
@pytest.mark.skipif(not RELEASE_032.is_dir(), reason="no vllm 0.32.0 venv (.ci/install-vllm 0.32.0)")
def test_a_tree_outside_the_range_needs_allow_version_then_warns(tmp_path: Path) -> None:
    tree = _sdist_of(RELEASE_032, tmp_path / "vllm-0.34.0", "0.34.0")
    refused = _fuzz(tmp_path, "--target", "vllm", "--profile", "base", "--examples", "2", "--vllm-path", str(tree))
    assert refused.returncode == 2, refused.stderr[-2000:]
    assert "vllm 0.34.0 is outside the supported releases 0.30.0 to 0.33.0" in refused.stderr
    allowed = _fuzz(tmp_path, "--target", "vllm", "--profile", "base", "--examples", "2", "--json",
                    "--allow-version", "--vllm-path", str(tree))
    assert allowed.returncode == 0, allowed.stderr[-2000:]
    warnings = [line for line in allowed.stderr.splitlines() if line.startswith("asyncspec: warning: driving vllm")]
    assert warnings == ["asyncspec: warning: driving vllm 0.34.0, outside the supported releases 0.30.0 to 0.33.0 "
                        "(--allow-version): a part whose surface it lacks is skipped"]
    assert json.loads(allowed.stdout)["vllm"]["version"] == "0.34.0"
