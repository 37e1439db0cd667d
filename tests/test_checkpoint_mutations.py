"""Crafted checkpoints, generated: a real checkpoint mutated, its checksum recomputed, resumed by the CLI.

A file whose SHA-256 matches again passes ``checker/checkpoint_format.py``; what stops it is the check of
every value against the model's shape (``checker/checkpoint_shape.py``) and of the store's arrays
(``checker/store.py``).  Each header key and each section (the six store arrays, every key of the data
section, every value table, the first pooled value of each named-tuple type field by field, the
actions) gets several hostile versions: a wrong JSON type, a wrong array length, a negative or
far-too-large number, an index out of range, another array kind.  Each must end with exit 2 and one
line naming the file, never an internal error (exit 70) or a traceback.  A value of the right type and
range is refused when a stored state then breaks an *always* property the file does not record; one that
breaks none is resumed from (only a re-exploration could tell it from a reached state: the checksum is no
signature), so those are not drawn here.  The default tier runs a sample; the whole set is ``slow``; and
checkpoints of the named configs must pass every check.
"""
from __future__ import annotations

import copy
import hashlib
import json
import tempfile
import types
import typing
from array import array
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from asyncspec.checker import checkpoint_format as fmt, checkpoint_values as cv, configs as cfgs
from asyncspec.checker.fast_explorer import FastExplorer

from tests.cli_contract import assert_usage_error, invoke

CONFIG = "async-free"
WRONG_JSON: tuple[Any, ...] = (None, "x", 1.5, [], {}, -1, 2**70)
"""Values of the wrong JSON type or range for every key of the data section (each key wants one kind)."""
Mutation = tuple[str, Callable[[], bytes]]


def _good() -> bytes:
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "c.ckpt"
        assert FastExplorer(cfgs.named_configs()[CONFIG], max_states=100, checkpoint=path).run().partial
        return path.read_bytes()


GOOD = _good()
HEADER, SECTIONS = fmt.parse(GOOD)
KINDS = {e["name"]: e["kind"] for e in HEADER["sections"]}


def _blob(header: dict[str, Any], sections: dict[str, Any], kinds: dict[str, str] | None = None) -> bytes:
    """The file of ``header`` and ``sections`` with a matching checksum, whatever the header holds."""
    kinds = kinds or KINDS
    payloads = [fmt._payload(kinds[name], data) for name, data in sections.items()]
    listed = [{"name": n, "kind": kinds[n], "bytes": len(p)} for n, p in zip(sections, payloads)]
    head = json.dumps({**header, "sections": listed}, separators=(",", ":")).encode()
    rest = b"".join([head, b"\n", *payloads])
    return b"".join([fmt.MAGIC, str(fmt.VERSION).encode(), b"\n", hashlib.sha256(rest).hexdigest().encode(), b"\n",
                     rest])


def _with_data(change: Callable[[dict[str, Any]], None]) -> Callable[[], bytes]:
    def make() -> bytes:
        data = copy.deepcopy(SECTIONS["data"])
        change(data)
        return _blob(HEADER, SECTIONS | {"data": data})
    return make


def _header_mutations() -> Iterator[Mutation]:
    for key in (k for k in HEADER if k != "sections"):
        for value in (None, 7, "other", [], 2**70):
            yield f"header.{key}={value!r}", lambda key=key, value=value: _blob(HEADER | {key: value}, SECTIONS)
        yield f"header.{key} dropped", lambda key=key: _blob({k: v for k, v in HEADER.items() if k != key}, SECTIONS)


