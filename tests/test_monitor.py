"""The live monitor (``monitor/``): vLLM's schedulers with a spec twin, on vLLM's CPU engine.

Default tier: the window trace kind round-trips and replays; the monitored
scheduler classes run the ``vllm-engine`` target's cases clean at depths 1 and
2 (the target's own differential check passes with them in place); the engine's
outputs are identical with and without the monitor, in full and sampled
checking; a vLLM mutant is reported with a window that makes ``asyncspec
replay`` exit 1; bad settings and the wrong class give one line.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.vllm_guard import require_pinned_vllm

from asyncspec.checker.trace import TraceError
from asyncspec.checker.window_trace import WindowTrace, load_window, replay_window, save_window
from asyncspec.monitor.monitor_config import MonitorConfigError, settings_from_env
from asyncspec.monitor.twin import SpecTwin, empty_state
from asyncspec.spec import engine as eng
from asyncspec.spec.config import SpecConfig
from asyncspec.spec.engine import Action

require_pinned_vllm()

MUTANT = "sched_preempt_keeps_placeholders"


def _twin() -> SpecTwin:
    cfg = SpecConfig(name="monitor", requests=((1, 1),), batch_queue_depth=2, token_budget=8, num_blocks=8,
                     aborts=True, late_arrivals=True, forced_preemptions=5)
    twin = SpecTwin(cfg, empty_state(cfg, tuple(range(8))), window_size=4)
    twin.add("a", 5, 3)
    twin.add("b", 3, 2)
    for action in (eng.SCHEDULE, eng.SCHEDULE, eng.UPDATE_FROM_OUTPUT):
        twin.apply(Action(action))
    return twin


def _window(twin: SpecTwin, values: list[dict[str, Any]]) -> WindowTrace:
    start = twin.window_start_state()
    object.__setattr__(twin.cfg, "requests", tuple((p.num_prompt_tokens, p.max_tokens) for p in start.params))
    object.__setattr__(twin.cfg, "eos_positions", tuple((p.eos_position,) for p in start.params))
    return WindowTrace(twin.cfg, start, list(twin.window.actions), values, "test")


def test_window_trace_round_trips_and_replays_clean_or_divergent(tmp_path: Path) -> None:
    twin = _twin()
    a = twin.index_of["a"]
    computed = twin.state.counters[a].num_computed_tokens
    clean = _window(twin, [{"field": f"r{a}.num_computed_tokens", "engine": computed}])
    save_window(clean, tmp_path / "w.json")
    loaded = load_window(tmp_path / "w.json")
    assert loaded.actions == clean.actions and loaded.start == clean.start
    assert replay_window(loaded) == []
    wrong = _window(twin, [{"field": f"r{a}.num_computed_tokens", "engine": computed + 1}])
    assert replay_window(wrong) == [f"after step 5: r{a}.num_computed_tokens: spec={computed} engine={computed + 1}"]
    (tmp_path / "bad.json").write_text('{"asyncspec_monitor_window": 1}')
    with pytest.raises(TraceError, match="corrupt monitor window"):
        load_window(tmp_path / "bad.json")


def test_compaction_keeps_the_window_replayable() -> None:
    twin = _twin()
    while twin.state.batch_queue or any(twin.is_live(i) for i in range(len(twin.ids))):
        action = eng.enabled_actions(twin.cfg, twin.state)[0]
        assert action.name in (eng.SCHEDULE, eng.UPDATE_FROM_OUTPUT)
        twin.apply(action)
        twin.roll_if_full()
    assert twin.ids == [] and twin.state.params == ()  # both finished and compacted away
    twin.add("c", 2, 1)
    twin.apply(Action(eng.SCHEDULE))
    assert twin.ids == ["c"] and replay_window(_window(twin, [])) == []


def test_bad_settings_are_one_line() -> None:
    with pytest.raises(MonitorConfigError, match="ASYNCSPEC_MONITOR_ON_DIVERGENCE='crash': expected"):
        settings_from_env({"ASYNCSPEC_MONITOR_ON_DIVERGENCE": "crash"})
    with pytest.raises(MonitorConfigError, match="ASYNCSPEC_MONITOR_CHECK_EVERY='0'"):
        settings_from_env({"ASYNCSPEC_MONITOR_CHECK_EVERY": "0"})
    assert settings_from_env({}).check_every == 1


# ---------------------------------------------------------------- on vLLM's CPU engine


def test_vllm_engine_target_runs_clean_with_the_monitor_as_scheduler_cls(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from asyncspec.engine.vllm.engine_core_driver import EngineCoreDriver
    from asyncspec.monitor.selftest import monitor_class
    from asyncspec.statemachine_tests.vllm_engine import engine_target
    from asyncspec.statemachine_tests.vllm_engine.engine_campaign import run_fixed

    monkeypatch.setenv("ASYNCSPEC_MONITOR_DIR", str(tmp_path))
    seen: list[Any] = []

    def recording(base: type) -> type:
        class Recording(base):  # type: ignore[misc]
            def __init__(self, *args: Any, **kwargs: Any) -> None:
                super().__init__(*args, **kwargs)
                seen.append(self.monitor)
        return Recording

    classes = {depth: recording(monitor_class(depth)) for depth in (1, 2)}
    monkeypatch.setattr(engine_target, "EngineCoreDriver", lambda config, on_phase=None: EngineCoreDriver(
        config, on_phase=on_phase, scheduler_cls=classes[config.depth]))
    summary = run_fixed(40, seed=5, depths=(1, 2))
    assert summary["divergences"] == 0, summary["first_divergence"]
    assert sum(m.stats.divergences for m in seen) == 0
    assert sum(m.stats.checked_steps for m in seen) > 300
    assert {k for m in seen for k in m.stats.unmodelled} <= {"structured output"}
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("check_every", ["1", "3"])
def test_outputs_are_identical_with_and_without_the_monitor(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                            check_every: str) -> None:
    from asyncspec.monitor.selftest import run

    monkeypatch.setenv("ASYNCSPEC_MONITOR_DIR", str(tmp_path))
    monkeypatch.setenv("ASYNCSPEC_MONITOR_CHECK_EVERY", check_every)
    for depth in (1, 2):
        monitored, plain = run(depth, seed=1, monitored=True), run(depth, seed=1, monitored=False)
        assert monitored.outputs == plain.outputs and len(plain.outputs) == 24
        stats = monitored.stats
        assert stats.divergences == 0 and stats.checked_steps > 50, stats.summary()
        if check_every == "3":
            assert stats.resyncs > 10 and stats.unchecked_steps > 0


def test_a_long_running_engine_with_prefix_caching_stays_clean(monkeypatch: pytest.MonkeyPatch,
                                                                 tmp_path: Path) -> None:
    """One engine, one scheduler, workload after workload on a tight pool with prefix caching:
    the twin compacts its window many times and the engine's outputs do not change."""
    from asyncspec.engine.vllm.engine_core_driver import EngineCoreDriver
    from asyncspec.monitor.selftest import TIGHT_SHAPE, monitor_class, run_workload, tight_engine_config

    monkeypatch.setenv("ASYNCSPEC_MONITOR_DIR", str(tmp_path))
    monitored = EngineCoreDriver(tight_engine_config(2), scheduler_cls=monitor_class(2))
    plain = EngineCoreDriver(tight_engine_config(2))
    for seed in range(3):
        got = run_workload(monitored, seed, shape=TIGHT_SHAPE).outputs
        assert got == run_workload(plain, seed, shape=TIGHT_SHAPE).outputs
    stats = monitored.scheduler.monitor.stats
    assert stats.divergences == 0 and stats.checked_steps > 250 and stats.unchecked_steps == 0, stats.summary()
    assert len(monitored.scheduler.monitor.twin.state.params) <= 24  # compacted, not every request ever seen


