"""Release settings (``engine/vllm/release_settings.py``): chosen from the probe, applied where only
the observation differs, and exact: forced on a release without the older behaviour, a setting
makes a clean trace diverge.

The other direction (an older release diverges without its setting and agrees with it) needs the
older releases' venvs: ``tests/fidelity/test_backtest_releases.py`` (slow tier).
"""
from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from asyncspec.engine.vllm import release_settings as rs
from asyncspec.engine.vllm import surfaces

DATA = Path(__file__).resolve().parent.parent / "data" / "releases"


def _present_except(monkeypatch: pytest.MonkeyPatch, *absent: str) -> None:
    """The probe answers: every capability present but ``absent``."""
    monkeypatch.setattr(surfaces, "has", lambda name: name not in absent)


def test_the_reference_release_needs_no_setting() -> None:
    assert rs.active() == ()
    for setting in rs.SETTINGS:
        assert surfaces.has(setting.capability), setting.name


def test_a_missing_capability_turns_its_setting_on(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(rs.ENV, raising=False)
    _present_except(monkeypatch, surfaces.STOP_TRIM_ROLLBACK, surfaces.ONE_WAITING_QUEUE)
    assert rs.active_names() == ["stop-trim-keeps-counters", "blocked-in-skipped-waiting"]


def test_the_environment_turns_settings_off_or_keeps_some(monkeypatch: pytest.MonkeyPatch) -> None:
    _present_except(monkeypatch, *(s.capability for s in rs.SETTINGS))
    monkeypatch.setenv(rs.ENV, "none")
    assert rs.active() == ()
    monkeypatch.setenv(rs.ENV, "null-head-in-deferred-frees, no-such-setting")
    assert rs.active_names() == ["null-head-in-deferred-frees"]
    assert rs.unknown_names() == ["no-such-setting"]


def test_each_setting_names_both_sides_and_the_reference_side_exists_in_0_33_0() -> None:
    from asyncspec.fidelity.fingerprint import locate
    from asyncspec.fidelity.source import VllmSource

    base = VllmSource.installed()
    names = [s.name for s in rs.SETTINGS]
    assert len(set(names)) == len(names)
    for setting in rs.SETTINGS:
        assert setting.reference_side and setting.older_side and setting.releases
        for symbol in setting.reference_side:
            assert locate(base, symbol) is not None, (setting.name, symbol)


def test_drift_cites_each_setting_beside_the_spec() -> None:
    from asyncspec.fidelity.cited import release_setting_citations
    from asyncspec.fidelity.source import VllmSource

    cited = release_setting_citations(VllmSource.installed())
    for setting in rs.SETTINGS:
        assert any(f"release setting {setting.name}" in who for who in cited.values()), setting.name


# ---- the observer, on stand-ins of a scheduler ---------------------------------------------------

def _block(block_id: int) -> Any:
    return SimpleNamespace(block_id=block_id, is_null=block_id == 0)


def _scheduler(**queues: Any) -> Any:
    manager = SimpleNamespace(req_to_blocks={})
    pool = SimpleNamespace(free_block_queue=SimpleNamespace(get_all_free_blocks=lambda: []), blocks=[])
    kv = SimpleNamespace(block_pool=pool, coordinator=SimpleNamespace(single_type_managers=[manager]))
    return SimpleNamespace(kv_cache_manager=kv, requests={}, **queues)


def _observer(monkeypatch: pytest.MonkeyPatch, *on: rs.ReleaseSetting, **queues: Any) -> Any:
    from asyncspec.statemachine_tests.scheduler.vllm_observer import SchedulerObserver

    monkeypatch.setattr(rs, "active", lambda: on)
    return SchedulerObserver(_scheduler(**queues), prefix_caching=False)


def test_blocked_in_skipped_waiting_reads_the_queue_schedule_reads_first(monkeypatch: pytest.MonkeyPatch) -> None:
    r = [SimpleNamespace(request_id=f"r{i}") for i in range(3)]
    queues = {"waiting": [r[0], r[2]], "skipped_waiting": [r[1]]}
    assert _observer(monkeypatch, rs.BLOCKED_IN_SKIPPED_WAITING, **queues)._waiting() == (1, 0, 2)
    assert _observer(monkeypatch, **queues)._waiting() == (0, 2)


def test_null_head_in_deferred_frees_drops_only_the_null_block(monkeypatch: pytest.MonkeyPatch) -> None:
    frees = [(3, [_block(0), _block(0), _block(4), _block(1)])]
    assert _observer(monkeypatch, rs.NULL_HEAD_IN_DEFERRED_FREES, deferred_frees=frees)._deferred_frees() == (
        (3, (0, 3)),)
    assert _observer(monkeypatch, deferred_frees=frees)._deferred_frees() == ((3, (-1, -1, 0, 3)),)


def _request(**counters: Any) -> Any:
    finished = counters.pop("finished")
    return SimpleNamespace(is_finished=lambda: finished[0], **counters)


def test_stop_trim_keeps_counters_takes_back_only_what_a_stop_trimmed(monkeypatch: pytest.MonkeyPatch) -> None:
    obs = _observer(monkeypatch, rs.STOP_TRIM_KEEPS_COUNTERS)
    done = [False]
    r = _request(num_output_tokens=1, num_output_placeholders=2, num_stale_output_tokens=0, finished=done)
    going = _request(num_output_tokens=1, num_output_placeholders=2, num_stale_output_tokens=0, finished=[False])
    stale = _request(num_output_tokens=1, num_output_placeholders=0, num_stale_output_tokens=1, finished=[False])
    obs.requests.update({0: r, 1: going, 2: stale})
    obs.before_delivery({0: 3, 1: 3, 2: 3})
    r.num_output_tokens, done[0] = 2, True  # a stop after the first of 3 returned tokens: 2 trimmed
    going.num_output_tokens = 4  # all 3 appended, still running
    stale.num_output_tokens, stale.is_finished = 2, lambda: True  # stale output never took C or H back
    obs.after_delivery()
    assert obs._trimmed == {0: (2, 2)}


def test_a_setting_forced_on_the_reference_release_makes_a_clean_trace_diverge(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The stop-trim trace (shrunk on 0.32.0) is clean on 0.33.0; with the setting forced on, the
    observer takes back tokens 0.33.0 already took back, and the trace diverges at the stop."""
    from asyncspec.statemachine_tests.scheduler.fuzz import replay

    trace = DATA / "stop-trim-0.32.0.json"
    assert replay(trace, "vllm") == 0
    monkeypatch.setattr(rs, "active", lambda: (rs.STOP_TRIM_KEEPS_COUNTERS,))
    assert replay(trace, "vllm") == 1