def _array_mutations() -> Iterator[Mutation]:
    for name, kind in KINDS.items():
        if kind == "json":
            continue
        arr = SECTIONS[name]
        top = (1 << (8 * int(kind[1]) - (kind[0] == "i"))) - 1
        variants: dict[str, Callable[[], array[int]]] = {
            "one short": lambda arr=arr: arr[:-1], "one more": lambda arr=arr: arr + arr[-1:], "empty": lambda arr=arr: arr[:0],
            "largest item": lambda arr=arr, top=top: _set(arr, len(arr) // 2, top)}
        if kind[0] == "i":
            variants["negative item"] = lambda arr=arr: _set(arr, len(arr) // 2, -2)
        for label, make in variants.items():
            yield f"{name} {label}", lambda name=name, make=make: _blob(HEADER, SECTIONS | {name: make()})
        for other in (k for k in fmt.KINDS if k != kind):
            yield f"{name} as {other}", lambda name=name, other=other: _retyped(name, other)


def _set(arr: array[int], i: int, value: int) -> array[int]:
    out = array(arr.typecode, arr)
    out[i] = value
    return out


def _retyped(name: str, kind: str) -> bytes:
    """Section ``name``'s bytes read as another array kind (cut to whole items)."""
    raw = fmt._payload(KINDS[name], SECTIONS[name])
    size = int(kind[1])
    return _blob(HEADER, SECTIONS | {name: fmt._array(kind, raw[:len(raw) // size * size], name)}, KINDS | {name: kind})


def _data_mutations() -> Iterator[Mutation]:
    for key in SECTIONS["data"]:
        for value in (v for v in WRONG_JSON if v != SECTIONS["data"][key]):  # an empty list where one is: no change
            yield f"data.{key}={value!r}", _with_data(lambda d, key=key, value=value: d.__setitem__(key, value))
        yield f"data.{key} dropped", _with_data(lambda d, key=key: d.pop(key))
    yield "data.witnesses with an unknown event", _with_data(lambda d: d["witnesses"].__setitem__("no_such_event", True))
    yield "data.witnesses without an event", _with_data(lambda d: d["witnesses"].pop(sorted(d["witnesses"])[0]))
    yield "data.violations naming no state", _with_data(lambda d: d.__setitem__("violations", [["p", "m", 10**6]]))
    yield "data.head past the store", _with_data(lambda d: d.__setitem__("head", d["head"] + 1))
    yield "data.arity one more", _with_data(lambda d: d.__setitem__("arity", d["arity"] + 1))


def _value_mutations() -> Iterator[Mutation]:
    tables = SECTIONS["data"]["values"]
    for c in range(len(tables)):
        for value in WRONG_JSON:
            yield f"values[{c}][0]={value!r}", _with_data(lambda d, c=c, value=value: d["values"][c]["l"].__setitem__(0, value))
        yield f"values[{c}] emptied", _with_data(lambda d, c=c: d["values"][c]["l"].clear())
    yield "one value table fewer", _with_data(lambda d: d["values"].pop())
    for i in range(1, 3):
        for value in WRONG_JSON:
            yield f"actions[{i}]={value!r}", _with_data(lambda d, i=i, value=value: d["actions"]["l"].__setitem__(i, value))


def _hostile_for(hint: Any) -> list[Any]:
    """JSON values that are not of type ``hint`` (a field's annotation), or out of any range it allows."""
    if isinstance(hint, typing.TypeVar):
        hint = getattr(hint, "__default__")
    allowed = set()
    for h in (typing.get_args(hint) if typing.get_origin(hint) in (typing.Union, types.UnionType) else (hint,)):
        origin = typing.get_origin(h) or h
        allowed.add("int" if origin is int else "bool" if origin is bool else "str" if origin is str
                    else "null" if h is type(None) else "composite")
    values: list[Any] = [] if "null" in allowed else [None]
    values += [] if "str" in allowed else ["x"]
    values += [1.5, {"l": []}]
    values += [-1, 2**70, 10**6] if "int" in allowed else [] if "bool" in allowed else [7]
    values += [True] if "bool" not in allowed else [2]
    return values


def _pool_mutations() -> Iterator[Mutation]:
    data, known = SECTIONS["data"], cv.known_types()
    first: dict[int, int] = {}
    for k, (t, _) in enumerate(data["pool"]):
        first.setdefault(t, k)
    for t, k in sorted(first.items()):
        cls = known[data["types"][t]]
        for f, (field, hint) in enumerate(typing.get_type_hints(cls).items()):
            for value in _hostile_for(hint):
                def change(d: dict[str, Any], k: int = k, f: int = f, value: Any = value) -> None:
                    d["pool"][k][1][f] = value
                yield f"{cls.__name__}.{field}={value!r}", _with_data(change)


MUTATIONS: list[Mutation] = [*_header_mutations(), *_array_mutations(), *_data_mutations(), *_value_mutations(),
                             *_pool_mutations()]
SAMPLE = MUTATIONS[::max(1, len(MUTATIONS) // 12)]


def _refused(make: Callable[[], bytes], tmp_path: Path) -> None:
    (tmp_path / f"{CONFIG}.ckpt").write_bytes(make())
    o = invoke("check", "-c", CONFIG, "--checkpoint", str(tmp_path), "--resume", "--trace-dir", str(tmp_path / "t"))
    assert_usage_error(o, rf"{CONFIG}\.ckpt: .*; (delete it|use another|.*another --checkpoint)")


def test_the_mutations_cover_every_section_and_header_key() -> None:
    labels = " ".join(label for label, _ in MUTATIONS)
    assert all(f"header.{k}=" in labels for k in HEADER if k != "sections")
    assert all(f"{name} " in labels for name in KINDS if name != "data")
    assert all(f"data.{k}=" in labels for k in SECTIONS["data"])
    assert {"RequestCounters.num_computed_tokens=-1", "StepEntry.req=1000000", "Action.name=None"} <= \
        {label for label, _ in MUTATIONS}
    assert len(MUTATIONS) > 400 and 10 <= len(SAMPLE) <= 14


@pytest.mark.parametrize("label, make", SAMPLE, ids=[label for label, _ in SAMPLE])
def test_a_crafted_checkpoint_is_one_line_exit_2(label: str, make: Callable[[], bytes], tmp_path: Path) -> None:
    _refused(make, tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("label, make", MUTATIONS, ids=[label for label, _ in MUTATIONS])
def test_every_crafted_checkpoint_is_one_line_exit_2(label: str, make: Callable[[], bytes], tmp_path: Path) -> None:
    _refused(make, tmp_path)


def test_the_unmutated_file_rebuilt_here_resumes(tmp_path: Path) -> None:
    """The rebuilding itself is faithful: the same sections give a file that resumes to the whole result."""
    (tmp_path / f"{CONFIG}.ckpt").write_bytes(_blob({k: v for k, v in HEADER.items() if k != "sections"}, SECTIONS))
    o = invoke("check", "-c", CONFIG, "--checkpoint", str(tmp_path), "--resume", "--json",
               "--trace-dir", str(tmp_path / "t"))
    assert o.code == 0 and json.loads(o.stdout)["configs"][0]["distinct_states"] == 7397, o.stderr


def test_another_models_checkpoint_is_checked_against_its_own_types(tmp_path: Path) -> None:
    """A joint (scheduler + worker) checkpoint resumes; a worker field of the wrong type or range is refused."""
    from asyncspec.checker import checkpoint
    from asyncspec.checker.joint import JointModel
    from asyncspec.spec.worker import WorkerConfig

    cfg = cfgs.worker_configs()["worker-d2"]
    model = JointModel(cfg, WorkerConfig("v2"), ())
    path = tmp_path / "j.ckpt"
    assert FastExplorer(cfg, model=model, max_states=60, checkpoint=path).run().partial
    assert len(checkpoint.load(path, cfg, True, model.name)["store"]) >= 60
    header, sections = fmt.parse(path.read_bytes())
    pool, types_ = sections["data"]["pool"], sections["data"]["types"]
    k = next(i for i, (t, _) in enumerate(pool) if types_[t] == "spec.worker.WorkerState")
    meta = {key: v for key, v in header.items() if key != "sections"}
    for value, reason in (("x", "not an integer"), (-6, "outside -5"), (2**40, "outside")):
        data = copy.deepcopy(sections["data"])
        data["pool"][k][1][10] = value  # WorkerState.steps
        kinds = {e["name"]: e["kind"] for e in header["sections"]}
        path.write_bytes(_blob(meta, sections | {"data": data}, kinds))
        with pytest.raises(checkpoint.CheckpointError, match=rf"malformed checkpoint \(.*steps is .*{reason}"):
            checkpoint.load(path, cfg, True, model.name)


@pytest.mark.parametrize("field, value", [(1, 9), (3, 9)], ids=["num_output_tokens=9", "num_output_placeholders=9"])
def test_an_in_range_value_that_breaks_an_invariant_is_refused(field: int, value: int, tmp_path: Path) -> None:
    """Well typed and within range, yet a stored state breaks an *always* property the file does not record:
    the explorer checked every state as it added it, so no run of this tool wrote that.  (A value that breaks
    none, e.g. ``num_computed_tokens`` 30 of a 3-token prompt, is resumed from: only its successors break one,
    and only a re-exploration could tell it from a state the run reached.)"""
    data = SECTIONS["data"]
    k = next(i for i, (t, fields) in enumerate(data["pool"])
             if data["types"][t] == "spec.request.RequestCounters" and fields[0] == 0)

    def change(d: dict[str, Any]) -> None:
        d["pool"][k][1][field] = value
    (tmp_path / f"{CONFIG}.ckpt").write_bytes(_with_data(change)())
    o = invoke("check", "-c", CONFIG, "--checkpoint", str(tmp_path), "--resume", "--trace-dir", str(tmp_path / "t"))
    assert_usage_error(o, r"malformed checkpoint \(state \d+ (breaks '\w+', which it does not record|is no state)")


def _checkable(most: int) -> list[str]:
    """The named configs ``check`` explores, of at most ``most`` pinned states (``configs/manifest.json``)."""
    pinned = cfgs.load_manifest()
    return [n for n, c in cfgs.named_configs().items() if not (c.sliding_window or c.kv_connector)
            and pinned.get(n, {}).get("distinct_states", most + 1) <= most]


def _round_trip(name: str, states: int | None, tmp_path: Path) -> None:
    """Stopped at ``states`` (None: halfway through the pinned count), the checkpoint loads: no false refusal."""
    from asyncspec.checker import checkpoint

    cfg = cfgs.named_configs()[name]
    path = tmp_path / "c.ckpt"
    cut = states or max(2, cfgs.load_manifest()[name]["distinct_states"] // 2)
    r = FastExplorer(cfg, stop_on_first=False, max_states=cut, checkpoint=path).run()
    assert r.partial and path.exists(), name
    assert len(checkpoint.load(path, cfg, True)["store"]) == r.distinct_states


@pytest.mark.parametrize("name", _checkable(10_000)[::3])
def test_a_checkpoint_of_a_named_config_passes_the_checks(name: str, tmp_path: Path) -> None:
    _round_trip(name, 20, tmp_path)


@pytest.mark.slow  # the largest, async-d2-4req, explores 160,000 states
@pytest.mark.parametrize("name", _checkable(400_000))
def test_a_checkpoint_of_every_named_config_halfway_passes_the_checks(name: str, tmp_path: Path) -> None:
    """Stopped halfway, where the values reach far from the initial states: every check still passes."""
    _round_trip(name, None, tmp_path)
