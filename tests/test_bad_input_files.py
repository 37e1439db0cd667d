"""Bad-input corpus, files: configs (TOML), checker traces, fuzz replay files, engine replay files,
monitor windows and the manifest, each with ONE exact outcome (exit 2 and one line matching a
pattern), plus the failures seen before this contract (a name with path components, an empty
property list, a float EOS position, ``--update-manifest`` after a failing run).
"""
from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

import pytest

from asyncspec.checker import configs as cfgs
from tests.cli_contract import assert_usage_error, invoke

V = 'name = "x"\nrequests = [[3, 2]]\n'

CONFIGS: list[tuple[str, str]] = [
    (V + "foo = 1\n", r"unknown setting 'foo'$"),
    (V + "propertis = ['placeholders_nonnegative']\n", r"unknown setting 'propertis' \(did you mean 'properties'\?\)"),
    (V + "batch_queue_dept = 2\n", r"unknown setting 'batch_queue_dept' \(did you mean 'batch_queue_depth'\?\)"),
    ("", r"'name' is required$"),
    ('name = "x"\n', r"'requests' is required$"),
    ("requests = [[3, 2]]\n", r"'name' is required$"),
    ('{"name": "x", "requests": [[3, 2]]}\n', r"this looks like JSON; a config file is TOML"),
    ('[{"name": "x"}]\n', r"this looks like JSON; a config file is TOML"),
    ("name = \n", r"invalid TOML: .*\(fix the syntax; see docs/configs.md\)"),
    (V + "requests = [[3, 2]]\n", r"invalid TOML: Cannot overwrite a value"),
    ("\xff\xfe", r"not UTF-8 text \(a config is a TOML file\)"),
    (V + "properties = []\n", r"'properties' must list at least 1 item\(s\).*leave 'properties' out"),
    (V + "properties = 'placeholders_nonnegative'\n", r"'properties' must be a list"),
    (V + "properties = ['no_wasted_step_on_max_token']\n",
     r"'properties\[0\]': unknown name .*\(did you mean 'no_wasted_step_on_max_tokens'\?\)"),
    (V + "properties = [3]\n", r"'properties\[0\]': unknown name 3"),
    (V + "expect_violation = 'nope'\n", r"'expect_violation': unknown name \"nope\": see docs/properties.md"),
    (V + "eos_positions = [[1.5]]\n", r"'eos_positions\[0\]\[0\]' must be an integer \(got 1.5\)"),
    (V + "eos_positions = [[2.0]]\n", r"'eos_positions\[0\]\[0\]' must be an integer \(got 2.0\)"),
    (V + "eos_positions = [1]\n", r"'eos_positions\[0\]' must be a list \(got 1\)"),
    (V + "eos_positions = [[1], [2]]\n", r"x: 'eos_positions' needs one list per request"),
    (V + "eos_positions = [[]]\n", r"x: 'eos_positions' for r0 is empty"),
    (V + "eos_positions = [[-1]]\n", r"x: 'eos_positions' must be >= 0"),
    ('name = "../x"\nrequests = [[3, 2]]\n', r"'name' must match .* \(got \"../x\"\).*it names trace files"),
    ('name = "a/b"\nrequests = [[3, 2]]\n', r"'name' must match .* \(got \"a/b\"\)"),
    ('name = "/abs"\nrequests = [[3, 2]]\n', r"'name' must match .* \(got \"/abs\"\)"),
    ('name = ".hidden"\nrequests = [[3, 2]]\n', r"'name' must match .* \(got \".hidden\"\)"),
    ('name = ""\nrequests = [[3, 2]]\n', r"'name' must match .* \(got \"\"\)"),
    ('name = "a b"\nrequests = [[3, 2]]\n', r"'name' must match .* \(got \"a b\"\)"),
    ('name = 7\nrequests = [[3, 2]]\n', r"'name' must be a string \(got 7\)"),
    ('name = "%s"\nrequests = [[3, 2]]\n' % ("n" * 300), r"'name' must match .*at most 100 characters"),
    ('name = "%s"\nrequests = [[3, 2]]\n' % ("n" * 101), r"'name' must match .*at most 100 characters"),
    ('name = "x"\nrequests = []\n', r"'requests' must list at least 1 item\(s\) \(got 0\)"),
    ('name = "x"\nrequests = [[3, 2, 1]]\n', r"'requests\[0\]' must list at most 2 item\(s\)"),
    ('name = "x"\nrequests = [[3]]\n', r"'requests\[0\]' must list at least 2 item\(s\)"),
    ('name = "x"\nrequests = [3, 2]\n', r"'requests\[\d\]' must be a list \(got [23]\)"),
    ('name = "x"\nrequests = [[3, 2.5]]\n', r"'requests\[0\]\[1\]' must be an integer \(got 2.5\)"),
    ('name = "x"\nrequests = [["3", 2]]\n', r"'requests\[0\]\[0\]' must be an integer"),
    ('name = "x"\nrequests = [[0, 2]]\n', r"x: request r0 needs a prompt of at least 1 token"),
    ('name = "x"\nrequests = [[3, 0]]\n', r"x: request r0 needs max_tokens >= 1"),
    ('name = "x"\nrequests = [[30, 20]]\n', r"needs \d+ blocks alone but num_blocks is 8.*raise num_blocks"),
    (V + "loop = 'fre'\n", r"'loop' must be one of exact, free \(got \"fre\"\) \(did you mean 'free'\?\)"),
    (V + "stale_mode = 'keep'\n", r"'stale_mode' must be one of deliver, drop"),
    (V + "batch_queue_depth = 2.0\n", r"'batch_queue_depth' must be an integer \(got 2.0\)"),
    (V + "batch_queue_depth = 0\n", r"'batch_queue_depth' must be 1..4"),
    (V + "batch_queue_depth = 5\n", r"'batch_queue_depth' must be 1..4"),
    (V + "token_budget = '8'\n", r"'token_budget' must be an integer \(got \"8\"\)"),
    (V + "token_budget = true\n", r"'token_budget' must be an integer \(got true\)"),
    (V + "token_budget = 0\n", r"'token_budget' must be 1..1048576 \(got 0\): a token count"),
    (V + "max_num_seqs = 0\n", r"'max_num_seqs' must be 1..1024 \(got 0\)"),
    (V + "block_size = 0\n", r"'block_size' must be 1..1024 \(got 0\)"),
    (V + "defer_block_free = 1\n", r"'defer_block_free' must be true or false \(got 1\)"),
    (V + "aborts = 'yes'\n", r"'aborts' must be true or false"),
    (V + "decode_stagger = 0\n", r"'decode_stagger' must be 1..4 \(got 0\)"),
    (V + "num_speculative_tokens = 9\n", r"'num_speculative_tokens' must be 0..4"),
    (V + "forced_preemptions = -1\n", r"'forced_preemptions' must be 0..16 \(got -1\)"),
    (V + "structured_output = [5]\n", r"'structured_output' lists a request index that does not exist"),
    (V + "description = 3\n", r"'description' must be a string \(got 3\)"),
    (V + "set = 'nightly'\n", r"'set' must be one of default, slow, finding, campaign"),
    (V + "witnesses = ['wasted_stp']\n", r"'witnesses\[0\]': unknown name .*\(did you mean 'wasted_step'\?\)"),
    (V + "when = 1979-05-27\n", r"unknown setting 'when'$"),
    (V + "[extra]\nk = 1\n", r"unknown setting 'extra'$"),
    ('name = "x"\nrequests = [[3, 4]]\nenable_chunked_prefill = false\ntoken_budget = 4\n',
     r"without chunked prefill a resumed request recomputes"),
]


