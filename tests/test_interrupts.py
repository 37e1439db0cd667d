"""Interrupts lose nothing (issue 15, item 3): a real SIGINT or SIGTERM sent to a real
``asyncspec`` process mid-run ends it with a partial report, exit 3.

Each run waits for the command's first progress line on stderr (forced with
``ASYNCSPEC_PROGRESS=plain`` even under ``--json``), so the signal lands in the
work itself, not in start-up; the start-up tests instead send it from the moment
the program has its own SIGTERM handler (read from /proc).  Budgets are small:
each test costs a few seconds.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import z3

from asyncspec.checker import interrupt
from asyncspec.checker.configs import named_configs
from asyncspec.checker.fast_explorer import explore_fast

EXIT_PARTIAL = 3


def interrupted(args: list[str], sig: signal.Signals, cwd: Path, wait_for: str = "asyncspec: ",
                after: float = 0.3) -> tuple[int, dict[str, Any] | str, str, float]:
    """Run ``asyncspec ARGS``, send ``sig`` once a progress line containing ``wait_for`` shows,
    and return (exit code, JSON or stdout, stderr, seconds from the signal to the exit)."""
    env = dict(os.environ, ASYNCSPEC_PROGRESS="plain", ASYNCSPEC_PROGRESS_SECONDS="0.1")
    p = subprocess.Popen([sys.executable, "-m", "asyncspec", *args], cwd=cwd, env=env, text=True,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    watchdog = threading.Timer(240, p.kill)
    watchdog.start()
    try:
        seen = []
        assert p.stderr is not None
        for line in p.stderr:
            seen.append(line)
            if line.startswith("asyncspec: ") and wait_for in line:
                break
        else:
            pytest.fail(f"no progress line with {wait_for!r}; stderr: {''.join(seen)[-2000:]}")
        time.sleep(after)
        assert p.poll() is None, "the run ended before the signal: give it more work"
        sent = time.monotonic()
        p.send_signal(sig)
        out, err = p.communicate(timeout=120)
        latency = time.monotonic() - sent
    finally:
        watchdog.cancel()
    try:
        return p.returncode, json.loads(out), err, latency
    except json.JSONDecodeError:
        return p.returncode, out, err, latency


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_check_keeps_the_traces_already_found_and_reports_partial(sig: signal.Signals, tmp_path: Path) -> None:
    traces = tmp_path / "traces"
    rc, data, err, latency = interrupted(
        ["check", "-c", "finding-frontier-strict", "-c", "async-d2-large", "--json", "--trace-dir", str(traces),
         "--explorer", "fast"],  # the compiled explorer finishes async-d2-large before a signal lands
        sig, tmp_path, wait_for="check async-d2-large")
    assert rc == EXIT_PARTIAL, err
    assert isinstance(data, dict) and data["result"] == "partial" and data["interrupted"]
    first, second = data["configs"]
    assert first["ok"] and not first["partial"]  # the finding config ran to the end
    assert second["partial"] and second["partial_reason"].startswith("interrupted")
    assert 0 < second["distinct_states"] < 265_051  # what was covered
    assert second["vacuous_witnesses"] == []  # a partial run does not call witnesses vacuous
    assert list(traces.glob("finding-frontier-strict.*.trace.json"))  # kept
    assert not list(traces.glob(".*.tmp"))  # atomic writes: no half-written file
    assert "Aborted" not in err and "Traceback" not in err and latency < 10


def test_fuzz_reference_partial_report_on_sigterm(tmp_path: Path) -> None:
    rc, data, err, latency = interrupted(
        ["fuzz", "--target", "reference", "--seconds", "120", "--seed", "2", "--json", "--out-dir", str(tmp_path)],
        signal.SIGTERM, tmp_path, wait_for="examples")
    assert rc == EXIT_PARTIAL, err
    assert isinstance(data, dict) and data["result"] == "partial" and data["interrupted"]
    assert not data["complete"] and data["examples"] > 0 and data["events"] > 0
    assert "Traceback" not in err and latency < 10


def test_fuzz_with_jobs_partial_report_on_sigint(tmp_path: Path) -> None:
    rc, data, err, latency = interrupted(
        ["fuzz", "--target", "reference", "--seconds", "120", "--jobs", "2", "--json", "--out-dir", str(tmp_path)],
        signal.SIGINT, tmp_path, wait_for="examples", after=0.0)
    assert rc == EXIT_PARTIAL, err
    assert isinstance(data, dict) and data["result"] == "partial" and data["interrupted"] and data["examples"] >= 20
    assert "Traceback" not in err and latency < 15


def test_prove_stops_within_five_seconds(tmp_path: Path) -> None:
    rc, data, err, latency = interrupted(["prove", "--json"], signal.SIGINT, tmp_path, wait_for="obligations")
    assert rc == EXIT_PARTIAL, err
    assert isinstance(data, dict) and data["result"] == "partial" and data["interrupted"]
    assert 0 < data["done"] < data["total"] and len(data["obligations"]) == data["done"]
    assert all(o["result"] == "proved" for o in data["obligations"])  # none marked unknown by the stop
    assert latency < 5


def test_sweep_and_mutants_report_partial(tmp_path: Path) -> None:
    rc, data, err, _ = interrupted(["sweep", "--json", "--requests", "3x3,3x3,2x2", "--depth", "2,3"],
                                   signal.SIGTERM, tmp_path, wait_for="sweep")
    assert rc == EXIT_PARTIAL, err
    assert isinstance(data, dict) and data["result"] == "partial" and data["interrupted"] and data["not_checked"]
    rc, data, err, _ = interrupted(["mutants", "--json"], signal.SIGINT, tmp_path, wait_for="mutants")
    assert rc == EXIT_PARTIAL, err
    assert isinstance(data, dict) and data["result"] == "partial" and data["not_checked"]
    assert data["killed"] == data["total"]  # what was checked to the end was killed


@pytest.mark.slow  # torch start-up: about 15 s
def test_torch_fuzz_partial_report(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    rc, data, err, _ = interrupted(["fuzz", "--target", "torch", "--seconds", "120", "--json"],
                                   signal.SIGINT, tmp_path, wait_for="examples")
    assert rc == EXIT_PARTIAL, err
    assert isinstance(data, dict) and data["result"] == "partial" and data["examples"] > 0


def test_an_unwritable_trace_dir_is_refused_before_the_work(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    p = subprocess.run([sys.executable, "-m", "asyncspec", "check", "-c", "async-d2-large",
                        "--trace-dir", str(blocker / "traces")], capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and "--trace-dir" in p.stderr and "not a folder" in p.stderr
    assert p.stdout == ""  # nothing was explored


def test_an_interrupt_in_the_graph_phase_leaves_a_partial_result(monkeypatch: pytest.MonkeyPatch) -> None:
    from asyncspec.checker.fast_explorer import FastExplorer

    original = FastExplorer._check_eventually

    def interrupted_graph_phase(self: FastExplorer) -> None:
        os.kill(os.getpid(), signal.SIGINT)  # Python's own handler: a KeyboardInterrupt here
        original(self)
    monkeypatch.setattr(FastExplorer, "_check_eventually", interrupted_graph_phase)
    result = explore_fast(named_configs()["async-d2"])
    assert result.partial and "graph phase" in result.partial_reason
    assert result.distinct_states == 222  # every state was explored before the graph phase


def test_z3_is_interrupted_from_another_thread() -> None:
    """A query z3 would work on for minutes returns within seconds of a SIGINT."""
    x, y, z = z3.Ints("x y z")
    solver = z3.Solver()
    solver.set("ctrl_c", False)
    solver.add(x > 1, y > 1, z > 1, x * x * x + y * y * y == z * z * z + 7 * x * y * z + 123457)
    threading.Timer(1.0, lambda: os.kill(os.getpid(), signal.SIGINT)).start()
    start = time.monotonic()
    with interrupt.catching(), interrupt.waking(z3.main_ctx().interrupt):
        result = solver.check()
        assert interrupt.requested()
    assert result == z3.unknown and time.monotonic() - start < 5
    assert not interrupt.requested()  # the flag ends with the run that saw it


def test_a_divergence_found_before_the_interrupt_is_kept(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """Interrupted while Hypothesis shrinks a divergence: the smallest one so far is reported and saved."""
    from asyncspec.statemachine_tests.scheduler import campaign
    from asyncspec.statemachine_tests.scheduler.fuzz import fuzz_main
    from tests.explorer import fixtures

    original, calls = campaign.drive, [0]

    def drive(*args: Any) -> Any:
        calls[0] += 1
        if calls[0] < 3:
            return original(*args)
        if calls[0] == 4:  # the first shrink step: Ctrl-C arrives
            interrupt.note(signal.SIGINT)
        return fixtures.fuzz_run()  # a divergence from the third example on
    monkeypatch.setattr(campaign, "drive", drive)
    rc = fuzz_main("reference", 600.0, 0, True, False, tmp_path, stop_at_first=True)
    data = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert rc == 1 and data["result"] == "divergence" and data["interrupted"]
    assert data["examples"] == 3 and Path(data["replay_file"]).exists()
    calls[0] = 0  # keep going (the default): the first sighting is kept, unshrunk, when interrupted
    rc = fuzz_main("reference", 600.0, 0, True, False, tmp_path / "keep")
    data = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert rc == 1 and data["interrupted"] and data["buckets"][0]["first_example"] == 2
    assert Path(data["buckets"][0]["replay_file"]).exists()
    assert json.loads(Path(data["replay_file"]).read_text())["asyncspec_fuzz_replay"] == 1


@pytest.mark.slow  # vLLM's start-up: about 30 s
def test_vllm_engine_fuzz_partial_report_and_an_interrupt_in_start_up(tmp_path: Path) -> None:
    from tests.vllm_guard import require_pinned_vllm

    require_pinned_vllm()
    rc, data, err, _ = interrupted(["fuzz", "--target", "vllm-engine", "--depth", "1", "--seconds", "300", "--json",
                                    "--out-dir", str(tmp_path)], signal.SIGTERM, tmp_path, wait_for="examples")
    assert rc == EXIT_PARTIAL, err
    assert isinstance(data, dict) and data["result"] == "partial" and data["interrupted"] and data["examples"] > 0
    p = subprocess.Popen([sys.executable, "-m", "asyncspec", "fuzz", "--target", "vllm-engine", "--json"],
                         cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(3)  # still importing: no command code runs yet
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=120)
    assert p.returncode == EXIT_PARTIAL and "Aborted" not in err and "Traceback" not in err
    assert err.strip().splitlines()[-1].startswith("asyncspec: interrupted")


def _catches_sigterm(pid: int) -> bool:
    """Whether process ``pid`` has its own SIGTERM handler yet (Linux: ``SigCgt`` in /proc/PID/status)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    caught = next((line.split()[1] for line in status.splitlines() if line.startswith("SigCgt:")), "0")
    return bool(int(caught, 16) >> (signal.SIGTERM - 1) & 1)


