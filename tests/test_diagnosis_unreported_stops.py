"""A process that stops with one request in flight at a time: where its runtime reports its GC pauses
with their durations and they miss the stops, the stops are not named gc_pause (a starved or
throttled CPU stops a process too); where the reports are the stops, they are (tests/mechanism_starved.py)."""

from __future__ import annotations

import pytest

from tailscope.analysis.diagnosis import diagnose_frame
from tests.mechanism_frames import by_pattern
from tests.mechanism_starved import starved_scorer


def _found(result) -> list:
    return [(f.pattern, round(f.confidence, 2), f.span_name) for f in result.findings]


@pytest.mark.parametrize("seed", [1, 2])
def test_stops_the_reported_gc_pauses_miss_are_no_confident_gc_pause(seed: int) -> None:
    result = diagnose_frame(starved_scorer(seed, gc="elsewhere"))
    gc = [f for f in result.findings if f.pattern == "gc_pause"]
    assert gc and 0.3 <= gc[0].confidence < 0.5, _found(result)
    assert gc[0].evidence["stats"]["tail_excess_share_in_reported_gc"] < 0.1, gc[0].evidence["stats"]
    assert "not the favoured reading" in gc[0].evidence["summary"]


@pytest.mark.parametrize("seed", [1, 2])
def test_stops_the_runtime_reports_stay_gc_pause(seed: int) -> None:
    result = diagnose_frame(starved_scorer(seed, gc="stops"))
    assert by_pattern(result.findings)["gc_pause"] >= 0.9, _found(result)
    assert result.findings[0].pattern == "gc_pause", _found(result)
