"""Bad-input corpus, generated: valid files mutated by Hypothesis, each mutation with ONE outcome.

A mutation that breaks the file (a required key dropped, an unknown key added, a value of the
wrong type) must end with exit 2 and one line naming that key; a mutation that leaves the file
valid (text of a description, key order, indentation, a new valid manifest entry) must give the
unmutated file's normal result.  Formats: config TOML, checker traces, fuzz replay files, the
manifest; engine cases, monitor windows and the sglang and torch replay files with a hostile value (a wrong
type, nesting past the limit, a 5,000-digit integer) at every key their schemas type, for ``replay`` and
``replay --html`` (all in ``slow``, 25 of them in the default tier), and the replay files with an unknown key
in each of their objects.
"""
from __future__ import annotations

import json
import math
import re
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from asyncspec.checker import configs as cfgs
from asyncspec.checker.configs import config_schema
from tests.cli_contract import assert_usage_error, invoke

SETTINGS = settings(max_examples=25, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture])  # the same inputs every run
BASE: dict[str, Any] = {"name": "gen", "description": "generated", "requests": [[3, 3], [2, 3], [2, 1]],
                        "batch_queue_depth": 1, "token_budget": 4, "block_size": 2, "num_blocks": 3}
PROPS = config_schema()["properties"]
INT_KEYS = sorted(k for k, v in PROPS.items() if v.get("type") == "integer")
BOOL_KEYS = sorted(k for k, v in PROPS.items() if v.get("type") == "boolean")
KEY = st.from_regex(r"[a-z][a-z_]{0,15}", fullmatch=True)


def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf") if math.isinf(v) else repr(v)
    if isinstance(v, str):
        return json.dumps(v)  # an ASCII TOML basic string (json escapes every control character we draw)
    if isinstance(v, list):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    return str(v)


def _toml(data: dict[str, Any]) -> str:
    return "".join(f"{k} = {_toml_value(v)}\n" for k, v in data.items())


def _check(data: dict[str, Any]) -> Any:
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "gen.toml"
        path.write_text(_toml(data))
        return invoke("check", "-c", str(path), "--trace-dir", str(Path(d) / "t"))


@SETTINGS
@given(st.sampled_from(["name", "requests"]))
def test_config_without_a_required_key(key: str) -> None:
    assert_usage_error(_check({k: v for k, v in BASE.items() if k != key}), rf"'{key}' is required$")


@SETTINGS
@given(KEY.filter(lambda k: k not in PROPS))
def test_config_with_an_unknown_key(key: str) -> None:
    assert_usage_error(_check(BASE | {key: 1}), rf"unknown setting '{re.escape(key)}'")


@SETTINGS
@given(st.sampled_from(INT_KEYS),
       st.one_of(st.floats(allow_nan=True, allow_infinity=True).filter(lambda f: not f.is_integer()),
                 st.text(alphabet="abc123", max_size=5), st.booleans()))
def test_config_with_a_non_integer(key: str, value: Any) -> None:
    assert_usage_error(_check(BASE | {key: value}), rf"'{key}' must be an integer \(got ")


@SETTINGS
@given(st.sampled_from(BOOL_KEYS), st.one_of(st.integers(-2**63, 2**63 - 1), st.text(alphabet="yesno", max_size=4)))
def test_config_with_a_non_boolean(key: str, value: Any) -> None:
    assert_usage_error(_check(BASE | {key: value}), rf"'{key}' must be true or false \(got ")


@SETTINGS
@given(st.text(alphabet=st.characters(codec="ascii", exclude_categories=("Cc",)), max_size=40), st.randoms())
def test_config_still_valid_after_a_harmless_mutation(description: str, rnd: Any) -> None:
    """A new description and any key order: the same result as the named config sync-d1."""
    items = list((BASE | {"description": description}).items())
    rnd.shuffle(items)
    o = _check(dict(items))
    assert o.code == 0 and "gen: ok — 356 distinct states, depth 12" in o.stdout, (o.stdout, o.stderr)


def _trace() -> dict[str, Any]:
    from asyncspec.checker.witness import witness_trace

    trace = witness_trace(cfgs.named_configs()["sync-d1"], "preemption")
    assert trace is not None
    return trace.to_json()


TRACE = _trace()


