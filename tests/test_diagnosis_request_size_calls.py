"""A query that fetches the rows of the items a request handles grows with the request (dependency_tail
.grows_with_size): a storefront asks for more candidates, hydrates them in one `IN (...)` query, re-ranks
and renders them; the query's long calls are the large requests', not a slow database. Its twin: one
replica of three is slow (I/O-bound, heavy tail) beside the same re-rank: a slow dependency."""

from __future__ import annotations

from tailscope.analysis.diagnosis import diagnose_frame
from tests.mechanism_frames import TraceBuilder, by_pattern, lognormal


def _storefront(seed: int, mode: str) -> TraceBuilder:
    """`grown`: ~420 candidates a request (60-2000, a carousel asking 7x more); `slow`: the usual ~60,
    replica 1 of 3 six times slower with a heavy tail; each query costs a round trip plus its rows."""
    b = TraceBuilder(seed)
    for t in b.arrivals(3000, 150.0):
        b.new_trace()
        api = f"shop/{int(b.rng.integers(4))}"
        root = b.span(None, "GET /similar", "Server", api, t, 0.0)
        cur = t + lognormal(b.rng, 3.0, 0.3)
        replica = int(b.rng.integers(3))
        slow = mode == "slow" and replica == 1

        def query(rows: int, slow: bool = slow) -> float:
            run = (0.55 + 0.012 * rows) * (6 * b.rng.lognormal(0, 0.45) if slow else b.rng.lognormal(0, 0.3))
            if slow and b.rng.random() < 0.12:
                run += min(600.0, 25.0 * (b.rng.pareto(1.4) + 1))
            return 1.8 * b.rng.lognormal(0, 0.2) + run

        for rows in (1, None):
            if rows is None:  # the candidates from the search, then their rows
                k = int(min(2000, max(60, 420 * b.rng.lognormal(0, 0.5)))) if mode == "grown" else int(
                    min(300, max(12, 60 * b.rng.lognormal(0, 0.4))))
                s = lognormal(b.rng, 7.0, 0.2)
                b.span(root, "search", "Client", api, cur, s, net__peer__name="ann")
                cur += s + 0.1
                rows = k
            d = query(rows)
            b.span(root, "db.query", "Client", api, cur, d, db__system="mysql",
                   net__peer__name=f"replica-{replica}")
            cur += d + 0.1
        r = (0.4 + 0.035 * k) * b.rng.lognormal(0, 0.15)
        b.span(root, "rerank", "Internal", api, cur, r, app__candidates__count=k)
        cur += r + 0.05
        shown = min(k, 120 if mode == "grown" else 24)
        v = (1.4 + 0.09 * shown) * b.rng.lognormal(0, 0.15)
        b.span(root, "render", "Internal", api, cur, v, app__items__rendered=shown)
        b.set_end(root, cur + v + 0.3)
    return b


def test_a_query_that_fetches_the_requests_items_is_not_a_slow_dependency():
    findings = diagnose_frame(_storefront(2, "grown").frame()).findings
    found = by_pattern(findings)
    assert found.get("slow_dependency", 0.0) < 0.45, [(f.pattern, round(f.confidence, 2)) for f in findings]
    assert findings[0].pattern == "large_payload"
    slow = next(f for f in findings if f.pattern == "slow_dependency")
    assert slow.evidence["stats"]["grows_with_request_size"]["size"] == "app.candidates.count"


def test_a_slow_replica_beside_the_same_rerank_stays_a_slow_dependency():
    findings = diagnose_frame(_storefront(2, "slow").frame()).findings
    assert findings[0].pattern == "slow_dependency" and findings[0].confidence >= 0.9
    assert "grows_with_request_size" not in findings[0].evidence["stats"]