@pytest.mark.parametrize("text, pattern", CONFIGS, ids=[f"config{i}" for i in range(len(CONFIGS))])
def test_bad_config_file(tmp_path: Path, text: str, pattern: str) -> None:
    path = tmp_path / "c.toml"
    path.write_bytes(text.encode("latin-1" if "\xff" in text else "utf-8"))
    assert_usage_error(invoke("check", "-c", str(path), "--trace-dir", str(tmp_path / "t")), pattern)
    assert not (tmp_path / "t").exists() and sorted(p.name for p in tmp_path.iterdir()) == ["c.toml"]


def test_a_config_folder_and_a_missing_file(tmp_path: Path) -> None:
    assert_usage_error(invoke("check", "-c", str(tmp_path)), r"cannot read .*: Is a directory")
    assert_usage_error(invoke("check", "-c", str(tmp_path / "no.toml")), r"cannot read .*no.toml: No such file")


def _trace(tmp_path: Path) -> dict[str, Any]:
    from asyncspec.checker.witness import witness_trace

    cfg = cfgs.named_configs()["async-d2"]
    trace = witness_trace(cfg, "wasted_step")
    assert trace is not None
    return trace.to_json()


def _without(d: dict[str, Any], key: str) -> dict[str, Any]:
    return {k: v for k, v in d.items() if k != key}


