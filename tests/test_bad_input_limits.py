"""Input files beyond the loaders' limits (issue 30): nested thousands of levels deep, or holding integers of
thousands of digits, in every kind of input file; and absurd but well-typed values. Each is exit 2 and one
line naming the limit, never a RecursionError, a MemoryError or a run that does not end.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from asyncspec.checker.schema import MAX_NESTING, InputLimitError, limits_problem, loads_json, loads_toml
from tests.cli_contract import assert_usage_error, invoke

V = 'name = "x"\nrequests = [[3, 2]]\n'
DEEP, HUGE = 5000, "9" * 5000
DEPTH_LINE = rf"nest deeper than {MAX_NESTING} levels"
DIGITS_LINE = r"an integer of .* \(integers lie within \+-2\*\*63\)"


def _deep_json(depth: int) -> str:
    return "[" * depth + "]" * depth


@pytest.mark.parametrize("text, pattern", [
    (V + "description = " + _deep_json(DEEP) + "\n", DEPTH_LINE),
    (V + "description = " + _deep_json(MAX_NESTING + 1) + "\n", DEPTH_LINE),
    (V + "token_budget = " + HUGE + "\n", DIGITS_LINE),
    (V + "token_budget = 0x" + "f" * 5000 + "\n", DIGITS_LINE),
    (V + "description = " + "{a = " * 3000 + "1" + "}" * 3000 + "\n", DEPTH_LINE),
], ids=["deep", "just-too-deep", "decimal", "hex", "inline-tables"])
def test_config_beyond_the_limits(tmp_path: Path, text: str, pattern: str) -> None:
    path = tmp_path / "c.toml"
    path.write_text(text)
    assert_usage_error(invoke("check", "-c", str(path), "--trace-dir", str(tmp_path / "t")), pattern)


HOSTILE = {"deep": _deep_json(DEEP), "deep-objects": '{"a": ' * DEEP + "1" + "}" * DEEP,
           "just-too-deep": _deep_json(MAX_NESTING + 1), "huge": HUGE, "huge-negative": "-" + HUGE}
PATTERNS = {"deep": DEPTH_LINE, "deep-objects": DEPTH_LINE, "just-too-deep": DEPTH_LINE, "huge": DIGITS_LINE,
            "huge-negative": DIGITS_LINE}
FILES = {
    "trace": ('{"asyncspec_trace": 1, "config": %s}', ()),
    "fuzz-replay": ('{"asyncspec_fuzz_replay": 1, "target": "reference", "workload": %s, "events": []}',
                    ("--target", "reference")),
    "engine-replay": ('{"asyncspec_fuzz_replay": 1, "target": "vllm-engine", "case": %s}', ("--target", "vllm-engine")),
    "torch-replay": ('{"asyncspec_torch_replay": 1, "workload": %s}', ("--target", "torch")),
    "window": ('{"asyncspec_monitor_window": 1, "config": %s}', ()),
    "sniffed": ('{"asyncspec_fuzz_replay": 1, "target": %s}', ()),
}


@pytest.mark.parametrize("kind", sorted(FILES))
@pytest.mark.parametrize("hostile", sorted(HOSTILE))
def test_json_file_beyond_the_limits(tmp_path: Path, kind: str, hostile: str) -> None:
    template, args = FILES[kind]
    path = tmp_path / "f.json"
    path.write_text(template % HOSTILE[hostile])
    assert_usage_error(invoke("replay", str(path), *args), PATTERNS[hostile])


@pytest.mark.parametrize("hostile", sorted(HOSTILE))
def test_html_page_of_a_file_beyond_the_limits(tmp_path: Path, hostile: str) -> None:
    path = tmp_path / "f.json"
    path.write_text('{"asyncspec_trace": 1, "config": %s}' % HOSTILE[hostile])
    assert_usage_error(invoke("replay", str(path), "--html", str(tmp_path / "o.html")), PATTERNS[hostile])
    assert not (tmp_path / "o.html").exists()


def test_the_guard_itself() -> None:
    assert loads_json(_deep_json(MAX_NESTING)) == loads_json(_deep_json(MAX_NESTING))  # the limit itself is fine
    assert limits_problem([2**63 - 1, -(2**63 - 1)]) is None
    assert "integer" in (limits_problem({"a": [2**63]}) or "")
    assert limits_problem(True) is None and limits_problem(1.5) is None
    for text in (_deep_json(MAX_NESTING + 1), HUGE, _deep_json(100_000)):
        with pytest.raises(InputLimitError):
            loads_json(text)
    with pytest.raises(InputLimitError):
        loads_toml("a = " + _deep_json(100_000))
    assert loads_toml("a = 9223372036854775807") == {"a": 2**63 - 1}
    with pytest.raises(InputLimitError):
        loads_toml("a = 9223372036854775808")
    with pytest.raises(ValueError, match="Invalid"):
        loads_toml("a = ")  # TOML's own errors pass through
    assert json.loads(json.dumps({"k": [[[1]]]})) == loads_json('{"k": [[[1]]]}')


# ------------------------------------------------ absurd but well-typed values: ranges with the limit named


@pytest.mark.parametrize("extra, pattern", [
    ("num_blocks = 1000000000", r"'num_blocks' must be 1..4096 \(got 1000000000\): every state holds the whole pool"),
    ("num_blocks = 9223372036854775807", r"'num_blocks' must be 1..4096"),
    ("num_blocks = 9223372036854775808", DIGITS_LINE),
    ("decode_stagger = 1000000000", r"'decode_stagger' must be 1..4 \(got 1000000000\)"),
    ("token_budget = 4611686018427387904", r"'token_budget' must be 1..1048576"),
    ("block_size = 100000", r"'block_size' must be 1..1024"),
    ("forced_preemptions = 1000", r"'forced_preemptions' must be 0..16"),
    ("max_model_len = 99999999", r"'max_model_len' must be 1..2097152"),
    ("sliding_window = 99999999", r"'sliding_window' must be 0..1048576"),
    ("eos_positions = [[99999999]]", r"'eos_positions\[0\]\[0\]' must be <= 1048576"),
], ids=lambda v: v.split(" ")[0] if " = " in v else None)
def test_config_with_an_absurd_value(tmp_path: Path, extra: str, pattern: str) -> None:
    path = tmp_path / "c.toml"
    path.write_text(V + extra + "\n")
    assert_usage_error(invoke("check", "-c", str(path), "--trace-dir", str(tmp_path / "t")), pattern)


def test_config_with_an_absurd_request(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text('name = "x"\nrequests = [[3, 2], [2000000, 1]]\n')
    assert_usage_error(invoke("check", "-c", str(path)), r"'requests\[1\]\[0\]' must be <= 1048576 \(got 2000000\)")


def test_spec_config_checks_the_same_ranges() -> None:
    """Configs built in code (sweep, fuzz) meet the same limits as config files."""
    from asyncspec.spec.config import LIMITS, MAX_RESETS, ConfigError, SpecConfig

    for key, (lowest, highest, _) in LIMITS.items():
        if key == "forced_preemptions":  # a file's is at most 16; one built in code (the monitor's) up to 2**62
            lowest, highest = 0, MAX_RESETS
        with pytest.raises(ConfigError, match=rf"'{key}' must be {lowest}..{highest}"):
            SpecConfig(name="x", requests=((3, 2),), **{key: highest + 1})  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="must be <= 1048576"):
        SpecConfig(name="x", requests=((2**21, 2),), num_blocks=4096, block_size=1024)


@pytest.mark.parametrize("args, pattern", [
    (("--blocks", "1000000000"), r"'num_blocks' must be 1..4096"),
    (("--requests", "３x２"), r"--requests: '３x２' is not PROMPTxMAX_TOKENS"),
    (("--depth", "１"), r"--depth: '１' is not an integer"),
    (("--blocks", "٣"), r"--blocks: '٣' is not an integer"),
    (("--requests", "3x" + "9" * 5000), r"--requests: .* is not PROMPTxMAX_TOKENS"),
], ids=["blocks-1e9", "full-width-requests", "full-width-depth", "arabic-indic-blocks", "huge-request"])
def test_sweep_with_an_absurd_value(args: tuple[str, ...], pattern: str) -> None:
    assert_usage_error(invoke("sweep", *args), pattern)


@pytest.mark.parametrize("size, pattern", [
    ("inf", r"--max-memory: cannot read memory size 'inf'"),
    ("nan", r"--max-memory: cannot read memory size 'nan'"),
    ("1e999", r"--max-memory: memory size '1e999' is over the largest accepted, 1024T"),
    ("9" * 400, r"--max-memory: memory size '9{37}\.\.\.' is over the largest accepted"),
    ("2000T", r"is over the largest accepted, 1024T"),
    ("２G", r"cannot read memory size '２G'"),
    ("-1G", r"must be positive"),
])
def test_check_with_an_absurd_memory_size(size: str, pattern: str) -> None:
    assert_usage_error(invoke("check", "-c", "sync-d1", "--max-memory", size), pattern)


REPLAY = {"asyncspec_fuzz_replay": 1, "target": "reference", "workload": {"requests": [[4, 2, 0]]},
          "events": ["add_request r0", "schedule"]}


@pytest.mark.parametrize("workload, pattern", [
    ({"block_size": 0}, r"'workload.block_size' must be 1..1024 \(got 0\): tokens per KV block"),
    ({"num_blocks": 10**9}, r"'workload.num_blocks' must be 1..4096"),
    ({"token_budget": 0}, r"'workload.token_budget' must be 1..1048576"),
    ({"requests": [[4, 10**9]]}, r"'workload.requests\[0\]\[1\]' must be <= 1048576"),
], ids=["block_size-0", "num_blocks-1e9", "budget-0", "max_tokens-1e9"])
def test_fuzz_replay_with_an_absurd_value(tmp_path: Path, workload: dict[str, object], pattern: str) -> None:
    path = tmp_path / "r.json"
    path.write_text(json.dumps(REPLAY | {"workload": REPLAY["workload"] | workload}))  # type: ignore[operator]
    assert_usage_error(invoke("replay", str(path), "--target", "reference"), pattern)


def test_workload_problem_checks_the_same_ranges() -> None:
    from asyncspec.statemachine_tests.core.workload import LIMITS, RequestSpec, Workload, workload_problem

    for key, (lowest, highest, _) in LIMITS.items():
        for value in (lowest - 1, highest + 1):
            w = Workload(requests=(RequestSpec(4, 2),), **{key: value})  # type: ignore[arg-type]
            assert (workload_problem(w) or "").startswith(f"{key} must be {lowest}..{highest}"), (key, value)


@pytest.mark.parametrize("key, args", [("asyncspec_trace", ()), ("asyncspec_fuzz_replay", ("--target", "reference"))])
def test_a_float_version_is_a_bad_file(tmp_path: Path, key: str, args: tuple[str, ...]) -> None:
    from asyncspec.checker.witness import witness_trace
    from asyncspec.checker import configs as cfgs

    if key == "asyncspec_trace":
        trace = witness_trace(cfgs.named_configs()["sync-d1"], "preemption")
        assert trace is not None
        data = trace.to_json() | {"violated": "no_deadlock"}
    else:
        data = dict(REPLAY)
    path = tmp_path / "f.json"
    path.write_text(json.dumps(data | {key: 1.0}))
    assert_usage_error(invoke("replay", str(path), *args), rf"'{key}' must be an integer \(got 1.0\)")
