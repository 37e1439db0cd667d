"""Coverage by cited function (fidelity/cited_coverage.py): the vLLM code each citation names runs
during the events in which the spec runs its model of it."""
from __future__ import annotations

import pytest

from asyncspec.fidelity.cited_coverage import NOT_PER_EVENT, Recorder, coverage, load_citations, run

CITATIONS = load_citations()


def test_a_target_counts_only_in_events_where_its_spec_function_ran() -> None:
    citation = next(c for c in CITATIONS.values() if not any((c.spec, t) in NOT_PER_EVENT for t in c.targets))
    target = citation.targets[0]
    recorder = Recorder({}, {})
    recorder.events = [({citation.spec}, {target}), (set(), {target}), ({citation.spec}, set())]
    row = next(r for r in coverage(recorder) if r.spec == citation.spec)
    assert row.spec_events == 2 and dict(row.targets)[target] == 1
    recorder.events = [({citation.spec}, set()), (set(), {target})]  # vLLM ran it, but not then
    row = next(r for r in coverage(recorder) if r.spec == citation.spec)
    assert not row.shown and target in row.unshown


def test_every_exemption_names_a_real_citation() -> None:
    for spec, target in NOT_PER_EVENT:
        assert spec in CITATIONS and target in CITATIONS[spec].targets


@pytest.mark.slow
def test_every_cited_function_runs_during_the_events_its_spec_function_explains() -> None:
    pytest.importorskip("vllm")
    rows = run(examples=60)
    ran = [r for r in rows if r.spec_events]
    assert len(ran) >= 40
    assert [(r.spec, r.unshown) for r in ran if not r.shown] == []
    still_needed = {(r.spec, t) for r in ran for t, n in r.targets if n == 0}
    assert set(NOT_PER_EVENT) - still_needed <= {
        pair for pair in NOT_PER_EVENT if not any(r.spec == pair[0] for r in ran)}, "stale NOT_PER_EVENT entries"