TRACES: list[tuple[Any, str]] = [
    ("not json", r"is not valid JSON \(line 1\)"),
    ([], r"not an asyncspec trace \(version 1\); 'asyncspec check' writes them"),
    ({}, r"not an asyncspec trace \(version 1\)"),
    ({"asyncspec_trace": 2}, r"not an asyncspec trace \(version 1\)"),
    ("base-asyncspec_trace", r"not an asyncspec trace"),
    ("base-config", r"corrupt trace: 'config' is required$"),
    ("base-actions", r"corrupt trace: 'actions' is required$"),
    ("base-eos_positions", r"corrupt trace: 'eos_positions' is required$"),
    ("set-extra=1", r"corrupt trace: unknown key 'extra'$"),
    ("set-actionz=[]", r"corrupt trace: unknown key 'actionz' \(did you mean 'actions'\?\)"),
    ("set-actions=\"schedule\"", r"corrupt trace: 'actions' must be a list"),
    ("set-actions=[1]", r"corrupt trace: 'actions\[0\]' must be a string \(got 1\)"),
    ("set-actions=[\"fly\"]", r"corrupt trace: "),
    ("set-actions=[\"update_from_output\"]", r"step 1: action 'update_from_output' is not enabled in the spec"),
    ("set-eos_positions=[0.5, 0, 0]", r"corrupt trace: 'eos_positions\[0\]' must be an integer \(got 0.5\)"),
    ("set-eos_positions=[-1, 0, 0]", r"corrupt trace: 'eos_positions\[0\]' must be >= 0"),
    ("set-eos_positions=[0]", r"corrupt trace: one EOS position per request expected"),
    ("set-eos_positions={}", r"corrupt trace: 'eos_positions' must be a list"),
    ("set-violated=3", r"corrupt trace: 'violated' must be a string or null \(got 3\)"),
    ("set-config=[]", r"corrupt trace: 'config' must be a table of keys"),
    ("set-config={}", r"trace config: 'name' is required"),
    ("cfg-name=\"../../etc/x\"", r"trace config: 'name' must match"),
    ("cfg-batch_queue_depth=2.5", r"trace config: 'batch_queue_depth' must be an integer \(got 2.5\)"),
    ("cfg-properties=[]", r"trace config: 'properties' must list at least 1 item"),
    ("cfg-requests=[[3, 2]]", r"corrupt trace: one EOS position per request expected"),
    ("cfg-bogus=1", r"trace config: unknown setting 'bogus'"),
]


