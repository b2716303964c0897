"""A process that stops with one request in flight at a time: where its runtime reports its GC pauses
with their durations and they miss the stops, the stops are not named gc_pause (a starved or
throttled CPU stops a process too); where the reports are the stops, they are (tests/mechanism_starved.py)."""

from __future__ import annotations

from conftest import seed_variants

from tailscope.analysis.diagnosis import diagnose_frame
from tests.mechanism_frames import by_pattern
from tests.mechanism_starved import starved_scorer, steady_quota_service


def _found(result) -> list:
    return [(f.pattern, round(f.confidence, 2), f.span_name) for f in result.findings]


@seed_variants(1, 2)
def test_stops_the_reported_gc_pauses_miss_are_no_confident_gc_pause(seed: int) -> None:
    result = diagnose_frame(starved_scorer(seed, gc="elsewhere"))
    gc = [f for f in result.findings if f.pattern == "gc_pause"]
    assert gc and 0.3 <= gc[0].confidence < 0.5, _found(result)
    assert gc[0].evidence["stats"]["tail_excess_share_in_reported_gc"] < 0.1, gc[0].evidence["stats"]
    assert "not the favoured reading" in gc[0].evidence["summary"]


@seed_variants(1, 2)
def test_stops_the_runtime_reports_stay_gc_pause(seed: int) -> None:
    result = diagnose_frame(starved_scorer(seed, gc="stops"))
    assert by_pattern(result.findings)["gc_pause"] >= 0.9, _found(result)
    assert result.findings[0].pattern == "gc_pause", _found(result)


@seed_variants(1, 2)
def test_quota_stalls_with_aligned_starts_that_reported_gc_misses_are_throttling(seed: int) -> None:
    """A quota used up at the same point of each busy period aligns the stalls' starts as well as
    their ends; a timer-driven collection of fixed length would too, but the runtime reports its
    pauses and they miss the stalls: cpu_throttling, no gc_pause beside it."""
    result = diagnose_frame(steady_quota_service(seed, gc="elsewhere"))
    found = by_pattern(result.findings)
    assert result.findings[0].pattern == "cpu_throttling" and found["cpu_throttling"] >= 0.8, _found(result)
    assert found.get("gc_pause", 0.0) < 0.5, _found(result)


@seed_variants(1, 2)
def test_a_fixed_length_collection_the_runtime_reports_stays_gc_pause(seed: int) -> None:
    result = diagnose_frame(steady_quota_service(seed, gc="stops"))
    found = by_pattern(result.findings)
    assert result.findings[0].pattern == "gc_pause" and found["gc_pause"] >= 0.9, _found(result)
    assert found.get("cpu_throttling", 0.0) < 0.3, _found(result)
