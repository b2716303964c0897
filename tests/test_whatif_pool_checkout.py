"""A connection pool whose checkout has no span (ActiveRecord leases a connection at a request's
first query and holds it to the request's end): the wait is the gap before the first query, not in
any span; and a lock named at a process's entry span is the process's, waited for by every route."""

from __future__ import annotations

from tailscope.analysis.whatif.engine import evaluate
from tests.hand_frames import hand_frame


def _request(rows: list[tuple], trace: int, t: float, route: str, wait: float) -> None:
    """A request: 1 ms of middleware, the checkout wait, two 2 ms queries, 1 ms of rendering."""
    root = len(rows)
    rows.append((trace, -1, route, "Server", 0, t, 6.0 + wait))
    rows.append((trace, root, "SELECT", "Client", 0, t + 1.0 + wait, 2.0))
    rows.append((trace, root, "SELECT", "Client", 0, t + 3.0 + wait, 2.0))


def _run(routes: tuple[str, ...]) -> list[tuple]:
    """240 calm requests (every 20 ms) and 60 that waited 50 ms for a connection (at 5 s on)."""
    rows: list[tuple] = []
    for k in range(300):
        _request(rows, k, 20.0 * k, routes[k % len(routes)], 50.0 if k >= 240 else 0.0)
    return rows


def _fixed(rows: list[tuple], span: str) -> tuple[float, float]:
    finding = {"pattern": "lock_contention", "confidence": 0.9, "span_name": span, "evidence": {"stats": {}}}
    result = evaluate(hand_frame(rows), [finding])
    hits = [o.p99_ms for o in result.outcomes if o.key == f"no_lock_wait:{span}"]
    assert hits, [o.key for o in result.outcomes]
    return result.measured.p99_ms, hits[0]


def test_the_wait_before_a_requests_first_query_is_cut() -> None:
    before, after = _fixed(_run(("GET /recs",)), "SELECT")
    assert before > 50
    assert after < 6.5, after


def test_a_lock_named_at_one_routes_entry_span_is_cut_for_every_route() -> None:
    before, after = _fixed(_run(("GET /recs", "GET /products")), "GET /products")
    assert before > 50
    assert after < 6.5, after
