"""The interrupt matrix: SIGINT and SIGTERM, once and twice, at a named point of each phase.

``ASYNCSPEC_PAUSE_AT=POINT`` makes the tool stop at ``POINT`` (``start-up``: the
command's options are read and it is about to run; ``mid-run``: after the first
unit of work; ``writing``: a file is written and not yet renamed into place),
write ``ASYNCSPEC_PAUSE_FILE`` and wait for a signal (``checker/interrupt.py``),
so each signal lands at an exact moment instead of racing a sleep.  Every case
must end with exit 3 and no traceback: a valid partial JSON report (the
command's schema in ``cli/schemas/``) naming only files that exist, or, stopped
before the command could report, the one line that says so.  The whole matrix
is ``slow``; the default tier runs one case per command (``fuzz --target sglang`` none: its driver
starts in SGLang's venv, about 20 s, and is skipped with the reason where that venv is absent).  The
torch and sglang targets' printed ``reproduce with:`` line reruns the covered work exactly (``slow``).
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import jsonschema
import pytest

ROOT = Path(__file__).resolve().parents[1]
EXIT_PARTIAL = 3

COMMANDS: dict[str, tuple[str, list[str]]] = {  # name: (schema, arguments; {tmp} is the test's folder)
    "check": ("check", ["check", "-c", "finding-frontier-strict", "-c", "async-d2-large", "--json",
                        "--trace-dir", "{tmp}/traces"]),
    "check-plain": ("check", ["check", "-c", "async-d2-large", "--explorer", "plain", "--json",
                              "--trace-dir", "{tmp}/traces"]),
    "fuzz-jobs1": ("fuzz", ["fuzz", "--target", "reference", "--seconds", "120", "--seed", "2", "--json",
                            "--out-dir", "{tmp}/fuzz"]),
    "fuzz-jobs2": ("fuzz", ["fuzz", "--target", "reference", "--seconds", "120", "--seed", "2", "--jobs", "2",
                            "--json", "--out-dir", "{tmp}/fuzz"]),
    "prove": ("prove", ["prove", "--json"]),
    "sweep": ("sweep", ["sweep", "--json", "--requests", "3x3,3x3,2x2", "--depth", "2,3"]),
    "mutants": ("mutants", ["mutants", "--json"]),
    "worker": ("worker", ["worker", "--json"]),
    "fuzz-torch": ("fuzz-torch", ["fuzz", "--target", "torch", "--seconds", "120", "--seed", "2", "--json",
                                  "--out-dir", "{tmp}/fuzz"]),
    "fuzz-sglang": ("fuzz-sglang", ["fuzz", "--target", "sglang", "--seconds", "120", "--seed", "2", "--json",
                                    "--out-dir", "{tmp}/fuzz"]),  # in its own venv (.ci/install-sglang)
}
NEEDS = {"fuzz-torch": "torch", "fuzz-sglang": "sglang-venv"}  # what a command needs here, else skipped
ONE_LINE_MID_RUN: set[str] = set()  # the commands that may stop mid-run with the one line: none
POINTS = {"check": ("start-up", "mid-run", "writing")}  # the commands that write a file as they run
SIGNAL_SEQUENCES = {"INT": (signal.SIGINT,), "TERM": (signal.SIGTERM,), "INT-INT": (signal.SIGINT, signal.SIGINT),
                    "TERM-INT": (signal.SIGTERM, signal.SIGINT),
                    "STORM": (signal.SIGINT, signal.SIGTERM, *[signal.SIGINT, signal.SIGTERM] * 5)}
DEFAULT_TIER = {("check", "writing", "INT-INT"), ("check-plain", "mid-run", "TERM"),
                ("fuzz-jobs1", "mid-run", "TERM-INT"), ("fuzz-jobs2", "mid-run", "STORM"), ("prove", "mid-run", "INT"),
                ("sweep", "mid-run", "TERM"), ("mutants", "mid-run", "INT-INT"),
                ("worker", "mid-run", "TERM-INT"), ("fuzz-torch", "mid-run", "INT-INT")}
# fuzz-sglang has none in the default tier: its driver's start in SGLang's venv takes about 20 s


def require(command: str) -> None:
    """Skip, with the reason, a command whose engine this machine lacks (torch, SGLang's venv)."""
    need = NEEDS.get(command)
    if need == "torch":
        pytest.importorskip("torch")
    elif need == "sglang-venv":
        from asyncspec.engine.sglang.client import venv_problem

        problem = venv_problem()
        if problem:
            pytest.skip(f"SGLang venv absent: {problem}")


def _cases() -> list[Any]:
    cases = []
    for command in COMMANDS:
        for point in POINTS.get(command, ("start-up", "mid-run")):
            for seq in SIGNAL_SEQUENCES:
                marks = () if (command, point, seq) in DEFAULT_TIER else (pytest.mark.slow,)
                cases.append(pytest.param(command, point, seq, marks=marks, id=f"{command}-{point}-{seq}"))
    return cases


def _ignore_sigint() -> None:
    """What a shell does to a command started in the background (``cmd &``, ``nohup``)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def paused(point: str, args: list[str], tmp: Path, background: bool = False) -> subprocess.Popen[str]:
    """``asyncspec ARGS`` started and waiting at ``point`` (``background``: SIGINT inherited as ignored)."""
    marker = tmp / "paused"
    env = dict(os.environ, ASYNCSPEC_PAUSE_AT=point, ASYNCSPEC_PAUSE_FILE=str(marker))
    p = subprocess.Popen([sys.executable, "-m", "asyncspec", *args], cwd=tmp, env=env, text=True,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         preexec_fn=_ignore_sigint if background else None)
    deadline = time.monotonic() + 120
    while not marker.exists() and p.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)  # waits for the tool's own marker: no race with the run
    if p.poll() is not None or not marker.exists():
        p.kill()
        pytest.fail(f"never paused at {point}: {p.communicate()[1][-2000:]}")
    return p


def interrupted_at(point: str, signals: tuple[signal.Signals, ...], args: list[str],
                   tmp: Path) -> tuple[int, str, str]:
    """Run ``asyncspec ARGS`` paused at ``point``, send ``signals`` (50 ms apart, a storm 10 ms) once it
    pauses; (exit code, stdout, stderr)."""
    p = paused(point, args, tmp)
    try:
        for i, sig in enumerate(signals):
            if i:
                time.sleep(0.05 if len(signals) < 3 else 0.01)
            p.send_signal(sig)
        out, err = p.communicate(timeout=120)
    finally:
        p.kill()
    return p.returncode, out, err


def announced_files(data: dict[str, Any]) -> list[str]:
    """Every file a report names as written."""
    files = list(data.get("trace_files", []))
    files += [b["replay_file"] for b in data.get("buckets", []) if b.get("replay_file")]
    if data.get("replay_file"):
        files.append(data["replay_file"])
    return files


@pytest.mark.parametrize("command, point, seq", _cases())
def test_an_interrupt_is_exit_3_with_the_report_and_its_files(command: str, point: str, seq: str,
                                                              tmp_path: Path) -> None:
    require(command)
    schema_name, template = COMMANDS[command]
    args = [a.replace("{tmp}", str(tmp_path)) for a in template]
    rc, out, err = interrupted_at(point, SIGNAL_SEQUENCES[seq], args, tmp_path)
    assert rc == EXIT_PARTIAL, (rc, out[-1000:], err[-2000:])
    assert "Traceback" not in err and "Aborted" not in err and "internal error" not in err, err[-2000:]
    if not out.strip():  # stopped before it could report: the one line
        assert point == "start-up" or command in ONE_LINE_MID_RUN, err[-2000:]
        assert err.strip().splitlines()[-1].startswith("asyncspec: interrupted"), err[-2000:]
        return
    data = json.loads(out)
    schema = json.loads((ROOT / "cli" / "schemas" / f"{schema_name}.json").read_text())
    jsonschema.validate(data, schema)
    assert data.get("result", "partial") == "partial" or data.get("partial") or data.get("interrupted"), data
    for name in announced_files(data):
        path = Path(name) if Path(name).is_absolute() else tmp_path / name
        assert path.is_file(), name
        if path.name.endswith(".trace.json"):  # whole and replayable: the violation it records replays
            replayed = subprocess.run([sys.executable, "-m", "asyncspec", "replay", str(path)], cwd=tmp_path,
                                      capture_output=True, text=True, timeout=120)
            assert replayed.returncode == 1 and "Traceback" not in replayed.stderr, replayed.stderr[-2000:]
    assert not list(tmp_path.rglob(".*.tmp"))  # atomic writes: no half-written file left


def _reproduced(command: str, tmp_path: Path) -> None:
    """Interrupted mid-run without ``--json``: the printed ``reproduce with: --examples N --seed S`` reruns
    exactly the covered work (the same examples, events and coverage as the interrupted run's report)."""
    require(command)
    args = [a.replace("{tmp}", str(tmp_path)) for a in COMMANDS[command][1]]
    rc, out, err = interrupted_at("mid-run", SIGNAL_SEQUENCES["TERM"], [a for a in args if a != "--json"], tmp_path)
    assert rc == EXIT_PARTIAL and "Traceback" not in err, (rc, err[-2000:])
    line = [x for x in out.splitlines() if x.startswith("reproduce with: ")]
    assert line and "--seed 2" in line[-1], out[-2000:]
    seed = args.index("--seed")
    base = args[:seed] + args[seed + 2:]  # the same command, its seed and examples from the printed line
    again = subprocess.run([sys.executable, "-m", "asyncspec", *base, *line[-1].removeprefix("reproduce with: ").split()],
                           cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr[-2000:]
    data = json.loads(again.stdout)
    n = int(line[-1].split("--examples ")[1].split()[0])
    assert data["examples"] == n >= 1 and not data["interrupted"]
    assert printed_coverage(out, data["coverage"]) == data["coverage"], (out[-2000:], data["coverage"])


def printed_coverage(out: str, keys: dict[str, int]) -> dict[str, int]:
    """The coverage a run printed: one ``NAME COUNT`` line each (torch) or ``coverage: NAME COUNT, ...`` (sglang)."""
    pairs = []
    for line in out.splitlines():
        text = line.strip()
        pairs += text.removeprefix("coverage: ").split(", ") if text.startswith("coverage: ") else [text]
    return {k.strip(): int(v) for k, v in (p.rsplit(" ", 1) for p in pairs if " " in p)
            if k.strip() in keys and v.isdigit()}


@pytest.mark.slow  # the torch engine twice, SGLang's driver twice: 10 to 60 s
@pytest.mark.parametrize("command", ["fuzz-torch", "fuzz-sglang"])
def test_an_interrupted_engine_fuzz_is_reproduced_by_its_printed_command(command: str, tmp_path: Path) -> None:
    _reproduced(command, tmp_path)


VLLM_COMMANDS = {
    "fuzz-vllm": ("fuzz", ["fuzz", "--target", "vllm", "--examples", "400", "--seed", "1", "--json",
                           "--out-dir", "{tmp}/fuzz"]),
    "fuzz-vllm-engine": ("fuzz-vllm-engine", ["fuzz", "--target", "vllm-engine", "--depth", "1", "--examples",
                                              "1000", "--json", "--out-dir", "{tmp}/fuzz"]),
}


@pytest.mark.slow  # vLLM's start-up: about 30 s a case
@pytest.mark.parametrize("command", sorted(VLLM_COMMANDS))
@pytest.mark.parametrize("point, seq", [("start-up", "INT-INT"), ("engine-build", "INT"), ("mid-run", "TERM"),
                                        ("mid-run", "TERM-INT")])
def test_an_interrupt_of_a_vllm_fuzz_is_exit_3_with_the_report(command: str, point: str, seq: str,
                                                               tmp_path: Path) -> None:
    from tests.vllm_guard import require_pinned_vllm

    require_pinned_vllm()
    schema_name, template = VLLM_COMMANDS[command]
    if point == "engine-build" and command != "fuzz-vllm-engine":
        pytest.skip("only the vllm-engine target builds vLLM's engine")
    rc, out, err = interrupted_at(point, SIGNAL_SEQUENCES[seq], [a.replace("{tmp}", str(tmp_path)) for a in template],
                                  tmp_path)
    assert rc == EXIT_PARTIAL, (rc, out[-1000:], err[-2000:])
    assert "Traceback" not in err and "internal error" not in err, err[-2000:]
    if not out.strip():  # stopped before it could report
        assert point != "mid-run" and err.strip().splitlines()[-1].startswith("asyncspec: interrupted"), err[-2000:]
        return
    data = json.loads(out)
    jsonschema.validate(data, json.loads((ROOT / "cli" / "schemas" / f"{schema_name}.json").read_text()))
    assert data.get("partial") or data.get("interrupted") or data.get("result") == "partial", data
    assert all(Path(f).is_file() for f in announced_files(data))


@pytest.mark.parametrize("command", ["sweep", "check-plain"])
def test_started_in_the_background_sigint_stays_ignored_and_sigterm_ends_it(command: str, tmp_path: Path) -> None:
    """SIGINT inherited as ignored is the shell's choice (the run goes on); SIGTERM still ends it: exit 3."""
    schema_name, template = COMMANDS[command]
    p = paused("mid-run", [a.replace("{tmp}", str(tmp_path)) for a in template], tmp_path, background=True)
    try:
        p.send_signal(signal.SIGINT)
        with pytest.raises(subprocess.TimeoutExpired):
            p.wait(timeout=0.5)  # still paused: the ignored SIGINT reached no handler
        p.send_signal(signal.SIGTERM)
        out, err = p.communicate(timeout=120)
    finally:
        p.kill()
    assert p.returncode == EXIT_PARTIAL, err[-2000:]
    data = json.loads(out)
    jsonschema.validate(data, json.loads((ROOT / "cli" / "schemas" / f"{schema_name}.json").read_text()))
    assert data["result"] == "partial" and data["interrupted"]


def test_a_signal_after_the_searchs_last_poll_is_not_dropped(monkeypatch: pytest.MonkeyPatch) -> None:
    """A SIGINT after the fast explorer's last look at the flag, before its handler goes: still partial."""
    from asyncspec.checker.configs import named_configs
    from asyncspec.checker.fast_explorer import FastExplorer, explore_fast

    original = FastExplorer._bfs

    def bfs_then_signal(self: FastExplorer, expander: Any, start: float) -> None:
        original(self, expander, start)
        os.kill(os.getpid(), signal.SIGINT)  # every state explored; the flag is polled no more
    monkeypatch.setattr(FastExplorer, "_bfs", bfs_then_signal)
    result = explore_fast(named_configs()["async-d2"])
    assert result.partial and result.partial_reason.startswith("interrupted")
    assert result.distinct_states == 222


@pytest.mark.slow  # two process pools: about 15 s
def test_an_interrupted_fuzz_with_jobs_is_reproduced_by_its_examples_and_seed(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``--jobs 2`` interrupted: the shards kept are a prefix of the example order, so the printed
    ``--examples N --seed S`` reproduces the covered work exactly."""
    import threading

    from asyncspec.checker import interrupt
    from asyncspec.statemachine_tests.scheduler.fuzz import fuzz_main

    def last_json() -> dict[str, Any]:
        return json.loads(capsys.readouterr().out.strip().splitlines()[-1])  # type: ignore[no-any-return]
    timer = threading.Timer(4.0, interrupt.note, (signal.SIGINT,))  # what the handler records
    timer.start()
    try:
        rc = fuzz_main("reference", 600.0, 11, True, False, tmp_path, jobs=4)
    finally:
        timer.cancel()
    cut = last_json()
    assert rc == EXIT_PARTIAL and cut["interrupted"] and cut["examples"] > 0
    assert fuzz_main("reference", 600.0, 11, True, False, tmp_path, examples=cut["examples"]) == 0
    again = last_json()
    same = ("examples", "events", "coverage", "spec_events", "divergences")
    assert {k: again[k] for k in same} == {k: cut[k] for k in same}


def test_the_one_handler_raises_once_and_stops_a_run_that_never_answered(monkeypatch: pytest.MonkeyPatch) -> None:
    """The first signal raises; one soon after changes nothing (the report it started is printed whole);
    one long after a first that nothing answered (a library swallowed it) stops the program."""
    from asyncspec.checker import interrupt

    stopped: list[bool] = []
    monkeypatch.setattr(interrupt, "_stuck", lambda: stopped.append(True))
    uninstall = interrupt.install()
    try:
        assert signal.getsignal(signal.SIGTERM) is interrupt.handle
        with pytest.raises(KeyboardInterrupt):
            interrupt.handle(signal.SIGINT, None)
        interrupt.handle(signal.SIGTERM, None)
        assert not stopped and interrupt.reason() == "interrupted"
        monkeypatch.setattr(interrupt, "_first_at", [time.monotonic() - interrupt.STUCK_SECONDS - 1])
        interrupt.handle(signal.SIGINT, None)
        assert stopped == [True]
    finally:
        uninstall()
        interrupt.reset()
    assert signal.getsignal(signal.SIGTERM) is not interrupt.handle


def test_a_command_that_ends_0_after_an_unanswered_signal_is_exit_3() -> None:
    """The contract's last guard: a signal the command never answered makes its exit 0 a 3 (one line)."""
    import click
    from click.testing import CliRunner

    from asyncspec.checker import interrupt
    from asyncspec.cli.contract import ContractCommand, ContractGroup

    @click.command(cls=ContractCommand)
    def quiet() -> None:
        """Notes a signal in flag mode, then ends as if all was done."""
        with interrupt.catching():
            interrupt.note(signal.SIGTERM)
        sys.exit(0)
    group = ContractGroup(commands={"quiet": quiet})
    result = CliRunner().invoke(group, ["quiet"])
    assert result.exit_code == EXIT_PARTIAL
    assert "asyncspec: interrupted (SIGTERM)" in result.output


@pytest.mark.parametrize("seq", ["INT-INT", "STORM"])
def test_signals_after_the_report_change_nothing(seq: str, tmp_path: Path) -> None:
    """Signals once the JSON is printed and the exit code decided: the same exit, never death by the signal."""
    rc, out, err = interrupted_at("reported", SIGNAL_SEQUENCES[seq],
                                  ["check", "-c", "async-d2", "--json", "--trace-dir", str(tmp_path / "traces")],
                                  tmp_path)
    assert rc == 0, (rc, err[-2000:])
    assert json.loads(out)["result"] == "ok" and "Traceback" not in err


@pytest.mark.slow  # vLLM's import: a few seconds a case
@pytest.mark.parametrize("background, sig", [(False, signal.SIGINT), (True, signal.SIGTERM)],
                         ids=["SIGINT", "background-SIGTERM"])
def test_a_signal_while_vllm_is_imported_ends_the_run(background: bool, sig: signal.Signals, tmp_path: Path) -> None:
    """Sent once torch (imported by vLLM) logs its first line, i.e. in the middle of vLLM's import: exit 3 and
    the one line, within seconds (it never ended); in the background (SIGINT ignored) SIGTERM still acts."""
    from tests.vllm_guard import require_pinned_vllm

    require_pinned_vllm()
    p = subprocess.Popen([sys.executable, "-m", "asyncspec", "fuzz", "--target", "vllm", "--examples", "400", "--json",
                          "--out-dir", str(tmp_path)], cwd=tmp_path, text=True, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, preexec_fn=_ignore_sigint if background else None)
    try:
        assert p.stderr is not None
        first = p.stderr.readline()  # torch's first log line, while the import goes on
        assert first and p.poll() is None, first
        p.send_signal(sig)
        sent = time.monotonic()
        out, err = p.communicate(timeout=60)
    finally:
        p.kill()
    assert p.returncode == EXIT_PARTIAL and time.monotonic() - sent < 30, (p.returncode, err[-2000:])
    assert "Traceback" not in err and err.strip().splitlines()[-1].startswith("asyncspec: interrupted"), err[-2000:]


def test_an_interrupted_worker_reports_what_ran_and_what_did_not(tmp_path: Path) -> None:
    """``worker --json`` stopped mid-run (inside its first search, ``checker/bfs.py``'s pause point): the rows that
    ran to their end are reported (none here: a row's search lets the interrupt go on, so the row it cut is not
    reported half-done), every other row is named as not checked."""
    from asyncspec.checker.joint import EXPECTATIONS

    rc, out, err = interrupted_at("mid-run", SIGNAL_SEQUENCES["INT"], ["worker", "--json"], tmp_path)
    data = json.loads(out)
    assert rc == EXIT_PARTIAL and data["result"] == "partial" and data["interrupted"], (rc, err[-2000:])
    cut = EXPECTATIONS[len(data["configs"])]
    assert data["not_checked"][0] == f"{cut.config}/{cut.strategy}"
    assert len(data["configs"]) + len(data["not_checked"]) == len(EXPECTATIONS)
    assert [c["name"] for c in data["configs"]] == [f"{e.config}/{e.strategy}" for e in EXPECTATIONS][:len(data["configs"])]
