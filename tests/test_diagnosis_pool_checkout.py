"""A connection pool that runs dry with no span for the checkout (s10 class E): requests wait before
their first query until another request ends and gives its connection back: lock_contention on the
query. The same gaps made by process pauses (the pool never dry) end with the pause, not with another
request, and are no pool wait."""

from __future__ import annotations

from tailscope.analysis.diagnosis import diagnose_frame
from tests.pool_checkout_services import pooled_threads_service


def _found(result) -> list:
    return [
        (f.pattern, round(f.confidence, 2), f.span_name, f.evidence.get("stats", {}).get("mechanism"))
        for f in result.findings
    ]


def _pool(result) -> list:
    return [f for f in result.findings if f.evidence.get("stats", {}).get("mechanism") == "pool_checkout"]


def test_a_pool_smaller_than_the_threads_is_lock_contention_before_the_first_query() -> None:
    result = diagnose_frame(pooled_threads_service(1, connections=2))
    pool = _pool(result)
    assert pool and pool[0].confidence >= 0.5 and pool[0].span_name == "SELECT users", _found(result)
    assert pool[0].evidence["stats"]["pool_size_estimate"] == 2, _found(result)


def test_first_queries_delayed_by_process_pauses_are_no_pool_wait() -> None:
    result = diagnose_frame(pooled_threads_service(1, connections=5, pauses=True, slow_queries=False))
    assert all(f.confidence < 0.5 for f in _pool(result)), _found(result)
