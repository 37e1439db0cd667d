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
