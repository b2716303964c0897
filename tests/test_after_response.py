"""fallback_path (cache_miss): work a handler starts as its response goes out (a deferred metrics flush, its
span outliving the request's root) is no miss path, even where it mostly joins the slow requests; the
slow dependency that made them slow is still named."""

from __future__ import annotations

from tailscope.analysis.diagnosis import diagnose_frame
from tests.mechanism_frames import by_pattern
from tests.mechanism_paths import deferred_flush_service


def test_a_flush_after_the_response_is_no_cache_miss() -> None:
    result = diagnose_frame(deferred_flush_service(101))
    listed = [(f.pattern, f.span_name, round(f.confidence, 2)) for f in result.findings]
    assert by_pattern(result.findings).get("cache_miss", 0.0) < 0.5, listed
    assert result.findings[0].pattern == "slow_dependency", listed
    assert result.findings[0].span_name == "features.read", listed