def _build(spec: Any, base: dict[str, Any]) -> str:
    if not isinstance(spec, str) or spec == "not json":
        return spec if isinstance(spec, str) else json.dumps(spec)
    kind, _, rest = spec.partition("-")
    if kind == "base":
        return json.dumps(_without(base, rest))
    key, _, value = rest.partition("=")
    if kind == "set":
        return json.dumps(base | {key: json.loads(value)})
    return json.dumps(base | {"config": base["config"] | {key: json.loads(value)}})


@pytest.mark.parametrize("spec, pattern", TRACES, ids=[f"trace{i}" for i in range(len(TRACES))])
def test_bad_trace_file(tmp_path: Path, spec: Any, pattern: str) -> None:
    path = tmp_path / "t.json"
    path.write_text(_build(spec, _trace(tmp_path)))
    assert_usage_error(invoke("replay", str(path)), pattern)


def test_a_missing_or_binary_trace(tmp_path: Path) -> None:
    assert_usage_error(invoke("replay", str(tmp_path / "no.json")), r"cannot read .*no.json: No such file")
    (tmp_path / "b.json").write_bytes(b"\xff\xfe\x00")
    assert_usage_error(invoke("replay", str(tmp_path / "b.json")), r"is not UTF-8 text")


REPLAY_BASE = {"asyncspec_fuzz_replay": 1, "target": "reference", "workload": {"requests": [[4, 2, 0]]},
               "events": ["add_request r0", "schedule"]}

REPLAYS: list[tuple[dict[str, Any] | str, str]] = [
    ("[1, 2]", r"is not an asyncspec fuzz replay file \(version 1\)"),
    ("{", r"is not valid JSON"),
    ({"asyncspec_fuzz_replay": 2}, r"is not an asyncspec fuzz replay file \(version 1\)"),
    (_without(REPLAY_BASE, "workload"), r"corrupt replay file .*: 'workload' is required"),
    (_without(REPLAY_BASE, "events"), r"corrupt replay file .*: 'events' is required"),
    (REPLAY_BASE | {"evnets": []}, r"unknown key 'evnets' \(did you mean 'events'\?\)"),
    (REPLAY_BASE | {"events": "schedule"}, r"'events' must be a list"),
    (REPLAY_BASE | {"events": [3]}, r"'events\[0\]' must be a string \(got 3\)"),
    (REPLAY_BASE | {"events": ["jump"]}, r"unknown event 'jump'"),
    (REPLAY_BASE | {"events": ["add_request"]}, r"event 'add_request' needs a request name like r0"),
    (REPLAY_BASE | {"events": ["schedule now"]}, r"event 'schedule' takes no argument"),
    (REPLAY_BASE | {"workload": []}, r"'workload' must be a table of keys"),
    (REPLAY_BASE | {"workload": {}}, r"'requests' is required in 'workload'"),
    (REPLAY_BASE | {"workload": {"requests": []}}, r"'workload.requests' must list at least 1 item"),
    (REPLAY_BASE | {"workload": {"requests": [[4]]}}, r"'workload.requests\[0\]' must list at least 2 item"),
    (REPLAY_BASE | {"workload": {"requests": [[4, 2.5]]}}, r"'workload.requests\[0\]\[1\]' must be an integer"),
    (REPLAY_BASE | {"workload": {"requests": [[4, 2]], "depht": 2}},
     r"unknown key 'depht' in 'workload' \(did you mean 'depth'\?\)"),
    (REPLAY_BASE | {"workload": {"requests": [[4, 2]], "depth": 5}}, r"depth must be 1 \(Scheduler\), 2"),
    (REPLAY_BASE | {"workload": {"requests": [[4, 2]], "chunked_prefill": "no"}},
     r"'workload.chunked_prefill' must be true or false"),
    (REPLAY_BASE | {"workload": {"requests": [[4, 2]], "loop": "any"}}, r"'workload.loop' must be one of exact"),
    (REPLAY_BASE | {"workload": {"requests": [[0, 2]]}}, r"r0: prompt_len and max_tokens must be >= 1"),
    (REPLAY_BASE | {"workload": {"requests": [[400, 2]]}}, r"r0 does not fit the pool alone"),
    (REPLAY_BASE | {"workload": {"requests": [[4, 2]], "structured_output": [3]}},
     r"structured_output names a request that does not exist"),
    (REPLAY_BASE | {"events": ["add_request r0", "schedule", "deliver"]}, r"event 3 'deliver' is not enabled"),
    (REPLAY_BASE | {"events": ["add_request r7"]}, r"r7"),
]


