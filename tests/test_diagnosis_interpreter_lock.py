"""Stalls of a threaded process held by one request's turns on its interpreter lock (Ruby's GVL,
CPython's GIL) are lock_contention, not a collector's pause; the same stalls from a collector, with
the same long CPU requests running at the same rate, stay gc_pause (tests/mechanism_gvl.py)."""

from __future__ import annotations

from conftest import seed_variants

from tailscope.analysis.diagnosis import diagnose_frame
from tests.mechanism_frames import by_pattern
from tests.mechanism_gvl import threaded_service


def _found(result) -> list:
    return [(f.pattern, round(f.confidence, 2), f.span_name) for f in result.findings]


@seed_variants(1, 2)
def test_stalls_held_by_one_requests_turns_on_the_lock_are_lock_contention(seed: int) -> None:
    result = diagnose_frame(threaded_service(seed, holder="lock"))
    top = result.findings[0]
    assert top.pattern == "lock_contention" and top.confidence >= 0.5, _found(result)
    stats = top.evidence["stats"]
    assert stats["mechanism"] == "interpreter_lock" and stats["holder"] == "to_json", stats
    assert stats["held_share"] >= 0.8 > stats["held_share_by_chance"] + 0.3, stats
    assert stats["instances"] and stats["services"] == ["web"], stats
    assert by_pattern(result.findings).get("gc_pause", 0.0) < 0.5, _found(result)


@seed_variants(1, 2)
def test_a_collectors_pauses_beside_long_cpu_requests_stay_gc_pause(seed: int) -> None:
    result = diagnose_frame(threaded_service(seed, holder="gc"))
    found = by_pattern(result.findings)
    assert result.findings[0].pattern == "gc_pause" and found["gc_pause"] >= 0.8, _found(result)
    assert found.get("lock_contention", 0.0) < 0.3, _found(result)
