"""Every distinct divergence (``core/buckets.py``): a campaign keeps going, buckets its divergent
examples by signature and shrinks one replayable representative per bucket.

Two seeded bugs of the reference (``reference/reference_mutants.py``) at once: the reference
target (no vLLM import) gives two buckets, each bug alone one of them; ``--max-divergences``,
``--stop-at-first`` and ``--jobs 2`` (pool workers forked, so they inherit the mutants).
"""
from __future__ import annotations

import contextlib
import json
import multiprocessing
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from asyncspec.reference.reference_mutants import MUTANTS_BY_NAME, applied
from asyncspec.statemachine_tests.core.buckets import features
from asyncspec.statemachine_tests.core.replay_file import load_replay
from asyncspec.statemachine_tests.scheduler import shards
from asyncspec.statemachine_tests.scheduler.fuzz import EXIT_DIVERGENCE, EXIT_OK, EXIT_USAGE, fuzz_main, replay
from asyncspec.statemachine_tests.scheduler.profiles import BASE_PROFILE
from tests.cli_contract import assert_matches_schema

GUARD, DEFER = "no_max_tokens_guard", "free_immediately_despite_deferral"
EXAMPLES = 40  # seed 0: the guard bug from example 0 on, the deferral bug first in shard 1


@contextlib.contextmanager
def mutants(*names: str) -> Iterator[None]:
    """The reference with the named seeded bugs."""
    with contextlib.ExitStack() as stack:
        for name in names:
            stack.enter_context(applied(MUTANTS_BY_NAME[name]))
        yield


def fuzz_json(capsys: pytest.CaptureFixture[str], out: Path, *bugs: str, **kwargs: Any) -> tuple[int, dict[str, Any]]:
    """``asyncspec fuzz --target reference --profile base --examples 40 --seed 0 --json`` with ``bugs``."""
    with mutants(*bugs):
        rc = fuzz_main("reference", 600.0, 0, True, False, out, BASE_PROFILE,
                       examples=kwargs.pop("examples", EXAMPLES), **kwargs)
    data: dict[str, Any] = json.loads(capsys.readouterr().out)
    return rc, data


