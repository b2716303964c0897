"""slow_dependency: the HTTP attempt spans an SDK call's client library writes under it are that call,
not a dependency of their own (one name for every destination mixes fast and slow peers)."""

from __future__ import annotations

from tailscope.analysis.diagnosis import diagnose_frame
from tests.mechanism_frames import by_pattern
from tests.mechanism_paths import sdk_attempts_service


def test_attempt_spans_under_sdk_calls_are_no_slow_dependency() -> None:
    result = diagnose_frame(sdk_attempts_service(71))
    found = by_pattern(result.findings)
    listed = [(f.pattern, f.span_name, round(f.confidence, 2)) for f in result.findings]
    assert found.get("slow_dependency", 0.0) < 0.5, listed


def test_a_throttled_call_with_retried_attempts_is_a_slow_dependency() -> None:
    result = diagnose_frame(sdk_attempts_service(72, throttled=0.08))
    top = result.findings[0]
    assert top.pattern == "slow_dependency" and top.confidence >= 0.5, [
        (f.pattern, f.span_name, round(f.confidence, 2)) for f in result.findings]
    assert top.span_name == "Features.Read"
