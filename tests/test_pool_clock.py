"""lock_contention's pool hand-off test (pool_release.py) against writes a server throttles until the next
wall-clock second: their ends line up with the clock, and so do the other writes' ends, without any
connection passing from one caller to the next."""

from __future__ import annotations

from tailscope.analysis.diagnosis import diagnose_frame
from tests.mechanism_frames import by_pattern
from tests.mechanism_paths import clock_throttled_writes


def _listed(result) -> list:
    return [(f.pattern, f.span_name, round(f.confidence, 2)) for f in result.findings]


def test_retries_at_the_next_second_are_no_pool_hand_off() -> None:
    result = diagnose_frame(clock_throttled_writes(81))
    found = by_pattern(result.findings)
    assert found.get("lock_contention", 0.0) < 0.5, _listed(result)
    assert result.findings[0].pattern == "slow_dependency", _listed(result)
    assert result.findings[0].span_name == "write quote", _listed(result)


def test_the_hand_off_test_finds_no_pool_in_waits_that_keep_time_with_the_clock() -> None:
    import numpy as np

    from tailscope.analysis.diagnosis.model import Context
    from tailscope.analysis.diagnosis.pool_release import release_handoff

    frame = clock_throttled_writes(82)
    code = frame.names.index("write quote")
    spans = np.nonzero((frame.name == code) & (frame.request >= 0))[0]
    share = release_handoff(Context(frame, seed=0), code, spans)
    assert np.isnan(share) or share < 0.5, share