def _replay(text: str, *args: str) -> Any:
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "t.json"
        path.write_text(text)
        return invoke("replay", str(path), *args)


@SETTINGS
@given(st.sampled_from(["config", "eos_positions", "actions"]))
def test_trace_without_a_required_key(key: str) -> None:
    data = {k: v for k, v in TRACE.items() if k != key}
    assert_usage_error(_replay(json.dumps(data)), rf"corrupt trace: '{key}' is required$")


@SETTINGS
@given(KEY.filter(lambda k: k not in TRACE))
def test_trace_with_an_unknown_key(key: str) -> None:
    assert_usage_error(_replay(json.dumps(TRACE | {key: None})), rf"corrupt trace: unknown key '{re.escape(key)}'")


@SETTINGS
@given(st.integers(0, 2), st.floats(allow_nan=False, allow_infinity=False).filter(lambda f: not f.is_integer()))
def test_trace_with_a_float_eos_position(index: int, value: float) -> None:
    eos = list(TRACE["eos_positions"])
    eos[index] = value
    assert_usage_error(_replay(json.dumps(TRACE | {"eos_positions": eos})),
                       rf"'eos_positions\[{index}\]' must be an integer")


@SETTINGS
@given(st.integers(0, 8), st.randoms())
def test_trace_still_valid_after_reformatting(indent: int, rnd: Any) -> None:
    items = list(TRACE.items())
    rnd.shuffle(items)
    o, before = _replay(json.dumps(dict(items), indent=indent)), _replay(json.dumps(TRACE))
    assert o.code == before.code == 0 and o.stdout.splitlines()[-1] == before.stdout.splitlines()[-1], o.stdout


REPLAY = {"asyncspec_fuzz_replay": 1, "target": "reference",
          "workload": {"requests": [[4, 2, 0], [3, 1, 1]], "depth": 2, "num_blocks": 16},
          "events": ["add_request r0", "schedule", "add_request r1", "schedule", "deliver"]}


def _workload_keys() -> list[str]:
    from asyncspec.statemachine_tests.core.replay_file import workload_schema

    return list(workload_schema()["properties"])


@SETTINGS
@given(KEY.filter(lambda k: k not in _workload_keys()))
def test_fuzz_replay_with_an_unknown_workload_key(key: str) -> None:
    data = REPLAY | {"workload": REPLAY["workload"] | {key: 1}}
    o = _replay(json.dumps(data), "--target", "reference")
    assert_usage_error(o, rf"unknown key '{re.escape(key)}' in 'workload'")


@SETTINGS
@given(st.sampled_from(["depth", "block_size", "num_blocks", "token_budget", "max_num_seqs"]),
       st.one_of(st.floats(allow_nan=False).filter(lambda f: not f.is_integer()), st.text(max_size=3)))
def test_fuzz_replay_with_a_non_integer_setting(key: str, value: Any) -> None:
    data = REPLAY | {"workload": REPLAY["workload"] | {key: value}}
    assert_usage_error(_replay(json.dumps(data), "--target", "reference"), rf"'workload.{key}' must be an integer")


@SETTINGS
@given(st.integers(0, 6), st.randoms())
def test_fuzz_replay_still_valid_after_reformatting(indent: int, rnd: Any) -> None:
    items = list(REPLAY.items())
    rnd.shuffle(items)
    o = _replay(json.dumps(dict(items), indent=indent), "--target", "reference")
    assert o.code == 0 and "spec and reference agree after every event" in o.stdout, (o.stdout, o.stderr)


@SETTINGS
@given(st.from_regex(r"[a-z][a-z0-9-]{0,20}", fullmatch=True), st.integers(1, 10**9), st.integers(0, 999),
       st.sampled_from(["ok", "float", "negative", "extra"]))
def test_manifest_entries(name: str, states: int, depth: int, how: str) -> None:
    entry: dict[str, Any] = {"distinct_states": states, "depth": depth}
    if how == "float":
        entry["depth"] = depth + 0.5
    elif how == "negative":
        entry["distinct_states"] = -states
    elif how == "extra":
        entry["seconds"] = 1
    with tempfile.TemporaryDirectory() as d, pytest.MonkeyPatch.context() as mp:
        path = Path(d) / "manifest.json"
        path.write_text(json.dumps({name: entry}))
        mp.setattr(cfgs, "manifest_path", lambda: path)
        o = invoke("configs")
    if how == "ok":
        assert o.code == 0 and o.stderr == "" and "sync-d1" in o.stdout
    else:
        pattern = {"float": rf"'{name}.depth' must be an integer", "negative": rf"'{name}.distinct_states' must be >= 1",
                   "extra": rf"unknown key 'seconds' in '{name}'"}[how]
        assert_usage_error(o, pattern)