def test_two_bugs_give_two_buckets_each_with_a_replayable_representative(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc, data = fuzz_json(capsys, tmp_path, GUARD, DEFER)
    assert_matches_schema(data, "fuzz")
    buckets = data["buckets"]
    assert rc == EXIT_DIVERGENCE and data["examples"] == EXAMPLES and len(buckets) == 2, buckets
    assert data["divergences"] == sum(b["count"] for b in buckets) > 2
    assert buckets[0]["first_example"] < buckets[1]["first_example"]  # in order of first sighting
    assert data["replay_file"] == buckets[0]["replay_file"]
    for bucket in buckets:
        path = Path(bucket["replay_file"])
        w, events = load_replay(path)
        assert bucket["signature"].endswith(f"[{', '.join(features(w))}]")
        field = json.loads(path.read_text())["divergence"]["differences"][0]["field"]
        assert f"| {events[-1].kind} | {field}" in bucket["signature"]  # the representative stays in its bucket
        with mutants(GUARD, DEFER):
            assert replay(path, "reference", json_out=True) == EXIT_DIVERGENCE
        assert replay(path, "reference", json_out=True) == EXIT_OK  # the correct reference agrees
    capsys.readouterr()
    for bug in (GUARD, DEFER):  # each bug alone: one bucket, one of the two
        rc, alone = fuzz_json(capsys, tmp_path / bug, bug)
        assert rc == EXIT_DIVERGENCE and [b["signature"] for b in alone["buckets"]] in (
            [b["signature"]] for b in buckets), (bug, alone["buckets"])


def test_max_divergences_1_ends_the_campaign_at_the_first_bucket(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc, data = fuzz_json(capsys, tmp_path, DEFER, max_divergences=1)
    assert rc == EXIT_DIVERGENCE and len(data["buckets"]) == 1 and data["divergences"] == 1
    first = data["buckets"][0]["first_example"]
    assert data["examples"] == first + 1 < EXAMPLES  # cut at the example where it first shows
    _, whole = fuzz_json(capsys, tmp_path, DEFER)
    assert whole["buckets"][0]["first_example"] == first and whole["examples"] == EXAMPLES


def test_stop_at_first_ends_at_the_first_divergence_shrunk(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc, data = fuzz_json(capsys, tmp_path, GUARD, DEFER, stop_at_first=True)
    assert rc == EXIT_DIVERGENCE and data["divergences"] == 1 and len(data["buckets"]) == 1
    assert data["examples"] == data["buckets"][0]["first_example"] + 1 == 1
    with mutants(GUARD, DEFER):
        assert replay(Path(data["replay_file"]), "reference", json_out=True) == EXIT_DIVERGENCE
    capsys.readouterr()


def test_clean_run_lists_no_bucket_and_a_bad_limit_is_refused(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc, data = fuzz_json(capsys, tmp_path, examples=20)
    assert rc == EXIT_OK and data["buckets"] == [] and data["divergences"] == 0 and data["replay_file"] is None
    assert fuzz_main("reference", 5.0, 0, True, False, tmp_path, examples=20, max_divergences=0) == EXIT_USAGE
    captured = capsys.readouterr()
    assert captured.out == "" and len(captured.err.strip().splitlines()) == 1


def _fork_workers(monkeypatch: pytest.MonkeyPatch) -> None:
    """``--jobs`` pool workers forked (not spawned), so they run the reference with the mutants."""
    fork = multiprocessing.get_context("fork")
    monkeypatch.setattr(shards.multiprocessing, "get_context", lambda _: fork)


def test_the_buckets_are_the_same_with_one_or_two_jobs(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """The JSON (buckets, counts, replay files, examples) of ``--jobs 2`` is ``--jobs 1``'s."""
    _fork_workers(monkeypatch)
    _, one = fuzz_json(capsys, tmp_path, GUARD, DEFER)
    _, two = fuzz_json(capsys, tmp_path, GUARD, DEFER, jobs=2)
    one.pop("timing"), two.pop("timing")
    assert one == two and len(one["buckets"]) == 2


@pytest.mark.slow
def test_a_cut_shard_is_the_same_with_one_or_two_jobs(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """``--max-divergences 1`` cuts shard 0 after example 3: run again up to it in a worker."""
    _fork_workers(monkeypatch)
    _, one = fuzz_json(capsys, tmp_path, DEFER, max_divergences=1)
    _, two = fuzz_json(capsys, tmp_path, DEFER, jobs=2, max_divergences=1)
    one.pop("timing"), two.pop("timing")
    assert one == two and one["examples"] < EXAMPLES


def test_a_full_disk_keeps_the_report_and_names_the_unsaved_replay_file(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """The divergences are still printed and in the JSON; the files that could not be written are
    named (``unsaved_files``, one stderr line) and the run exits 2, not 70 and not a silent 1."""
    import errno
    import os

    from asyncspec.checker import atomic

    def full(fd: int, data: bytes) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    monkeypatch.setattr(atomic, "_write_all", full)
    with mutants(GUARD):
        rc = fuzz_main("reference", 600.0, 0, True, False, tmp_path, BASE_PROFILE, examples=EXAMPLES)
    captured = capsys.readouterr()
    data: dict[str, Any] = json.loads(captured.out)
    assert rc == EXIT_USAGE
    assert_matches_schema(data, "fuzz")
    assert data["divergences"] > 0 and data["buckets"] and data["buckets"][0]["replay_file"] is None
    assert len(data["unsaved_files"]) == len(data["buckets"])
    assert "fuzz-reference-seed0.json" in data["unsaved_files"][0]
    lines = [line for line in captured.err.splitlines() if line.startswith("asyncspec: error:")]
    assert len(lines) == 1 and "fuzz-reference-seed0.json" in lines[0]
