"""The end every fuzz target shares (``statemachine_tests/core/fuzz_end.py``): order of output and exit code."""
from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from asyncspec.statemachine_tests.core.fuzz_end import Work, finish, fixed_work, result_word


@pytest.mark.parametrize("work, code, word", [
    (fixed_work(20, 20, 5.0, False), 0, "ok"),
    (fixed_work(7, None, 5.0, False), 0, "ok"),  # time-bounded: whatever ran is the run
    (fixed_work(7, 20, 5.0, False), 3, "partial"),  # --seconds before --examples
    (fixed_work(0, None, 5.0, False), 3, "partial"),  # nothing checked never passes
    (fixed_work(20, 20, 5.0, True), 3, "partial"),  # interrupted, even after the last example
])
def test_exit_code_and_result_word(work: Work, code: int, word: str, capsys: pytest.CaptureFixture[str]) -> None:
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


class DivergesOnce:
    """A stand-in for driving one case: the first call diverges, every later one (Hypothesis'
    replay of the same case) does not."""

    def __init__(self) -> None:
        self.results: list[SimpleNamespace] = []

    def __call__(self, *_: object) -> SimpleNamespace:
        self.results.append(SimpleNamespace(diverged=not self.results))
        return self.results[-1]


def test_an_engine_divergence_that_hypothesis_cannot_replay_is_kept_not_raised(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Hypothesis replays a failing case before shrinking; when the replay does not diverge it
    raises FlakyFailure. The campaign keeps the divergence it saw (the mutant self-test had
    stopped with 'failed outside vLLM' on runner_swap_token_rows, whose case does replay on a
    fresh engine)."""
    from asyncspec.statemachine_tests.vllm_engine import engine_campaign

    drive = DivergesOnce()
    monkeypatch.setattr(engine_campaign, "drive_case", drive)
    monkeypatch.setattr(engine_campaign, "explain", lambda _: None)
    campaign = engine_campaign.EngineCampaign(seconds=float("inf"), seed=0, max_batches=1)
    assert campaign.run() is drive.results[0] and campaign.stats.flaky == 1 and len(drive.results) >= 2


def test_a_scheduler_divergence_that_hypothesis_cannot_replay_is_kept_not_raised(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The same for the reference/vLLM campaign (``campaign.Campaign``)."""
    from asyncspec.statemachine_tests.scheduler import campaign

    drive = DivergesOnce()
    monkeypatch.setattr(campaign, "drive", drive)
    monkeypatch.setattr(campaign, "target_coverage", lambda _: None)
    assert campaign.Campaign("reference", float("inf"), seed=0, max_batches=1).run() is drive.results[0]
    assert len(drive.results) >= 2