@pytest.mark.parametrize("mutate, pattern", [
    (lambda w: w | {"config": w["config"] | {"requests": []}}, r"'config.requests' must list at least 1 item"),
    (lambda w: w | {"actions": [7]}, r"corrupt monitor window: 'actions\[0\]' must be a string \(got 7\)"),
    (lambda w: {k: v for k, v in w.items() if k != "start_state"}, r"corrupt monitor window: 'start_state' is req"),
    (lambda w: w | {"start_state": {}}, r"corrupt monitor window: 'batch_queue' is required in 'start_state'$"),
    (lambda w: w | {"extra": 1}, r"corrupt monitor window: unknown key 'extra'"),
    (lambda w: w | {"config": w["config"] | {"name": "../w"}}, r"'name' must match"),
], ids=["no-requests", "int-action", "no-start", "empty-start", "extra-key", "bad-name"])
def test_bad_monitor_window(tmp_path: Path, mutate: Any, pattern: str) -> None:
    from asyncspec.checker.window_trace import WindowTrace
    from asyncspec.spec.state import initial_state

    cfg = cfgs.named_configs()["sync-d1"]
    window = WindowTrace(cfg, initial_state(cfg, (0, 0, 0)), [], [], "seen", {}).to_json()
    assert_usage_error(_replay(json.dumps(mutate(window))), pattern)


# ------------------------------------------- engine cases and monitor windows: every key, from the schemas
#
# The valid file is walked beside its closed schema; every key and list item the schema types gets three hostile
# values: a value of the wrong type, a list nested past the loaders' depth limit, an integer of 5,000 digits.
# A key added to a schema gets its hostile inputs without a line here.

WRONG = {"integer": (1.5, "an integer"), "boolean": (1, "true or false"), "string": (3, "a string"),
         "array": ({}, "a list"), "object": ([], "a table of keys"), "number": ("x", "a finite number")}


def _where(path: tuple[Any, ...]) -> str:
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


def typed_paths(schema: dict[str, Any], data: Any, path: tuple[Any, ...] = ()) -> list[tuple[tuple[Any, ...], str]]:
    """(path, JSON type) of every value of ``data`` whose schema names one type, walking objects and lists."""
    out = [(path, schema["type"])] if isinstance(schema.get("type"), str) and path else []
    if isinstance(data, dict):
        for key, value in data.items():
            out += typed_paths(schema.get("properties", {}).get(key, {}), value, (*path, key))
    elif isinstance(data, list):
        prefix = schema.get("prefixItems", [])
        for i, value in enumerate(data):
            item = prefix[i] if i < len(prefix) else schema.get("items", {})
            out += typed_paths(item if isinstance(item, dict) else {}, value, (*path, i))
    return out


def _replaced(data: Any, path: tuple[Any, ...], value: Any) -> Any:
    out = json.loads(json.dumps(data))
    target = out
    for part in path[:-1]:
        target = target[part]
    target[path[-1]] = value
    return out


def _engine_file() -> dict[str, Any]:
    from tests.test_bad_input_cases import engine_file

    return engine_file()


def _window_file() -> dict[str, Any]:
    from tests.test_bad_input_cases import window

    return window()


def sglang_replay_file() -> dict[str, Any]:
    """A valid ``sglang`` replay file (``sglang_fuzz.save_replay``'s keys): two requests, an abort, an iteration."""
    from asyncspec.engine.sglang import case as cs

    case = cs.Case(requests=(cs.Request((11, 12, 13), 4, eos_at=2), cs.Request((11, 20), 3, arrive_at=2)),
                   aborts=(cs.Abort(1, 5),), engine=cs.EngineConfig(max_total_tokens=64, schedule_conservativeness=0.5))
    return {"asyncspec_fuzz_replay": 1, "target": "sglang", "mutant": None, "case": json.loads(json.dumps(case.to_json())),
            "differences": [{"field": "r0.num_output_tokens", "spec": 2, "sglang": 3}],
            "iterations": [{"it": 4, "ops": ["schedule r0"], "spec": {"r0": "out 2"}, "sglang": {"r0": "out 3"}}]}


