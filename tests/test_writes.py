"""Every file the tool writes goes through ``checker/atomic.py`` (issue 30): never over a symlink or a device,
a full disk is one line naming the path and the space needed (results still printed, exit 2 or 3), an
unwritable folder is refused before the run, a finding is saved as its config ends, and an interrupt never
splits a trace from its page.

A full disk is simulated in-process (``atomic._write_all`` raising ``ENOSPC``); /dev/full is used for real,
behind a guard that fails the test (instead of replacing the device node) should a rename ever aim at it.
"""
from __future__ import annotations

import errno
import json
import os
import signal
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from asyncspec.checker import atomic
from asyncspec.checker.trace import Trace, load_trace, save_trace
from asyncspec.explorer.beside import install_html_hooks
from tests.cli_contract import assert_matches_schema, assert_usage_error, invoke

D3 = ('name = "d3"\nrequests = [[3, 2], [2, 2]]\nbatch_queue_depth = 3\ndecode_stagger = 1\n'
      'token_budget = 4\nblock_size = 2\nnum_blocks = 3\n')
"""A config with a violation (no_wasted_step_on_max_tokens), found in well under a second."""


@pytest.fixture(autouse=True)
def renames_only_over_regular_files(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Fail the test at once if a rename ever aims at anything but a regular file (or nothing)."""
    real = os.replace

    def guarded(src: Any, dst: Any) -> None:
        if os.path.lexists(dst):
            assert stat.S_ISREG(os.lstat(dst).st_mode), f"a rename over {dst}, which is not a regular file"
        real(src, dst)
    monkeypatch.setattr(atomic.os, "replace", guarded)
    yield
    atomic.take_unsaved()


def _full_disk(monkeypatch: pytest.MonkeyPatch) -> None:
    """From now on every write of this process fails as on a full disk."""
    def full(fd: int, data: bytes) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    monkeypatch.setattr(atomic, "_write_all", full)


def _trace(tmp_path: Path) -> Path:
    """A checker trace file of the D3 config (written by ``check``)."""
    cfg = tmp_path / "d3.toml"
    cfg.write_text(D3)
    assert invoke("check", "-c", str(cfg), "--trace-dir", str(tmp_path / "t")).code == 1
    return tmp_path / "t" / "d3.no_wasted_step_on_max_tokens.trace.json"


def _is_dev_full() -> bool:
    return stat.S_ISCHR(os.lstat("/dev/full").st_mode)


# --------------------------------------------------------------- the helper


def test_a_symlink_to_a_device_and_the_device_are_refused_and_left_alone(tmp_path: Path) -> None:
    link = tmp_path / "link"
    link.symlink_to("/dev/full")
    for target, says in ((link, "links to /dev/full, a character device"),
                         (Path("/dev/full"), "it is a character device"), (tmp_path, "it is a folder")):
        with pytest.raises(atomic.WriteError, match=says):
            atomic.write_atomically(target, "x")
    assert link.is_symlink() and os.readlink(link) == "/dev/full" and _is_dev_full()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link"]  # no temporary file left


def test_a_symlink_to_a_regular_file_is_written_through(tmp_path: Path) -> None:
    (tmp_path / "real.json").write_text("old")
    os.chmod(tmp_path / "real.json", 0o640)
    link, dangling = tmp_path / "link", tmp_path / "dangling"
    link.symlink_to("real.json")
    dangling.symlink_to("sub/new.json")
    atomic.write_atomically(link, "new")
    atomic.write_atomically(dangling, "made")
    assert link.is_symlink() and (tmp_path / "real.json").read_text() == "new"
    assert stat.S_IMODE((tmp_path / "real.json").stat().st_mode) == 0o640
    assert dangling.is_symlink() and (tmp_path / "sub" / "new.json").read_text() == "made"


def test_a_full_disk_names_the_path_and_the_space_and_keeps_the_old_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "x.json"
    target.write_text("kept")
    _full_disk(monkeypatch)
    with pytest.raises(atomic.WriteError) as caught:
        atomic.write_atomically(target, "y" * 5000)
    message = str(caught.value)
    assert message.startswith(f"cannot write {target}: no space left") and "4.9 KiB needed" in message
    assert "free" in message and "\n" not in message
    assert target.read_text() == "kept" and sorted(p.name for p in tmp_path.iterdir()) == ["x.json"]


def test_a_name_too_long_is_a_write_error(tmp_path: Path) -> None:
    with pytest.raises(atomic.WriteError, match="File name too long"):
        atomic.write_atomically(tmp_path / ("n" * 300), "x")


def test_folders_under_proc_and_sys_are_refused_even_for_root(tmp_path: Path) -> None:
    assert "cannot create files in /proc" in str(atomic.folder_problem(Path("/proc/asyncspec-x"), "--out-dir"))
    assert "cannot create files in /sys" in str(atomic.folder_problem(Path("/sys/asyncspec-x"), "--trace-dir"))
    assert atomic.folder_problem(tmp_path / "new" / "deeper", "--trace-dir") is None
    assert list(tmp_path.iterdir()) == []  # the probe is removed, no folder made


def test_an_interrupt_while_a_trace_is_written_waits_for_its_page(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    install_html_hooks()
    trace = load_trace(_trace(tmp_path))
    real = atomic._write_all
    calls: list[int] = []

    def interrupted(fd: int, data: bytes) -> None:
        calls.append(fd)
        if len(calls) == 1:
            signal.raise_signal(signal.SIGINT)  # Ctrl-C as the trace file is being written
        real(fd, data)
    monkeypatch.setattr(atomic, "_write_all", interrupted)
    out = tmp_path / "x.trace.json"
    with pytest.raises(KeyboardInterrupt):
        save_trace(Trace(trace.config, trace.eos_positions, trace.actions, trace.violated), out)
    assert len(calls) == 2 and out.exists() and out.with_suffix(".html").exists()
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


# --------------------------------------------------------------- the commands


def test_replay_html_to_a_link_to_dev_full_or_to_dev_full_is_one_line_exit_2(tmp_path: Path) -> None:
    trace = _trace(tmp_path)
    link = tmp_path / "page.html"
    link.symlink_to("/dev/full")
    assert_usage_error(invoke("replay", str(trace), "--html", str(link)), r"links to /dev/full, a character device")
    assert_usage_error(invoke("replay", str(trace), "--html", "/dev/full"), r"/dev/full: it is a character device")
    assert link.is_symlink() and os.readlink(link) == "/dev/full" and _is_dev_full()


def test_replay_html_on_a_full_disk_is_one_line_exit_2(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    trace = _trace(tmp_path)
    _full_disk(monkeypatch)
    out = tmp_path / "page.html"
    assert_usage_error(invoke("replay", str(trace), "--html", str(out)), rf"cannot write {out}: no space left.* needed")
    assert not out.exists()


def test_check_on_a_full_disk_prints_the_finding_and_exits_2(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = tmp_path / "d3.toml"
    cfg.write_text(D3)
    _full_disk(monkeypatch)
    o = invoke("check", "-c", str(cfg), "--trace-dir", str(tmp_path / "t"), "--json")
    path = tmp_path / "t" / "d3.no_wasted_step_on_max_tokens.trace.json"
    assert_usage_error(o, rf"cannot write {path}: no space left .* needed, .* free\)")
    data = json.loads(o.stdout)
    assert_matches_schema(data, "check")
    assert data["trace_files"] == [] and data["configs"][0]["violations"][0]["trace"]["actions"]
    assert data["unsaved_files"] and not path.exists()
    text = invoke("check", "-c", str(cfg), "--trace-dir", str(tmp_path / "t"))
    assert_usage_error(text, rf"cannot write {path}: no space left")
    assert "VIOLATION: no_wasted_step_on_max_tokens" in text.stdout and f"not saved: {path}" in text.stdout


def test_a_page_that_cannot_be_written_is_a_warning_and_the_trace_is_kept(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = tmp_path / "d3.toml"
    cfg.write_text(D3)
    real = atomic._write_all

    def page_full(fd: int, data: bytes) -> None:
        if data.startswith(b"<!DOCTYPE html>"):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real(fd, data)
    monkeypatch.setattr(atomic, "_write_all", page_full)
    o = invoke("check", "-c", str(cfg), "--trace-dir", str(tmp_path / "t"), "--json")
    path = tmp_path / "t" / "d3.no_wasted_step_on_max_tokens.trace.json"
    assert o.code == 1 and json.loads(o.stdout)["trace_files"] == [str(path)] and path.exists()
    [line] = o.problem_lines()
    assert line.startswith(f"asyncspec: warning: no explorer page for {path}: cannot write {path.with_suffix('.html')}: "
                           "no space left")
    assert not path.with_suffix(".html").exists()


def test_a_checkpoint_on_a_full_disk_keeps_the_partial_result_exit_3(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _full_disk(monkeypatch)
    o = invoke("check", "-c", "async-d2", "--max-states", "50", "--checkpoint", str(tmp_path), "--json")
    assert o.code == 3 and len(o.problem_lines()) == 1, o.stderr
    assert "cannot write" in o.stderr and ".ckpt: no space left" in o.stderr and "needed" in o.stderr
    assert json.loads(o.stdout)["result"] == "partial"


def test_a_witness_on_a_full_disk_is_printed_exit_2(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _full_disk(monkeypatch)
    o = invoke("check", "-c", "async-d2", "--show-witness", "wasted_step", "--trace-dir", str(tmp_path), "--json")
    assert_usage_error(o, r"witness-wasted_step.trace.json: no space left")
    data = json.loads(o.stdout)
    assert_matches_schema(data, "check-witness")
    row = data["configs"][0]
    assert data["unsaved_files"] and row["reached"] and row["steps"] >= 1 and row["trace_file"] is None


def test_trace_and_out_dirs_under_proc_are_refused_before_the_run() -> None:
    assert_usage_error(invoke("check", "-c", "async-d2", "--trace-dir", "/proc/asyncspec-x"),
                       r"--trace-dir /proc/asyncspec-x: cannot create files in /proc")
    assert_usage_error(invoke("fuzz", "--target", "reference", "--examples", "5", "--out-dir", "/proc/asyncspec-x"),
                       r"--out-dir /proc/asyncspec-x: cannot create files in /proc")


def test_under_json_a_finding_is_saved_as_its_config_ends(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from asyncspec.checker import check_run

    cfg = tmp_path / "d3.toml"
    cfg.write_text(D3)
    written = tmp_path / "t" / "d3.no_wasted_step_on_max_tokens.trace.json"
    real = check_run.check_config
    seen: list[bool] = []

    def observed(config: Any, *args: Any, **kwargs: Any) -> Any:
        seen.append(written.exists() and written.with_suffix(".html").exists())
        return real(config, *args, **kwargs)
    monkeypatch.setattr(check_run, "check_config", observed)
    o = invoke("check", "-c", str(cfg), "-c", "async-d2", "--trace-dir", str(tmp_path / "t"), "--json")
    assert o.code == 1 and json.loads(o.stdout)["trace_files"] == [str(written)]
    assert seen == [False, True]  # on disk before the second config started
