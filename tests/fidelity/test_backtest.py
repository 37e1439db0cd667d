"""``asyncspec backtest`` over stand-in interpreters: each a script that answers as a Python with one
vLLM release would (its version, a campaign's JSON, a replay's exit, drift's items), so the
orchestration, the classification and the exit code are checked without installing a release.

The real run over the installed releases is ``tests/fidelity/test_backtest_releases.py`` (slow).
"""
from __future__ import annotations

import json
import stat
from pathlib import Path
from typing import Any

from tests.cli_contract import assert_matches_schema, assert_usage_error, invoke

from asyncspec.fidelity import backtest as bt
from asyncspec.fidelity.backtest_classes import KINDS, TABLE, classify

PRIORITY = "priority | schedule | scheduled [depth=2, policy=priority]"
SCHEDULE = "vllm.v1.core.sched.scheduler.Scheduler.schedule"


def _fake_python(folder: Path, version: str, buckets: list[str], replay_exit: int, changed: list[str]) -> Path:
    """A script answering as ``python`` with vLLM ``version``: ``fuzz`` reports ``buckets``,
    ``replay`` exits ``replay_exit``, ``drift`` lists ``changed``."""
    folder.mkdir(parents=True)
    report = {"examples": 40, "parts": {"base": 20, "priority": 20, "depth3": 0},
              "skipped_parts": [{"part": "depth3", "reason": "mrv2.config: no Triton", "examples": 20}],
              "buckets": [{"signature": s, "count": 2, "replay_file": str(folder / f"b{i}.json"), "first_example": i}
                          for i, s in enumerate(buckets)],
              "vllm": {"release_settings": ["stop-trim-keeps-counters"]}}
    (folder / "fuzz.json").write_text(json.dumps(report))
    (folder / "drift.json").write_text(json.dumps({"items": [{"symbol": s} for s in changed]}))
    script = folder / "python"
    script.write_text(f"""#!/bin/sh
case "$1" in
  -c) echo {version}; echo {folder}/vllm ;;
  -m) case "$3" in
        fuzz) cat {folder}/fuzz.json; exit {1 if buckets else 3} ;;
        replay) exit {replay_exit} ;;
        drift) cat {folder}/drift.json; exit 1 ;;
      esac ;;
esac
""")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return script


def _run(tmp_path: Path, *pythons: Path) -> tuple[int, dict[str, Any]]:
    o = invoke("backtest", *map(str, pythons), "--target", "vllm", "--out-dir", str(tmp_path / "out"), "--json",
               "--markdown", str(tmp_path / "table.md"))
    return o.code, json.loads(o.stdout)


def test_each_release_is_run_classified_and_replayed_on_the_next(tmp_path: Path) -> None:
    newer = _fake_python(tmp_path / "b", "0.33.0", [], replay_exit=0, changed=[SCHEDULE])
    older = _fake_python(tmp_path / "a", "0.32.0", [PRIORITY], replay_exit=0, changed=[])
    code, data = _run(tmp_path, newer, older)  # given newest first: run oldest first
    assert code == 0
    assert_matches_schema(data, "backtest")
    first, second = data["releases"]
    assert [first["version"], second["version"]] == ["0.32.0", "0.33.0"]
    assert first["parts_run"] == ["vllm:base", "vllm:priority"]
    assert first["parts_skipped"] == [{"part": "vllm:depth3", "reason": "mrv2.config: no Triton"}]
    (bucket,) = first["buckets"]
    assert bucket["classification"] == "bug-fixed-later" and bucket["finding"] == "V5"
    assert bucket["next_release"] == {"version": "0.33.0", "reproduces": False}
    assert bucket["changed_in_next"] == [SCHEDULE]
    assert second["buckets"] == []
    table = (tmp_path / "table.md").read_text()
    escaped = PRIORITY.replace("|", "\\|")  # pipes inside a cell are escaped
    assert f"`{escaped}` (2) | bug-fixed-later" in table and "0.33.0: gone" in table


def test_an_unclassified_bucket_fails_the_backtest(tmp_path: Path) -> None:
    newer = _fake_python(tmp_path / "b", "0.33.0", [], replay_exit=1, changed=[])
    older = _fake_python(tmp_path / "a", "0.31.0", ["base | schedule | scheduled [depth=2]"], replay_exit=0,
                         changed=[])
    code, data = _run(tmp_path, older, newer)
    assert code == 1
    (bucket,) = data["releases"][0]["buckets"]
    assert bucket["classification"] == "unclassified"
    assert bucket["next_release"] == {"version": "0.33.0", "reproduces": True}


def test_bad_interpreters_are_one_line(tmp_path: Path) -> None:
    assert_usage_error(invoke("backtest", str(tmp_path / "nowhere")), r"neither a venv folder nor a Python")
    one = _fake_python(tmp_path / "a", "0.32.0", [], 0, [])
    two = _fake_python(tmp_path / "b", "0.32.0", [], 0, [])
    assert_usage_error(invoke("backtest", str(one), str(two)), r"vLLM 0\.32\.0 is given twice")
    bare = tmp_path / "bare"
    bare.write_text("#!/bin/sh\nexit 1\n")
    bare.chmod(0o755)
    assert_usage_error(invoke("backtest", str(bare)), r"has no vLLM installed")


def test_the_table_is_well_formed() -> None:
    seen: set[tuple[str, str]] = set()
    for entry in TABLE:
        assert entry.classification in KINDS and entry.why and entry.upstream_change and entry.functions
        assert (entry.classification == "older-behaviour") == bool(entry.release_setting)
        assert (entry.classification == "bug-fixed-later") == bool(entry.finding)
        for signature in entry.signatures:
            for version in entry.releases:
                assert (signature, version) not in seen, "one judgement per bucket and release"
                seen.add((signature, version))
                assert classify(signature, version) is entry


def test_each_older_behaviour_names_a_real_release_setting_and_each_finding_is_written_up() -> None:
    from asyncspec.engine.vllm.release_settings import SETTINGS

    names = {s.name for s in SETTINGS}
    findings = (Path(__file__).resolve().parents[2] / "docs" / "findings_vllm.md").read_text()
    for entry in TABLE:
        if entry.release_setting:
            assert entry.release_setting in names
        if entry.finding:
            assert f"## {entry.finding}. " in findings


def test_parts_of_reads_both_shapes() -> None:
    ran, skipped = bt.parts_of({"parts": [{"part": "v1/depth1", "examples": 4}, {"part": "mrv2/depth3",
                                                                                   "examples": 0}],
                                "skipped_parts": []})
    assert ran == ["v1/depth1"] and skipped == []