START_UP_CASES = [("-m", signal.SIGTERM, 0.0), ("-m", signal.SIGTERM, 0.05), ("-m", signal.SIGTERM, 0.1),
                  ("-m", signal.SIGTERM, 0.2), ("-m", signal.SIGINT, 0.0), ("-m", signal.SIGINT, 0.1),
                  ("script", signal.SIGTERM, 0.0), ("script", signal.SIGINT, 0.05)]


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads the handlers from /proc")
@pytest.mark.parametrize("launch, sig, after", START_UP_CASES,
                         ids=[f"{launch}-{s.name}-{after}s" for launch, s, after in START_UP_CASES])
def test_a_signal_in_start_up_is_one_line_and_exit_3(launch: str, sig: signal.Signals, after: float,
                                                      tmp_path: Path) -> None:
    """A signal from the moment the program has its first handler (before click and the checker are
    imported) on: exit 3, never a traceback; one line if it stopped the start-up, else a partial report."""
    script = Path(sys.executable).with_name("asyncspec")
    if launch == "script" and not script.exists():
        pytest.skip("no asyncspec script beside this Python")
    argv = [sys.executable, "-m", "asyncspec"] if launch == "-m" else [str(script)]
    # --explorer fast: the compiled default checks async-d2-large in half a second, which a loaded
    # machine's start-up can outlast, so the signal would come after the report
    p = subprocess.Popen([*argv, "check", "-c", "async-d2-large", "--trace-dir", str(tmp_path), "--explorer", "fast"],
                         cwd=tmp_path, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        while not _catches_sigterm(p.pid) and p.poll() is None and time.monotonic() < deadline:
            time.sleep(0.001)
        assert p.poll() is None, "the run ended before the signal"
        time.sleep(after)
        p.send_signal(sig)
        out, err = p.communicate(timeout=120)
    finally:
        p.kill()
    assert p.returncode == EXIT_PARTIAL, (out[-1000:], err[-1000:])
    assert "Traceback" not in err and "Aborted" not in err and "internal error" not in err, err
    lines = err.strip().splitlines()
    stopped_in_start_up = lines == [f"asyncspec: interrupted{'' if sig == signal.SIGINT else ' (SIGTERM)'}; "
                                    f"the command stopped before it could report"]
    assert stopped_in_start_up or "partial: interrupted" in out, (out[-1000:], err[-1000:])
