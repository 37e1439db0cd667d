"""Checkpoints of the compiled explorer: a stopped run resumes to the whole run's result, and a crafted
file is one line and exit 2, never a crash of the C search (``checker/compiled_checkpoint.py``,
``csrc/snapshot.h``).

The crafted files are a real checkpoint with one section, count or header key changed and the checksum
recomputed (as ``tests/test_checkpoint_mutations.py`` does for the fast explorer's): an array one entry
short or long, empty, with its largest or a negative value in the middle, of another kind; a count of
the wrong JSON type or range.  The default tier runs a sample; the whole set is ``slow``.
"""
from __future__ import annotations

import json
from array import array
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from asyncspec.checker import checkpoint_format as fmt, compiled, compiled_checkpoint as cc, configs as cfgs

from tests.cli_contract import assert_usage_error, invoke
from tests.test_checkpoint_mutations import _blob

pytestmark = pytest.mark.skipif(not compiled.built(), reason="the C extension is not built")

CONFIG = "async-d2-aborts"
PINNED = f"{cfgs.load_manifest()[CONFIG]['distinct_states']} distinct states"
Mutation = tuple[str, Callable[[], bytes]]


def _stopped_at(tmp_path: Path, name: str, states: int, *extra: str) -> dict[str, Any]:
    o = invoke("check", "-c", name, "--max-states", str(states), "--checkpoint", str(tmp_path), "--json",
               "--trace-dir", str(tmp_path / "t"), *extra)
    assert o.code == 3, o.stderr
    data: dict[str, Any] = json.loads(o.stdout)
    return data


def _untimed(data: dict[str, Any]) -> list[dict[str, Any]]:
    return [{k: v for k, v in c.items() if k not in ("seconds", "cpu_seconds", "bytes_per_state", "explorer")}
            for c in data["configs"]]


@pytest.mark.parametrize("name, states, extra", [("async-d2-aborts", 700, ()), ("async-d2-large", 30000, ("-j", "2")),
                                                 ("finding-stream-sessions-deadlock", 600, ())])
def test_a_stopped_run_resumes_to_the_whole_result(name: str, states: int, extra: tuple[str, ...],
                                                   tmp_path: Path) -> None:
    whole = invoke("check", "-c", name, "--json", "--trace-dir", str(tmp_path / "whole"))
    partial = _stopped_at(tmp_path, name, states, *extra)
    assert partial["configs"][0]["explorer"].startswith("compiled") and partial["configs"][0]["partial"]
    assert (tmp_path / f"{name}.ckpt").exists()
    resumed = invoke("check", "-c", name, "--checkpoint", str(tmp_path), "--resume", "--json",
                     "--trace-dir", str(tmp_path / "whole"), *extra)
    assert resumed.code == whole.code and _untimed(json.loads(resumed.stdout)) == _untimed(json.loads(whole.stdout))
    assert json.loads(resumed.stdout)["configs"][0]["explorer"].startswith("compiled")
    assert not (tmp_path / f"{name}.ckpt").exists()  # a complete run leaves nothing to resume


def test_a_fast_explorers_checkpoint_resumes_on_the_fast_explorer(tmp_path: Path) -> None:
    _stopped_at(tmp_path, CONFIG, 700, "--explorer", "fast")
    resumed = invoke("check", "-c", CONFIG, "--checkpoint", str(tmp_path), "--resume", "--json",
                     "--trace-dir", str(tmp_path / "t"))
    assert resumed.code == 0
    assert json.loads(resumed.stdout)["configs"][0]["explorer"] == \
        "fast (compiled: --resume: the checkpoint is not the compiled explorer's)"


def test_compiled_checkpoint_under_explorer_fast_is_one_line(tmp_path: Path) -> None:
    _stopped_at(tmp_path, CONFIG, 700)
    o = invoke("check", "-c", CONFIG, "--checkpoint", str(tmp_path), "--resume", "--explorer", "fast",
               "--trace-dir", str(tmp_path / "t"))
    assert_usage_error(o, rf"{CONFIG}\.ckpt: .*(another --checkpoint|use another)")