@pytest.mark.parametrize("data, pattern", REPLAYS, ids=[f"replay{i}" for i in range(len(REPLAYS))])
def test_bad_fuzz_replay_file(tmp_path: Path, data: dict[str, Any] | str, pattern: str) -> None:
    path = tmp_path / "fuzz-reference-seed0.json"
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    assert_usage_error(invoke("replay", str(path), "--target", "reference"), pattern)


@pytest.mark.parametrize("data, pattern", [
    (REPLAY_BASE, r"is not a vllm-engine replay file \(asyncspec fuzz --target vllm-engine writes them\)"),
    (REPLAY_BASE | {"target": "vllm-engine"}, r"corrupt replay file"),
    (REPLAY_BASE | {"target": "vllm-engine", "case": [], "engine_events": []}, r"'case' must be a table of keys"),
    (REPLAY_BASE | {"target": "vllm-engine", "case": {}, "engine_events": [1]}, r"'engine_events\[0\]' must be a"),
    (REPLAY_BASE | {"target": "vllm-engine", "case": {}, "engine_events": []}, r"corrupt replay file"),
], ids=[f"engine{i}" for i in range(5)])
def test_bad_engine_replay_file(tmp_path: Path, data: dict[str, Any], pattern: str) -> None:
    path = tmp_path / "e.json"
    path.write_text(json.dumps(data))
    assert_usage_error(invoke("replay", str(path), "--target", "vllm-engine"), pattern)


MANIFESTS: list[tuple[str, str]] = [
    ("{", r"unreadable manifest .*restore it with git"),
    ("[]", r"the file must be a table of keys \(got \[\]\); restore it with git"),
    ('{"async-d2": {"distinct_states": 222}}', r"'depth' is required in 'async-d2'"),
    ('{"async-d2": {"distinct_states": 222.5, "depth": 12}}', r"'async-d2.distinct_states' must be an integer"),
    ('{"async-d2": {"distinct_states": 0, "depth": 12}}', r"'async-d2.distinct_states' must be >= 1"),
    ('{"async-d2": {"distinct_states": 222, "depth": -1}}', r"'async-d2.depth' must be >= 0"),
    ('{"async-d2": {"distinct_states": 222, "depth": 12, "states": 1}}', r"unknown key 'states' in 'async-d2'"),
    ('{"async-d2": 222}', r"'async-d2' must be a table of keys \(got 222\)"),
]


@pytest.mark.parametrize("text, pattern", MANIFESTS, ids=[f"manifest{i}" for i in range(len(MANIFESTS))])
def test_bad_manifest(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str, pattern: str) -> None:
    path = tmp_path / "manifest.json"
    path.write_text(text)
    monkeypatch.setattr(cfgs, "manifest_path", lambda: path)
    assert_usage_error(invoke("configs"), pattern)


def test_update_manifest_after_a_failing_run_pins_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "manifest.json"
    path.write_text('{"d3": {"distinct_states": 1, "depth": 1}}\n')
    path.chmod(0o644)
    monkeypatch.setattr(cfgs, "manifest_path", lambda: path)
    cfg = tmp_path / "d3.toml"
    cfg.write_text('name = "d3"\nrequests = [[3, 2], [2, 2]]\nbatch_queue_depth = 3\ndecode_stagger = 1\n'
                   'token_budget = 4\nblock_size = 2\nnum_blocks = 3\n')
    o = invoke("check", "-c", str(cfg), "--update-manifest", "--trace-dir", str(tmp_path / "t"))
    assert o.code == 1 and "VIOLATION: no_wasted_step_on_max_tokens" in o.stdout
    assert o.problem_lines()[-1].startswith("asyncspec: error: --update-manifest: nothing pinned")
    assert path.read_text() == '{"d3": {"distinct_states": 1, "depth": 1}}\n'
    ok = invoke("check", "-c", "sync-d1", "--update-manifest", "--trace-dir", str(tmp_path / "t"))
    assert ok.code == 0
    assert json.loads(path.read_text())["sync-d1"] == cfgs.load_manifest()["sync-d1"]
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o644  # not mkstemp's 0600