def torch_replay_file() -> dict[str, Any]:
    """A valid torch replay file (``torch_oracle.replay_json``'s keys), every workload list non-empty."""
    workload = {"prompts": [[24], [33, 13, 23]], "max_tokens": [2, 5], "arrivals": [0, 3], "aborts": [[4, 1]],
                "resets": [6], "token_budget": 5, "max_num_seqs": 3, "block_size": 4, "num_blocks": 2,
                "enable_chunked_prefill": True, "enable_prefix_caching": True, "kv_connector": False,
                "stale_mode": "drop"}
    return {"asyncspec_torch_replay": 1, "target": "torch", "seed": 0, "example": 3, "workload": workload,
            "strategy": "v2", "depths": [1, 2], "bug": "feed_by_row", "problems": ["differs at tick 3"]}


def _hostile_files() -> dict[str, tuple[dict[str, Any], list[tuple[tuple[Any, ...], str]], tuple[str, ...]]]:
    """Per kind: the valid file, its typed paths (from the schema) and the replay command's options."""
    from asyncspec.checker.window_trace import window_schema
    from asyncspec.engine.torch.replay import replay_schema as torch_schema
    from asyncspec.statemachine_tests.sglang.sglang_replay import replay_schema as sglang_schema
    from asyncspec.statemachine_tests.vllm_engine.engine_case import case_schema

    engine, win, sglang, torch = _engine_file(), _window_file(), sglang_replay_file(), torch_replay_file()
    engine_paths = [(("case", *p), t) for p, t in typed_paths(case_schema(), engine["case"])]
    window_paths = [(p, t) for p, t in typed_paths(window_schema(), win)
                    if p != ("asyncspec_monitor_window",)]  # not a window then: test_bad_input_cases has it
    versions = {("asyncspec_fuzz_replay",), ("asyncspec_torch_replay",), ("workload",)}  # what names the file's kind
    return {"engine-case": (engine, engine_paths, ("--target", "vllm-engine")), "window": (win, window_paths, ()),
            "sglang-replay": (sglang, [(p, t) for p, t in typed_paths(sglang_schema(), sglang) if p not in versions],
                              ("--target", "sglang")),
            "torch-replay": (torch, [(p, t) for p, t in typed_paths(torch_schema(), torch) if p not in versions],
                             ("--target", "torch"))}


FILES = _hostile_files()
MUTATIONS = ("wrong-type", "deep", "huge")
ALL_CASES = [(kind, path, kind_of, how) for kind, (_, paths, _) in FILES.items() for path, kind_of in paths
             for how in MUTATIONS]
HTML_CASES = [(kind, path, kind_of, how) for kind, path, kind_of, how in ALL_CASES if kind == "engine-case"]


def _expect_refused(kind: str, path: tuple[Any, ...], json_type: str, how: str, html: bool = False) -> None:
    """The file with one hostile value at ``path``: ``replay`` (or ``replay --html``) is exit 2, one line naming it."""
    from asyncspec.checker.schema import MAX_NESTING

    data, _, args = FILES[kind]
    if how == "wrong-type":
        value, words = WRONG[json_type]
        pattern = rf"'{re.escape(_where(path))}' must be {re.escape(words)} \(got "
    else:  # written into the text: Python's own json module cannot build or print these
        value, pattern = "HOSTILE", (rf"nest deeper than {MAX_NESTING} levels" if how == "deep"
                                     else r"an integer of 5000 digits")
    text = json.dumps(_replaced(data, path, value))
    text = text.replace('"HOSTILE"', "[" * 2000 + "]" * 2000 if how == "deep" else "9" * 5000)
    with tempfile.TemporaryDirectory() as d:
        file = Path(d) / "f.json"
        file.write_text(text)
        options = ("--html", str(Path(d) / "page.html")) if html else args
        assert_usage_error(invoke("replay", str(file), *options), pattern)
        assert not (Path(d) / "page.html").exists()


