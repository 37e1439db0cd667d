"""The end every fuzz target shares (``statemachine_tests/fuzz_end.py``): order of output and exit code."""
from __future__ import annotations

import json

import pytest

from asyncspec.statemachine_tests.fuzz_end import Coverage, finish, fixed_work, result_word


@pytest.mark.parametrize("work, code, word", [
    (fixed_work(20, 20, 5.0, False), 0, "ok"),
    (fixed_work(7, None, 5.0, False), 0, "ok"),  # time-bounded: whatever ran is the run
    (fixed_work(7, 20, 5.0, False), 3, "partial"),  # --seconds before --examples
    (fixed_work(0, None, 5.0, False), 3, "partial"),  # nothing checked never passes
    (fixed_work(20, 20, 5.0, True), 3, "partial"),  # interrupted, even after the last example
])
def test_exit_code_and_result_word(work: Coverage, code: int, word: str, capsys: pytest.CaptureFixture[str]) -> None:
    shown: list[str] = []
    rc = finish({"result": result_word(False, work)}, False, work, True, lambda: shown.append("divergence"),
                lambda: shown.append("summary"))
    out, err = capsys.readouterr()
    assert rc == code and json.loads(out)["result"] == word and shown == []
    assert (err.count("\n") == 1 and err.startswith("fuzz: ")) if code == 3 else err == ""


def test_a_divergence_is_shown_before_the_summary_and_wins_over_partial(capsys: pytest.CaptureFixture[str]) -> None:
    shown: list[str] = []
    work = fixed_work(3, 20, 5.0, True)
    rc = finish({}, True, work, False, lambda: shown.append("divergence"), lambda: shown.append("summary"))
    assert rc == 1 and shown == ["divergence", "summary"] and result_word(True, work) == "divergence"
    assert capsys.readouterr().out == ""
