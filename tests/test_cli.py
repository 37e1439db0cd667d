"""The CLI contract: exit codes, JSON shapes, one-line errors, replay files."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import cli_json, run_cli


def test_check_json_contract() -> None:
    code, data = cli_json("check", "-c", "async-d2", "-c", "async-d2-defer")
    assert code == 0 and data["result"] == "ok"
    assert [c["name"] for c in data["configs"]] == ["async-d2", "async-d2-defer"]
    for c in data["configs"]:
        assert set(c) >= {"name", "distinct_states", "depth", "seconds", "violations", "witnesses"}
        assert c["violations"] == [] and c["witnesses"]["deferred_free"] in (True, False)


def test_violation_exits_1_and_writes_a_replayable_trace(tmp_path: Path) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text('name = "d3"\nrequests = [[3, 2], [2, 2]]\nbatch_queue_depth = 3\n'
                   'decode_stagger = 1\ntoken_budget = 4\nblock_size = 2\nnum_blocks = 3\n')
    p = run_cli("check", "-c", str(cfg), "--trace-dir", str(tmp_path / "traces"))
    assert p.returncode == 1 and "VIOLATION: no_wasted_step_on_max_tokens" in p.stdout
    trace = tmp_path / "traces" / "d3.no_wasted_step_on_max_tokens.trace.json"
    assert trace.exists()
    code, data = cli_json("replay", str(trace))
    assert code == 1 and data["violations"][0]["property"] == "no_wasted_step_on_max_tokens"


def test_bad_configs_give_one_line_errors(tmp_path: Path) -> None:
    cases = {
        "name = \n": "invalid TOML",
        'name = "x"\nrequests = [[3, 2]]\nfoo = 1\n': "unknown setting 'foo'",
        'name = "x"\nrequests = [[9, 9]]\nnum_blocks = 2\n': "preempt itself forever",
        'name = "x"\nrequests = [[3, 2]]\nbatch_queue_depth = 0\n': "batch_queue_depth",
        'name = "x"\nrequests = [[3, 2]]\ndefer_block_free = 1\n': "must be true or false",
        'name = "x"\nrequests = [[3, 4]]\nenable_chunked_prefill = false\ntoken_budget = 4\n':
            "without chunked prefill",
    }
    for i, (text, needle) in enumerate(cases.items()):
        path = tmp_path / f"bad{i}.toml"
        path.write_text(text)
        p = run_cli("check", "-c", str(path))
        assert p.returncode == 2, text
        assert needle in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr


def test_corrupt_trace_file_is_rejected(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    for text in ("{not json", json.dumps({"asyncspec_trace": 1, "config": {}}), "[]"):
        bad.write_text(text)
        p = run_cli("replay", str(bad))
        assert p.returncode == 2 and p.stderr.startswith("asyncspec: error:")
    p = run_cli("replay", str(tmp_path / "missing.json"))
    assert p.returncode == 2


def test_trace_with_a_disabled_action_is_rejected(tmp_path: Path) -> None:
    trace = {"asyncspec_trace": 1, "config": {"name": "x", "requests": [[2, 1]], "num_blocks": 1},
             "eos_positions": [0], "actions": ["update_from_output"]}
    path = tmp_path / "t.json"
    path.write_text(json.dumps(trace))
    p = run_cli("replay", str(path))
    assert p.returncode == 2 and "not enabled" in p.stderr


def test_partial_exploration_exits_3() -> None:
    code, data = cli_json("check", "-c", "async-free", "--max-states", "40")
    assert code == 3 and data["result"] == "partial" and data["configs"][0]["partial"]


def test_mutants_json_contract() -> None:
    code, data = cli_json("mutants", "--only", "stale_delivery_decrements_placeholders")
    assert code == 0 and data["total"] == data["killed"] == len(data["mutants"]) == 1
    assert all({"name", "killed", "property"} <= set(m) for m in data["mutants"])


@pytest.mark.slow  # the default tier kills each mutant in-process (tests/test_mutants.py)
def test_mutants_json_reports_every_mutant_killed() -> None:
    code, data = cli_json("mutants")
    assert code == 0 and data["total"] == data["killed"] == len(data["mutants"]) >= 15


def test_demo_shows_the_explainers_claims() -> None:
    p = run_cli("demo")
    assert p.returncode == 0
    assert p.stdout.count("as claimed") == 3 and "NOT as claimed" not in p.stdout


def test_unknown_config_is_a_usage_error() -> None:
    p = run_cli("check", "-c", "no-such-config")
    assert p.returncode == 2 and "no config or set named" in p.stderr


def test_main_job_checks_the_default_set() -> None:
    from asyncspec.checker.configs import config_set

    code, data = cli_json("check")
    assert code == 0 and data["result"] == "ok"
    assert [c["name"] for c in data["configs"]] == [c.name for c in config_set("default")]
    assert all(c["ok"] and not c["partial"] for c in data["configs"])


def test_prove_json_contract() -> None:
    code, data = cli_json("prove", "--only", "placeholders_nonnegative")
    assert code == 0 and data["result"] == "ok" and data["obligations"]
    for o in data["obligations"]:
        assert set(o) >= {"action", "invariant", "result", "seconds"} and o["result"] == "proved"


def test_worker_command_checks_every_strategy() -> None:
    code, data = cli_json("worker", "--strategy", "v2")
    assert code == 0 and data["result"] == "ok"
    assert {c["name"].split("/")[1] for c in data["configs"]} == {"v2"}


def test_results_do_not_depend_on_hash_salting(tmp_path: Path) -> None:
    import os
    import subprocess
    import sys

    def run(seed: str) -> list[dict[str, object]]:
        env = dict(os.environ, PYTHONHASHSEED=seed)
        p = subprocess.run([sys.executable, "-m", "asyncspec", "check", "-c", "async-free", "-c",
                            "finding-d3-no-stagger", "--json", "--trace-dir", str(tmp_path / seed)],
                           capture_output=True, text=True, env=env, timeout=300)
        configs = json.loads(p.stdout)["configs"]
        for c in configs:
            for measured in ("seconds", "cpu_seconds", "bytes_per_state", "trace_files"):  # costs and paths,
                c.pop(measured)  # not results
        return configs  # type: ignore[no-any-return]

    assert run("1") == run("12345")