def test_the_replay_files_walked_are_valid(tmp_path: Path) -> None:
    """The sglang and torch files mutated below load as they are: what refuses a mutant is its one change."""
    from asyncspec.engine.torch.replay import load_torch_replay
    from asyncspec.statemachine_tests.sglang.sglang_replay import load_replay

    for name, data in (("s.json", sglang_replay_file()), ("t.json", torch_replay_file())):
        (tmp_path / name).write_text(json.dumps(data))
    case, mutant = load_replay(tmp_path / "s.json")
    assert len(case.requests) == 2 and case.aborts[0].req == 1 and mutant is None
    workload, strategy, depths, bug = load_torch_replay(tmp_path / "t.json")
    assert workload.prompts[1] == (33, 13, 23) and (strategy, depths, bug) == ("v2", (1, 2), "feed_by_row")


@pytest.mark.parametrize("kind", ["sglang-replay", "torch-replay"])
def test_an_unknown_key_at_any_level_of_a_replay_file(kind: str) -> None:
    """Closed down to every request: a key added to any object of the file is named (one line, exit 2)."""
    data, paths, args = FILES[kind]
    maps = ("spec", "sglang")  # an iteration's request id -> counters, on each side: open keys by design
    for path in [()] + [p for p, t in paths if t == "object" and not (p[0] == "iterations" and p[-1] in maps)]:
        target = json.loads(json.dumps(data))
        inner = target
        for part in path:
            inner = inner[part]
        inner["surplus"] = 1
        where = f" in '{_where(path)}'" if path else ""
        assert_usage_error(_replay(json.dumps(target), *args), rf"unknown key 'surplus'{re.escape(where)}")


def test_the_walk_reaches_every_request() -> None:
    """The generated battery covers each request of an engine case and of a window, and every key of a request."""
    engine_paths = {p for p, _ in FILES["engine-case"][1]}
    assert {("case", "requests", i, "max_tokens") for i in (0, 1)} <= engine_paths
    assert ("case", "engine", "block_size") in engine_paths and ("case", "requests", 1, "prompt", 0) in engine_paths
    window_paths = {p for p, _ in FILES["window"][1]}
    assert {("config", "requests", i, j) for i in range(3) for j in (0, 1)} <= window_paths
    assert ("start_state", "counters", 2, 6) in window_paths and ("start_state", "waiting", 1) in window_paths
    sglang_paths = {p for p, _ in FILES["sglang-replay"][1]}
    assert {("case", "requests", i, k) for i in (0, 1) for k in ("max_new_tokens", "eos_at", "arrive_at")} <= sglang_paths
    assert {("case", "aborts", 0, "req"), ("case", "engine", "schedule_conservativeness")} <= sglang_paths
    torch_paths = {p for p, _ in FILES["torch-replay"][1]}
    assert {("workload", "prompts", 1, 2), ("workload", "aborts", 0, 1), ("workload", "num_blocks")} <= torch_paths


@SETTINGS
@given(st.sampled_from(ALL_CASES))
def test_hostile_value_at_a_key_of_an_engine_case_or_a_window(case: tuple[str, tuple[Any, ...], str, str]) -> None:
    """The default tier's representative: 25 of the generated cases (the same every run)."""
    _expect_refused(*case)


@pytest.mark.slow
@pytest.mark.parametrize("kind, path, json_type, how", ALL_CASES,
                         ids=[f"{k}-{_where(p)}-{h}" for k, p, _, h in ALL_CASES])
def test_hostile_value_at_every_key(kind: str, path: tuple[Any, ...], json_type: str, how: str) -> None:
    _expect_refused(kind, path, json_type, how)


@SETTINGS
@given(st.sampled_from(HTML_CASES))
def test_hostile_value_in_an_engine_case_for_the_html_page(case: tuple[str, tuple[Any, ...], str, str]) -> None:
    _expect_refused(*case, html=True)


@pytest.mark.slow
@pytest.mark.parametrize("kind, path, json_type, how", HTML_CASES,
                         ids=[f"{k}-{_where(p)}-{h}" for k, p, _, h in HTML_CASES])
def test_hostile_value_at_every_key_for_the_html_page(kind: str, path: tuple[Any, ...], json_type: str,
                                                      how: str) -> None:
    _expect_refused(kind, path, json_type, how, html=True)
