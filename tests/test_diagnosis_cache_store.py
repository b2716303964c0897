"""A store used as a cache being slow is not a cache miss (s10 class A): two duration modes of a
lookup whose slow mode is spent inside the cache's own calls (no other path taken) are the store's,
while the same modes made by a database read on the slow requests only stay a cache miss."""

from __future__ import annotations

from tailscope.analysis.diagnosis import diagnose_frame
from tests.cache_store_services import feature_store_service


def _found(result) -> list:
    return [(f.pattern, round(f.confidence, 2), f.span_name) for f in result.findings]


def _conf(result, pattern: str) -> float:
    return max((f.confidence for f in result.findings if f.pattern == pattern), default=0.0)


def test_a_blocked_redis_shard_is_not_a_cache_miss() -> None:
    result = diagnose_frame(feature_store_service(1, blocked_shard=True))
    assert _conf(result, "cache_miss") < 0.5, _found(result)
    assert result.findings[0].pattern == "slow_dependency", _found(result)


def test_misses_read_from_the_database_stay_a_cache_miss() -> None:
    result = diagnose_frame(feature_store_service(1, blocked_shard=False))
    assert result.findings[0].pattern == "cache_miss" and result.findings[0].confidence >= 0.5, _found(result)