def test_an_unmodelled_request_is_reported_once_and_checking_resumes_after_it(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from asyncspec.engine.vllm.engine_core_driver import EngineCoreDriver
    from asyncspec.monitor.selftest import engine_config, monitor_class

    monkeypatch.setenv("ASYNCSPEC_MONITOR_DIR", str(tmp_path))
    driver = EngineCoreDriver(engine_config(2), scheduler_cls=monitor_class(2))
    monitor = driver.scheduler.monitor
    driver.add_request("grammar", [5, 6, 7], max_tokens=4, ignore_eos=True, structured=True)
    driver.add_request("plain", [8, 9], max_tokens=12, ignore_eos=True)
    while "grammar" in driver.scheduler.requests:
        driver.step()
    unchecked = monitor.stats.unchecked_steps
    assert monitor.stats.unmodelled == {"structured output": 1} and unchecked > 0 and monitor.stats.checked_steps == 0
    while driver.has_work():
        driver.step()
    assert monitor.stats.resyncs == 1 and monitor.stats.checked_steps > 0 and monitor.stats.divergences == 0


def test_fail_mode_raises_in_the_engine_loop(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from asyncspec.engine.vllm.engine_core_driver import EngineCoreDriver
    from asyncspec.monitor.core import MonitorDivergence
    from asyncspec.monitor.selftest import engine_config, monitor_class

    monkeypatch.setenv("ASYNCSPEC_MONITOR_DIR", str(tmp_path))
    monkeypatch.setenv("ASYNCSPEC_MONITOR_ON_DIVERGENCE", "fail")
    driver = EngineCoreDriver(engine_config(1), scheduler_cls=monitor_class(1))
    driver.add_request("a", [5, 6, 7], max_tokens=6, ignore_eos=True)
    driver.step()
    twin = driver.scheduler.monitor.twin  # make the spec's twin wrong: the engine is not
    counters = list(twin.state.counters)
    counters[0] = counters[0]._replace(num_output_tokens=counters[0].num_output_tokens + 1)
    twin.state = twin.state._replace(counters=tuple(counters))
    with pytest.raises(MonitorDivergence, match=r"^asyncspec monitor: \S+: spec=.* engine=.*; replay: asyncspec replay "):
        driver.step()
    driver.scheduler.monitor.flush()
    assert len(list(tmp_path.iterdir())) == 1


def test_the_wrong_class_refuses_to_start_with_one_line() -> None:
    from asyncspec.engine.vllm.engine_core_driver import EngineCoreDriver
    from asyncspec.monitor.selftest import engine_config, monitor_class

    with pytest.raises(ValueError, match="cannot run an engine with async scheduling on: use --scheduler-cls "
                                         "asyncspec.monitor.MonitoredAsyncScheduler"):
        EngineCoreDriver(engine_config(2), scheduler_cls=monitor_class(1))


def test_scheduler_stats_carry_the_counts() -> None:
    from vllm.v1.metrics.stats import SchedulerStats

    from asyncspec.monitor.core import MonitorStats
    from asyncspec.monitor.monitor_scheduler import add_monitor_counts

    class Holder:
        stats = MonitorStats(checked_steps=7, unchecked_steps=2, divergences=1)

    out = add_monitor_counts(SchedulerStats(), Holder())
    assert out.num_kv_fetch_reqs_by_stage["asyncspec_monitor_checked_steps"] == 7
    assert out.num_kv_fetch_reqs_by_stage["asyncspec_monitor_divergences"] == 1
    assert add_monitor_counts(None, Holder()) is None


def test_a_vllm_mutant_is_reported_with_a_window_that_replays_to_exit_1(tmp_path: Path) -> None:
    run = subprocess.run([sys.executable, "-m", "asyncspec.monitor.selftest", "--mutant", MUTANT,
                          "--out", str(tmp_path), "--seeds", "3"], capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-2000:]
    result = json.loads(run.stdout.strip().splitlines()[-1])
    assert result["asyncspec_monitor_divergences"] >= 1, result
    replay_file = Path(result["replay_files"][0])
    replay = subprocess.run([sys.executable, "-m", "asyncspec", "replay", str(replay_file), "--json"],
                            capture_output=True, text=True, timeout=300)
    assert replay.returncode == 1, replay.stdout + replay.stderr
    report = json.loads(replay.stdout)
    assert report["kind"] == "monitor-window" and report["failures"]
    assert "num_output_placeholders" in report["failures"][-1]


def test_replay_of_a_corrupt_window_is_one_line_exit_2(tmp_path: Path) -> None:
    bad = tmp_path / "w.json"
    bad.write_text('{"asyncspec_monitor_window": 1, "config": {}}')
    run = subprocess.run([sys.executable, "-m", "asyncspec", "replay", str(bad)], capture_output=True,
                         text=True, timeout=120)
    assert run.returncode == 2 and run.stderr.count("\n") == 1 and "monitor window" in run.stderr
