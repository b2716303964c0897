"""head_of_line (lock_contention): calls that end behind an earlier reply of their own process on a shared,
multiplexed connection; a cache that stalls every process's calls at once stays a slow dependency."""

from __future__ import annotations

from tailscope.analysis.diagnosis import diagnose_frame
from tests.mechanism_frames import by_pattern
from tests.mechanism_paths import multiplexed_cache


def _listed(result) -> list:
    return [(f.pattern, f.span_name, round(f.confidence, 2)) for f in result.findings]


def test_commands_queued_behind_a_large_reply_are_lock_contention() -> None:
    result = diagnose_frame(multiplexed_cache(91, head_of_line=True))
    top = result.findings[0]
    assert top.pattern == "lock_contention" and top.confidence >= 0.5, _listed(result)
    assert top.span_name == "GET", _listed(result)
    assert by_pattern(result.findings).get("slow_dependency", 0.0) < 0.5, _listed(result)


def test_a_cache_that_stalls_every_process_at_once_is_no_head_of_line() -> None:
    result = diagnose_frame(multiplexed_cache(92, head_of_line=False))
    assert by_pattern(result.findings).get("lock_contention", 0.0) < 0.5, _listed(result)
    assert result.findings[0].pattern == "slow_dependency", _listed(result)