def test_a_name_with_path_components_writes_nothing_outside(tmp_path: Path) -> None:
    cfg = tmp_path / "deep" / "c.toml"
    cfg.parent.mkdir()
    cfg.write_text('name = "../../escaped"\nrequests = [[3, 2], [2, 2]]\nbatch_queue_depth = 3\n'
                   'decode_stagger = 1\ntoken_budget = 4\nblock_size = 2\nnum_blocks = 3\n')
    o = invoke("check", "-c", str(cfg), "--trace-dir", str(tmp_path / "deep" / "t"))
    assert_usage_error(o, r"'name' must match")
    assert sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*")) == ["deep", "deep/c.toml"]


def test_the_corpus_size() -> None:
    assert len(CONFIGS) + len(TRACES) + len(REPLAYS) + 5 + len(MANIFESTS) >= 120


@pytest.mark.parametrize("text, pattern", [
    ("{", r"is not valid JSON"),
    ("[]", r"holds no trace: expected a JSON object"),
    ('{"asyncspec_trace": 1}', r"corrupt trace: 'config' is required"),
    ('{"asyncspec_fuzz_replay": 1, "workload": {"requests": [[4, 2]], "depht": 2}, "events": []}',
     r"unknown key 'depht' in 'workload' \(did you mean 'depth'\?\)"),
], ids=["html-json", "html-list", "html-trace", "html-replay"])
def test_bad_file_for_the_html_page(tmp_path: Path, text: str, pattern: str) -> None:
    path = tmp_path / "in.json"
    path.write_text(text)
    assert_usage_error(invoke("replay", str(path), "--html", str(tmp_path / "out.html")), pattern)
    assert not (tmp_path / "out.html").exists()


def test_a_name_of_100_characters_writes_its_traces(tmp_path: Path) -> None:
    name = "n" * 100
    cfg = tmp_path / "c.toml"
    cfg.write_text(f'name = "{name}"\nrequests = [[3, 2], [2, 2]]\nbatch_queue_depth = 3\ndecode_stagger = 1\n'
                   'token_budget = 4\nblock_size = 2\nnum_blocks = 3\n')
    o = invoke("check", "-c", str(cfg), "--trace-dir", str(tmp_path / "t"))
    assert o.code == 1 and (tmp_path / "t" / f"{name}.no_wasted_step_on_max_tokens.trace.json").exists(), o.stderr


def test_two_configs_of_one_name_are_refused_up_front(tmp_path: Path) -> None:
    first, second = tmp_path / "a.toml", tmp_path / "b.toml"
    first.write_text('name = "same"\nrequests = [[3, 2]]\n')
    second.write_text('name = "same"\nrequests = [[2, 2]]\n')
    o = invoke("check", "-c", str(first), "-c", str(second), "--trace-dir", str(tmp_path / "t"))
    assert_usage_error(o, rf"two different configs are named 'same' \(from -c {first} and -c {second}\); "
                          r"give each its own name")
    assert not (tmp_path / "t").exists()
    o = invoke("check", "-c", "sync-d1", "-c", "default", "--json", "--max-states", "1")
    names = [c["name"] for c in json.loads(o.stdout)["configs"]]
    assert names.count("sync-d1") == 1 and len(names) == len(cfgs.config_set("default")), names
