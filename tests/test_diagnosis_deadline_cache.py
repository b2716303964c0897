"""A client deadline and one retry beside a working cache is timeout_retry, not a cache miss; a cache
whose reads start missing stays cache_miss (tests/deadline_cache_services.py)."""

from __future__ import annotations

from conftest import seed_variants

from tailscope.analysis.diagnosis import diagnose_frame
from tests.deadline_cache_services import cache_starts_missing, deadline_beside_cache


def _found(result) -> list:
    return [(f.pattern, round(f.confidence, 2), f.span_name) for f in result.findings]


def _best(result, pattern: str) -> float:
    return max((f.confidence for f in result.findings if f.pattern == pattern), default=0.0)


@seed_variants(1, 2)
def test_a_deadline_beside_a_cache_is_no_miss(seed: int) -> None:
    """The API call made on a third of requests after the cache read is cut at 250 ms and made again
    (before: cache_miss 0.95 on it as the cache's fallback, above timeout_retry 0.89)."""
    result = diagnose_frame(deadline_beside_cache(seed, same_name=False))
    assert result.findings[0].pattern == "timeout_retry", _found(result)
    assert _best(result, "cache_miss") < 0.5, _found(result)


def test_a_cache_read_named_like_the_call_is_no_attempt_of_it() -> None:
    """Both calls named `get` (a client convention naming spans by method): the cache read before the
    API call is a call to another peer, not the API call's first attempt (before: no timeout_retry,
    unexplained_tail 0.45 on top)."""
    result = diagnose_frame(deadline_beside_cache(2, same_name=True))
    assert result.findings[0].pattern == "timeout_retry" and result.findings[0].confidence >= 0.8, \
        _found(result)
    assert _best(result, "cache_miss") < 0.5, _found(result)


def test_attempts_cut_late_in_error_are_the_deadline() -> None:
    """A quarter of the cut attempts end 20-60 ms past the deadline, in error (its timer fired late):
    still a deadline (before: timeout_retry 0.38, cache_miss 0.95 on top); the twin, whose late
    attempts end as answers, has calls that outlast the deadline and stays below 0.5."""
    late = diagnose_frame(deadline_beside_cache(3, same_name=False, late_timers=0.25, late_errors=True))
    assert late.findings[0].pattern == "timeout_retry" and late.findings[0].confidence >= 0.5, _found(late)
    answered = diagnose_frame(deadline_beside_cache(3, same_name=False, late_timers=0.25, late_errors=False))
    assert _best(answered, "timeout_retry") < 0.5, _found(answered)


@seed_variants(1, 2)
def test_a_cache_that_starts_missing_stays_cache_miss(seed: int) -> None:
    """The twin: the store call is made only on misses, from one moment on, with no deadline and no
    retry."""
    result = diagnose_frame(cache_starts_missing(seed))
    assert result.findings[0].pattern == "cache_miss" and result.findings[0].confidence >= 0.8, _found(result)
    assert _best(result, "timeout_retry") < 0.5, _found(result)
