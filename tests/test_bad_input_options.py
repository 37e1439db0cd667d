"""Bad-input corpus, command lines: every command and option, each with ONE exact outcome.

Each case is a command line that is wrong (an unknown name, a value out of range, an option
of another target, a malformed list) and must end with exit 2 and exactly one line on stderr
besides click's ``Usage:``/``Try`` lines, matching the pattern: what is wrong and what to change.
The CLI runs in-process (click's CliRunner); nothing here explores more than a few states.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from tests.cli_contract import assert_usage_error, commands, invoke

NO_SUCH = "Error: No such option"
BAD = "Error: Invalid value for"

CASES: list[tuple[tuple[str, ...], str]] = [
    # the group
    (("chek",), r"No such command 'chek' \(did you mean 'check'\?\)"),
    (("fuz",), r"No such command 'fuz' \(did you mean 'fuzz'\?\)"),
    (("--jsn",), NO_SUCH),
    (("nothing-like-it",), r"No such command 'nothing-like-it'; see 'asyncspec --help'"),
    # check
    (("check", "-c", "nope"), r"no config or set named 'nope'; see 'asyncspec configs'"),
    (("check", "-c", "async-d"), r"no config or set named 'async-d' \(did you mean 'async-d2'\?\)"),
    (("check", "-c", "defualt"), r"\(did you mean 'default'\?\)"),
    (("check", "-c", "missing.toml"), r"cannot read missing.toml: No such file"),
    (("check", "--max-states", "0"), rf"{BAD} '--max-states': 0 is not in the range x>=1"),
    (("check", "--max-states", "-5"), rf"{BAD} '--max-states'"),
    (("check", "--max-states", "lots"), rf"{BAD} '--max-states': 'lots' is not a valid integer"),
    (("check", "--explorer", "fats"), r"'fats' is not one of 'compiled', 'fast', 'plain' \(did you mean 'fast'\?\)"),
    (("check", "--explorer", "bfs"), r"'bfs' is not one of 'compiled', 'fast', 'plain'\.$"),
    (("check", "--jobs", "0", "-c", "async-d2"), r"--jobs must be at least 1 \(got 0\)"),
    (("check", "--jobs", "-3", "-c", "async-d2"), r"--jobs must be at least 1 \(got -3\)"),
    (("check", "--jobs", "two"), rf"{BAD} '--jobs' / '-j': 'two' is not a valid integer"),
    (("check", "--max-memory", "8X", "-c", "async-d2"), r"--max-memory: cannot read memory size '8X'"),
    (("check", "--max-memory", "lots", "-c", "async-d2"), r"--max-memory: cannot read memory size 'lots'"),
    (("check", "--checkpoint-every", "0", "-c", "async-d2"), r"--checkpoint-every must be a finite number.*got 0"),
    (("check", "--checkpoint-every", "-1", "-c", "async-d2"), r"--checkpoint-every must be a finite number"),
    (("check", "--checkpoint-every", "nan", "-c", "async-d2"), r"--checkpoint-every .*\(got nan\)"),
    (("check", "--checkpoint-every", "inf", "-c", "async-d2"), r"--checkpoint-every .*\(got inf\)"),
    (("check", "--checkpoint-every", "soon"), rf"{BAD} '--checkpoint-every': 'soon' is not a valid float"),
    (("check", "--resume", "-c", "async-d2"), r"--resume needs --checkpoint DIR"),
    (("check", "--show-witness", "wasted_stp", "-c", "async-d2"),
     r"--show-witness: unknown witness 'wasted_stp' \(did you mean 'wasted_step'\?\)"),
    (("check", "--show-witness", "", "-c", "async-d2"), r"--show-witness: unknown witness ''"),
    (("check", "-c", "async-d2", "--show-witness", "wasted_step", "--update-manifest"),
     r"--show-witness searches on its own; leave out --update-manifest$"),
    (("check", "-c", "async-d2", "--show-witness", "wasted_step", "--jobs", "2"),
     r"--show-witness searches on its own; leave out --jobs$"),
    (("check", "--symmetry"), rf"{NO_SUCH} '--symmetry'. \(Did you mean one of: .*'--no-symmetry'\?\)"),
    (("check", "extra"), r"Got unexpected extra argument \(extra\)"),
    # mutants
    (("mutants", "--only", "nope"), r"no mutant named 'nope'; 'asyncspec mutants' lists them"),
    (("mutants", "--only", "stale_delivery_decrements_placeholder"),
     r"\(did you mean 'stale_delivery_decrements_placeholders'\?\)"),
    (("mutants", "--explorer", "quick"), rf"{BAD} '--explorer': 'quick' is not one of"),
    # replay (options; files are in test_bad_input_files.py)
    (("replay",), r"Missing argument 'TRACE_FILE'"),
    (("replay", "x.json", "--target", "vlm"), r"'vlm' is not one of .* \(did you mean 'vllm'\?\)"),
    (("replay", "x.json", "--target", "spec2"), r"'spec2' is not one of 'spec', .* \(did you mean 'spec'\?\)"),
    (("replay", "a.json", "b.json"), r"Got unexpected extra argument \(b.json\)"),
    # prove
    (("prove", "--timeout-ms", "0"), rf"{BAD} '--timeout-ms': 0 is not in the range x>=1"),
    (("prove", "--timeout-ms", "-1"), rf"{BAD} '--timeout-ms'"),
    (("prove", "--timeout-ms", "1.5"), rf"{BAD} '--timeout-ms': '1.5' is not a valid integer"),
    (("prove", "--only", "zzzz"), r"--only 'zzzz' matches no obligation; it selects by a part of"),
    (("prove", "--only", "consecutio"), r"--only 'consecutio' matches no obligation"),
    # drift
    (("backtest",), r"Missing argument 'PYTHONS"),
    (("backtest", "/no/such/venv"), r"/no/such/venv: neither a venv folder nor a Python executable"),
    (("backtest", "python3", "--target", "sglang"), r"Invalid value for '--target'"),
    (("backtest", "python3", "--examples", "0"), r"Invalid value for '--examples'"),
    (("drift",), r"Missing argument 'OTHER'"),
    (("drift", "/no/such/vllm"), r"/no/such/vllm: no such file or folder; pass a vLLM wheel"),
    # demo, configs
    (("demo", "extra"), r"Got unexpected extra argument \(extra\)"),
    (("demo", "--json"), rf"{NO_SUCH} '--json'.$"),
    (("configs", "async-d2"), r"Got unexpected extra argument \(async-d2\)"),
    # sweep
    (("sweep", "--requests", "3x"), r"--requests: '3x' is not PROMPTxMAX_TOKENS.*write e.g. 3x2,2x2"),
    (("sweep", "--requests", "3x2x1"), r"--requests: '3x2x1' is not PROMPTxMAX_TOKENS"),
    (("sweep", "--requests", "ax2"), r"--requests: 'ax2' is not PROMPTxMAX_TOKENS"),
    (("sweep", "--requests", ""), r"--requests: '' is not PROMPTxMAX_TOKENS"),
    (("sweep", "--requests", "3x2,,2x2"), r"--requests: '' is not PROMPTxMAX_TOKENS"),
    (("sweep", "--requests", "0x2"), r"sweep: sweep-d1-b3-deliver: request r0 needs a prompt of at least 1 token"),
    (("sweep", "--requests", "3x0"), r"request r0 needs max_tokens >= 1"),
    (("sweep", "--depth", "a"), r"--depth: 'a' is not an integer.*write e.g. 1,2,3"),
    (("sweep", "--depth", "9"), r"'batch_queue_depth' must be 1..4"),
    (("sweep", "--depth", "0"), r"'batch_queue_depth' must be 1..4"),
    (("sweep", "--blocks", "x"), r"--blocks: 'x' is not an integer"),
    (("sweep", "--blocks", "1"), r"needs \d+ blocks alone but num_blocks is 1"),
    (("sweep", "--defer", "maybe"), r"--defer: 'maybe' is not on or off.*write e.g. off,on"),
    (("sweep", "--defer", "ON"), r"--defer: 'ON' is not on or off"),
    (("sweep", "--stale", "keep"), r"--stale: 'keep' is not deliver or drop"),
    (("sweep", "--stale", "deliver,"), r"--stale: '' is not deliver or drop"),
    # worker
    (("worker", "--strategy", "v3"), r"'v3' is not one of 'v1', 'v2', 'neuron', 'all'"),
    (("worker", "--strategy", "nueron"), r"\(did you mean 'neuron'\?\)"),
    # fuzz
    (("fuzz",), r"Missing option '--target'. Choose from: reference, vllm, vllm-engine, torch(, [a-z-]+)*\.$"),
    (("fuzz", "--target", "refrence"), r"'refrence' is not one of .* \(did you mean 'reference'\?\)"),
    (("fuzz", "--target", "spec"), r"'spec' is not one of 'reference', 'vllm', 'vllm-engine', 'torch'"),
    (("fuzz", "--target", "reference", "--seconds", "0"), r"--seconds must be a number > 0 \(got 0.0\)"),
    (("fuzz", "--target", "reference", "--seconds", "-1"), r"--seconds must be a number > 0 \(got -1.0\)"),
    (("fuzz", "--target", "reference", "--seconds", "nan"), r"--seconds must be a number > 0 \(got nan\)"),
    (("fuzz", "--target", "reference", "--seconds", "inf"), r"--seconds must be a number > 0 \(got inf\)"),
    (("fuzz", "--target", "reference", "--seconds", "-inf"), r"--seconds must be a number > 0 \(got -inf\)"),
    (("fuzz", "--target", "torch", "--seconds", "0"), r"--seconds must be a number > 0"),
    (("fuzz", "--target", "vllm-engine", "--seconds", "nan"), r"--seconds must be a number > 0"),
    (("fuzz", "--target", "reference", "--seconds", "soon"), rf"{BAD} '--seconds': 'soon' is not a valid float"),
    (("fuzz", "--target", "reference", "--examples", "0"), r"--examples must be >= 1 \(got 0\)"),
    (("fuzz", "--target", "reference", "--examples", "-4"), r"--examples must be >= 1 \(got -4\)"),
    (("fuzz", "--target", "reference", "--examples", "1e3"), rf"{BAD} '--examples': '1e3' is not a valid integer"),
    (("fuzz", "--target", "reference", "--jobs", "0"), r"--jobs must be >= 1 \(got 0\)"),
    (("fuzz", "--target", "torch", "--jobs", "2"), r"--jobs and --ray are options of --target reference"),
    (("fuzz", "--target", "vllm-engine", "--jobs", "2"), r"--jobs and --ray are options of --target reference"),
    (("fuzz", "--target", "reference", "--depth", "2"), r"--depth is an option of --target vllm-engine"),
    (("fuzz", "--target", "torch", "--depth", "2"), r"--depth, --known-bug and --runner are options of the vLLM"),
    (("fuzz", "--target", "torch", "--known-bug", "reset-with-deferral"), r"options of the vLLM targets, not torch"),
    (("fuzz", "--target", "vllm-engine", "--depth", "4"), rf"{BAD} '--depth': 4 is not in the range 1<=x<=3"),
    (("fuzz", "--target", "vllm-engine", "--depth", "0"), rf"{BAD} '--depth': 0 is not in the range 1<=x<=3"),
    (("fuzz", "--target", "reference", "--known-bug", "reset-with-deferral"),
     r"--known-bug is an option of --target vllm and vllm-engine"),
    (("fuzz", "--target", "vllm", "--known-bug", "reset"),
     r"'reset' is not one of 'reset-with-deferral', 'priority-undo-keeps-hash', 'reset-with-session'"),
    (("fuzz", "--target", "vllm-engine", "--known-bug", "priority-undo-keeps-hash"),
     r"--known-bug priority-undo-keeps-hash is an option of --target vllm \(the vllm-engine"),
    (("fuzz", "--target", "reference", "--profile", "hybird"), r"\(did you mean 'hybrid'\?\)"),
    (("fuzz", "--target", "reference", "--profile", "fast"), r"'fast' is not one of 'all', 'base', 'prefix-caching'"),
    (("fuzz", "--target", "vllm", "--profile", "default"), r"unknown profile 'default' for --target vllm .*now 'base'"),
    (("fuzz", "--target", "torch", "--profile", "large"), r"--profile is an option of --target reference and vllm"),
    (("fuzz", "--target", "vllm-engine", "--profile", "large"), r"--profile is an option of --target reference"),
    (("fuzz", "--target", "reference", "--seed", "x"), rf"{BAD} '--seed': 'x' is not a valid integer"),
    # mutate-vllm
    (("mutate-vllm", "--target", "torch"), r"unknown target 'torch' \(one of vllm, vllm-engine\)"),
    (("mutate-vllm", "--target", "vlm"), r"\(did you mean 'vllm'\?\)"),
    (("mutate-vllm", "--only", "no_such_mutant"), r"unknown mutant 'no_such_mutant'; `asyncspec mutate-vllm --list`"),
    (("mutate-vllm", "--only", "core_bq_aborts_lat"), r"\(did you mean 'core_bq_aborts_late'\?\)"),
    (("mutate-vllm", "--examples", "0"), r"--examples must be at least 1"),
    (("mutate-vllm", "--examples", "many"), rf"{BAD} '--examples': 'many' is not a valid integer"),
    # explain-config
    (("explain-config", "--pp", "0"), rf"{BAD} '--pipeline-parallel-size' / '--pp': 0 is not in the range x>=1"),
    (("explain-config", "--runner", "embed"), r"'embed' is not one of 'generate', 'pooling'"),
    (("explain-config", "--executor", "mpi"), r"'mpi' is not one of .* \(did you mean 'mp'\?\)"),
    (("explain-config", "--platform", "tpu"), r"'tpu' is not one of 'cuda', 'rocm', 'cpu', 'other'"),
    (("explain-config", "--model-runner", "v3"), r"'v3' is not one of 'v1', 'v2'"),
    (("explain-config", "--async-scheduling", "yes"), r"'yes' is not one of 'auto', 'on', 'off'"),
]


@pytest.mark.parametrize("args, pattern", CASES, ids=[" ".join(a) or "(none)" for a, _ in CASES])
def test_bad_command_line(args: tuple[str, ...], pattern: str) -> None:
    assert_usage_error(invoke(*args), pattern)


def test_fuzz_out_dir_that_is_a_file(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    o = invoke("fuzz", "--target", "reference", "--examples", "1", "--out-dir", str(blocker / "sub"))
    assert_usage_error(o, rf"--out-dir {blocker}/sub: {blocker} is not a folder \(choose a writable folder\)")


def test_html_to_a_folder(tmp_path: Path) -> None:
    o = invoke("replay", str(tmp_path / "missing.json"), "--html", str(tmp_path / "out.html"))
    assert o.code == 2 and len(o.problem_lines()) == 1 and "missing.json" in o.problem_lines()[0]


def test_the_corpus_covers_every_command() -> None:
    covered = {args[0] for args, _ in CASES if args and not args[0].startswith("-")}
    assert set(commands()) - covered == set()
    assert len(CASES) >= 90
