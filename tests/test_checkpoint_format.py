"""Checkpoints are data, never pickle: round trips, and every kind of bad file is one line, exit 2.

``checker/checkpoint_format.py`` (checksum, JSON header, arrays), ``checker/checkpoint_values.py``
(values as JSON, only known types built), ``checker/checkpoint.py`` (what the explorer saves).
"""
from __future__ import annotations

import doctest
import os
import pickle
import subprocess
import sys
from array import array
from pathlib import Path
from typing import Any

import pytest

from asyncspec.checker import checkpoint, checkpoint_format as fmt, checkpoint_values as cv, configs as cfgs
from asyncspec.checker.fast_explorer import FastExplorer
from asyncspec.checker.joint import JointState
from asyncspec.checker.store import PackedStore
from asyncspec.spec.state import initial_states
from asyncspec.spec.worker import initial_worker_state

from tests.cli_contract import assert_usage_error, invoke

CONFIG = "async-free"


def _json(r: Any) -> dict[str, Any]:
    data: dict[str, Any] = r.to_json()
    data.pop("seconds")
    return data


@pytest.fixture(scope="module")
def good(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    """The bytes of a checkpoint of ``CONFIG`` stopped at 100 states."""
    path = tmp_path_factory.mktemp("good") / "c.ckpt"
    assert FastExplorer(cfgs.named_configs()[CONFIG], max_states=100, checkpoint=path).run().partial
    return path.read_bytes()


def _resume_cli(folder: Path, blob: bytes) -> Any:
    (folder / f"{CONFIG}.ckpt").write_bytes(blob)
    return invoke("check", "-c", CONFIG, "--checkpoint", str(folder), "--resume")


def _rewritten(blob: bytes, change: Any) -> bytes:
    """``blob`` with its sections changed by ``change`` and a checksum that matches again."""
    header, sections = fmt.parse(blob)
    change(sections)
    kinds = {e["name"]: e["kind"] for e in header["sections"]}
    meta = {k: v for k, v in header.items() if k not in ("format", "version", "sections")}
    return fmt.dump(meta, [(name, kinds[name], data) for name, data in sections.items()])


# ---------------------------------------------------------------- round trips


@pytest.mark.parametrize("module", [fmt, cv], ids=lambda m: m.__name__)
def test_doctests(module: Any) -> None:
    assert doctest.testmod(module).failed == 0


def test_values_round_trip_as_json_data_only() -> None:
    cfg = cfgs.worker_configs()["worker-d2"]
    s = initial_states(cfg)[0]
    value = [JointState(s, initial_worker_state(cfg)), {"k": (1, None)}, frozenset({True, "x"}), 2.5]
    enc = cv.Encoder()
    data = enc.encode(value)
    got = cv.Decoder(enc.types, enc.pool).decode(data)
    assert got == value and "checker.joint.JointState" in enc.types
    assert got[0].engine.params[0] is got[0].engine.params[0]  # shared as written
    with pytest.raises(TypeError, match="cannot hold"):
        cv.Encoder().encode(object())
    with pytest.raises(cv.ValueFormatError, match="unknown type 'os.system'"):
        cv.Decoder(["os.system"], [[0, ["ls"]]])
    with pytest.raises(cv.ValueFormatError, match="does not hold"):
        cv.Decoder(enc.types, []).decode(data)
    with pytest.raises(cv.ValueFormatError, match="fields, not"):
        cv.Decoder(["spec.engine.Action"], [[0, ["abort"]]])
    deep: Any = 1
    for _ in range(100):
        deep = [deep]
    with pytest.raises(cv.ValueFormatError, match="deeper than"):
        cv.Decoder([], []).decode(deep)


def test_a_wide_store_round_trips_and_a_broken_one_is_named() -> None:
    g = PackedStore(2)
    g.add((1, 2), -1, 0, 0)
    g.add((70_000, 3), 0, 1, 1)  # past 65,535: every key re-packed with four bytes
    g.add_edge(0, 1)
    g.end_expansion()
    snap = g.snapshot()
    back = PackedStore.restore(snap, [70_001, 4])
    assert snap["wide"] and back.snapshot() == snap and back.add((70_000, 3), 0, 1, 1) == (1, False)
    with pytest.raises(ValueError, match="component 0 that its table does not hold"):
        PackedStore.restore(snap, [70_000, 4])
    with pytest.raises(ValueError, match="an edge to a state that does not exist"):
        PackedStore.restore({**snap, "edge_target": array("i", [2])}, [70_001, 4])


def test_a_run_with_a_violation_resumes_to_the_whole_result(tmp_path: Path) -> None:
    cfg = cfgs.named_configs()["finding-frontier-strict"]
    whole = FastExplorer(cfg, stop_on_first=False)
    expected = _json(whole.run())
    path = tmp_path / "f.ckpt"
    partial = FastExplorer(cfg, stop_on_first=False, max_states=10, checkpoint=path).run()
    assert partial.partial and partial.violations and path.read_bytes().startswith(b"asyncspec checkpoint v2\n")
    resumed = FastExplorer(cfg, stop_on_first=False, checkpoint=path, resume=True)
    assert _json(resumed.run()) == expected
    assert resumed.store.snapshot() == whole.store.snapshot() and not path.exists()


def test_the_cli_resumes_its_own_checkpoint(tmp_path: Path, good: bytes) -> None:
    o = _resume_cli(tmp_path, good)
    assert o.code == 0, o.stderr


# ---------------------------------------------------------------- bad files: one line, exit 2


class _Payload:
    """A pickle that makes a folder when unpickled: what a crafted checkpoint could run."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        return os.mkdir, (str(self.marker),)


def test_a_crafted_pickle_is_never_unpickled(tmp_path: Path) -> None:
    control = tmp_path / "control"
    pickle.loads(pickle.dumps(_Payload(control)))
    assert control.is_dir()  # the payload is live: unpickling it runs its code
    marker = tmp_path / "marker"
    (tmp_path / "ck").mkdir()
    (tmp_path / "ck" / f"{CONFIG}.ckpt").write_bytes(pickle.dumps(_Payload(marker)))
    p = subprocess.run([sys.executable, "-m", "asyncspec", "check", "-c", CONFIG, "--checkpoint",
                        str(tmp_path / "ck"), "--resume"], capture_output=True, text=True, timeout=120)
    assert not marker.exists()
    assert p.returncode == 2 and p.stderr.count("\n") == 1 and "a pickle file" in p.stderr, p.stderr
    assert f"{CONFIG}.ckpt" in p.stderr and "delete it or choose another --checkpoint folder" in p.stderr


def _truncated(b: bytes) -> bytes:
    return b[:len(b) // 2]


def _flipped(b: bytes) -> bytes:
    return b[:-10] + bytes([b[-10] ^ 1]) + b[-9:]


def _bad_parent(sections: dict[str, Any]) -> None:
    sections["parent"][5] = 10**6


def _unknown_type(sections: dict[str, Any]) -> None:
    sections["data"]["types"].append("os.system")


def _short_keys(sections: dict[str, Any]) -> None:
    del sections["keys"][:3]


BAD_FILES = [
    ("empty", lambda good: b"", "an empty file"),
    ("a folder", None, "cannot read the checkpoint"),
    ("png", lambda good: b"\x89PNG\r\n\x1a\n" + bytes(64), "not an asyncspec checkpoint"),
    ("pickle protocol 2", lambda good: pickle.dumps({"format": 1}, protocol=2), "a pickle file"),
    ("pickle protocol 5", lambda good: pickle.dumps({"format": 1}, protocol=5), "a pickle file"),
    ("other format version", lambda good: good.replace(b" v2\n", b" v9\n", 1), "format version 9"),
    ("truncated", _truncated, "checksum does not match"),
    ("one bit flipped", _flipped, "checksum does not match"),
    ("parent out of range", lambda good: _rewritten(good, _bad_parent), "malformed.*parent"),
    ("unknown value type", lambda good: _rewritten(good, _unknown_type), "malformed.*unknown type"),
    ("keys cut short", lambda good: _rewritten(good, _short_keys), "malformed.*keys"),
]


@pytest.mark.parametrize("kind, make, reason", BAD_FILES, ids=[k for k, _, _ in BAD_FILES])
def test_a_bad_checkpoint_file_is_one_line_exit_2(tmp_path: Path, good: bytes, kind: str, make: Any,
                                                  reason: str) -> None:
    if make is None:
        (tmp_path / f"{CONFIG}.ckpt").mkdir()
        o = invoke("check", "-c", CONFIG, "--checkpoint", str(tmp_path), "--resume")
    else:
        o = _resume_cli(tmp_path, make(good))
    assert_usage_error(o, rf"{CONFIG}\.ckpt: .*{reason}.*; (delete it or choose another --checkpoint folder)")


def test_a_checkpoint_of_another_config_names_it(tmp_path: Path) -> None:
    path = tmp_path / f"{CONFIG}.ckpt"
    FastExplorer(cfgs.named_configs()["async-d2"], max_states=50, checkpoint=path).run()
    o = invoke("check", "-c", CONFIG, "--checkpoint", str(tmp_path), "--resume")
    assert_usage_error(o, r"a checkpoint of config 'async-d2' with other settings.*another --checkpoint")


def test_a_checkpoint_of_another_spec_version_is_refused(tmp_path: Path, good: bytes,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(checkpoint, "spec_fingerprint", lambda: "another")
    assert_usage_error(_resume_cli(tmp_path, good), r"written by another spec version")