def _good(tmp_path: Path) -> bytes:
    _stopped_at(tmp_path, CONFIG, 700)
    return (tmp_path / f"{CONFIG}.ckpt").read_bytes()


def _mutations(good: bytes) -> Iterator[Mutation]:
    header, sections = fmt.parse(good)
    kinds = {e["name"]: e["kind"] for e in header["sections"]}
    plain = {k: v for k, v in header.items() if k not in ("sections", "format", "version")}

    def blob(h: dict[str, Any], s: dict[str, Any], k: dict[str, str] | None = None) -> Callable[[], bytes]:
        return lambda: _blob(h | {"format": header["format"], "version": header["version"]}, s, k or kinds)
    for name, kind in cc.ARRAYS.items():
        arr = sections[name]
        top = (1 << (8 * int(kind[1]) - (kind[0] == "i"))) - 1
        for label, changed in (("one short", arr[:-1]), ("one more", arr + arr[-1:]), ("empty", arr[:0]),
                               ("largest item", _set(arr, len(arr) // 2, top)),
                               ("negative item", _set(arr, len(arr) // 2, -2) if kind[0] == "i" else None),
                               ("first item bumped", _set(arr, 0, arr[0] + 1) if len(arr) else None)):
            if changed is not None:
                yield f"{name} {label}", blob(plain, sections | {name: changed})
        other = "u4" if kind != "u4" else "i4"
        retyped = array(fmt.KINDS[other], [min(abs(v), 1000) for v in arr])
        yield f"{name} as {other}", blob(plain, sections | {name: retyped}, kinds | {name: other})
    for key in (*cc.COUNTS, "found"):
        for value in (None, "x", -1, 2**70, [[0, 10**6]], [[99, 0]]):
            data = sections["data"] | {key: value}
            yield f"data.{key}={value!r}", blob(plain, sections | {"data": data})
    for key in plain:
        yield f"header.{key}='other'", blob(plain | {key: "other"}, sections)


def _set(arr: array[int], i: int, value: int) -> array[int]:
    out = array(arr.typecode, arr)
    out[i] = value
    return out


def _refused(make: Callable[[], bytes], tmp_path: Path) -> None:
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / f"{CONFIG}.ckpt").write_bytes(make())
    o = invoke("check", "-c", CONFIG, "--checkpoint", str(tmp_path), "--resume", "--trace-dir", str(tmp_path / "t"))
    if o.code == 0:  # a change no check can tell from a reached state (an action id): resumed, the whole count
        assert PINNED in o.stdout, o.stdout
        return
    assert_usage_error(o, rf"{CONFIG}\.ckpt: .*(delete it|use another|another --checkpoint|--explorer fast)")


def _all(tmp_path: Path) -> list[Mutation]:
    return list(_mutations(_good(tmp_path)))


def test_the_sample_of_crafted_checkpoints_is_refused_in_one_line(tmp_path: Path) -> None:
    mutations = _all(tmp_path)
    assert len(mutations) > 60
    refused = 0
    for label, make in mutations[::6]:
        _refused(make, tmp_path / label.replace(" ", "_").replace("/", "_")[:60])
        refused += 1
    assert refused >= 10


@pytest.mark.slow
def test_every_crafted_checkpoint_is_refused_in_one_line(tmp_path: Path) -> None:
    for k, (label, make) in enumerate(_all(tmp_path)):
        _refused(make, tmp_path / f"m{k}")


def test_the_named_default_configs_checkpoint_and_resume(tmp_path: Path) -> None:
    """Halfway through each pinned default config the compiled explorer covers, the checkpoint loads."""
    for name, cfg in cfgs.named_configs().items():
        pinned = cfgs.load_manifest().get(name)
        if cfg.extra.get("set") != "default" or compiled.not_covered(cfg) or not pinned:
            continue
        folder = tmp_path / name
        e = compiled.CompiledExplorer(cfg, max_states=max(2, pinned["distinct_states"] // 2), checkpoint=folder / "c")
        folder.mkdir()
        r = e.run()
        if not r.partial:
            continue
        fresh = compiled.CompiledExplorer(cfg, checkpoint=folder / "c", resume=True)
        assert fresh.run().distinct_states == pinned["distinct_states"], name
