"""A bounded pool whose jobs wait for a worker before their span starts (Vert.x's executeBlocking on
its worker pool): a burst of another route's long jobs fills the pool, and the queueing finding names
the query span. The wait is the gap before the span, not in it: the lever "as in calm stretches" cuts
that gap to a calm one's and takes the burst's long holds back to their calm time."""

from __future__ import annotations

from tailscope.analysis.whatif.engine import evaluate
from tests.hand_frames import hand_frame


def _run() -> list[tuple]:
    """600 requests 10 ms apart: the recommendation route (a 4 ms query after its pool wait, then 5 ms
    of work) and every third one a history route (an 8 ms query; 60 ms during the burst). From 4 s to
    4.6 s the pool is full: the queries wait 80-100 ms before they start."""
    rows: list[tuple] = []
    for k in range(600):
        t = 10.0 * k
        burst = 4000 <= t < 4600
        wait = 80.0 + (k % 5) * 5.0 if burst else 0.2 + (k % 3) * 0.1
        root = len(rows)
        if k % 3 == 2:
            hold = 60.0 if burst else 8.0
            rows.append((k, -1, "GET /history", "Server", k % 2, t, 1.0 + wait + hold))
            rows.append((k, root, "SELECT events", "Client", k % 2, t + 1.0 + wait, hold))
        else:
            rows.append((k, -1, "GET /recs", "Server", k % 2, t, 1.0 + wait + 4.0 + 5.0))
            rows.append((k, root, "SELECT events", "Client", k % 2, t + 1.0 + wait, 4.0))
            rows.append((k, root, "score", "Internal", k % 2, t + 5.0 + wait, 5.0))
    return rows


def test_a_pools_wait_before_its_span_starts_goes_with_the_burst() -> None:
    finding = {"pattern": "queueing", "confidence": 0.9, "span_name": "SELECT events", "evidence": {}}
    result = evaluate(hand_frame(_run()), [finding])
    hits = [o for o in result.outcomes if o.key == "queue_as_calm:SELECT events"]
    assert hits, [o.key for o in result.outcomes]
    assert result.measured.p99_ms > 100
    # calm: recs 10.2-10.4 ms, history 9.2-9.4 ms
    assert hits[0].p99_ms < 10.6, hits[0].p99_ms
    assert hits[0].p50_ms <= result.measured.p50_ms


def _audit_run() -> list[tuple]:
    """500 requests 10 ms apart on two instances, each: 2 ms of work, a pool checkout span, a 3 ms
    INSERT. From 3 s to 4 s the commits wait for a slow standby (40 ms): the pool runs out and the
    checkouts wait 30-50 ms."""
    rows: list[tuple] = []
    for k in range(500):
        t = 10.0 * k
        slow = 3000 <= t < 4000
        wait = 30.0 + (k % 5) * 5.0 if slow else 0.1 + (k % 3) * 0.05
        insert = 40.0 if slow else 3.0
        root = len(rows)
        rows.append((k, -1, "POST /moderate", "Server", k % 2, t, 2.0 + wait + insert))
        rows.append((k, root, "pool.connect", "Internal", k % 2, t + 2.0, wait))
        rows.append((k, root, "INSERT audit", "Client", k % 2, t + 2.0 + wait, insert))
    return rows


def test_a_queue_at_a_pool_whose_holders_got_slow_goes_with_their_slowness() -> None:
    finding = {"pattern": "queueing", "confidence": 0.9, "span_name": "pool.connect", "evidence": {}}
    result = evaluate(hand_frame(_audit_run()), [finding])
    hits = {o.key: o for o in result.outcomes if o.key.startswith("queue_as_calm")}
    assert "queue_as_calm_held:pool.connect" in hits, list(hits)
    assert result.measured.p99_ms > 60
    # the checkouts as calm leave the slow INSERTs (43 ms); the holders as calm take them back to 5 ms
    assert hits["queue_as_calm:pool.connect"].p99_ms > 40
    assert hits["queue_as_calm_held:pool.connect"].p99_ms < 5.3, hits["queue_as_calm_held:pool.connect"]


def test_a_pool_lever_on_the_entry_span_leaves_the_requests_as_calm() -> None:
    """A queueing finding at the request's own span (a backlog with no wait span): the pool lever on
    an entry span redraws its steps (one of them over twice as slow in a stretch), but it sees no
    queue; "requests as calm" (the requests half as slow again there) still answers it."""
    rows: list[tuple] = []
    for k in range(500):
        t = 10.0 * k
        work = 9.0 + (k % 4) * 0.1 if 2000 <= t < 2600 else 4.0 + (k % 3) * 0.1
        root = len(rows)
        rows.append((k, -1, "GET /recs", "Server", k % 2, t, 1.0 + work + 5.0))
        rows.append((k, root, "work", "Internal", k % 2, t + 1.0, work))
        rows.append((k, root, "render", "Internal", k % 2, t + 1.0 + work, 5.0))
    finding = {"pattern": "queueing", "confidence": 0.9, "span_name": "GET /recs", "evidence": {}}
    result = evaluate(hand_frame(rows), [finding])
    keys = {o.key for o in result.outcomes}
    assert "queue_as_calm_held:GET /recs" in keys, keys
    assert "queue_as_calm:GET /recs" in keys, keys


def test_gaps_cut_before_calm_spans_leave_the_requests_as_calm() -> None:
    """The finding names a service's entry span below a proxy: its own times are never twice the
    calm ones (no wait in it), only the gaps before some grew; the lever that cuts those gaps sees no
    queue, so "requests as calm" (the requests half as slow again in a stretch) is offered beside it."""
    rows: list[tuple] = []
    for k in range(500):
        t = 10.0 * k
        busy = 2000 <= t < 2600
        work, gap = (9.0 + (k % 4) * 0.1, 3.0) if busy else (6.0 + (k % 3) * 0.1, 0.2)
        root = len(rows)
        rows.append((k, -1, "proxy", "Server", 1, t, gap + work + 0.2))
        rows.append((k, root, "GET /recs", "Server", 0, t + gap, work))
    finding = {"pattern": "queueing", "confidence": 0.9, "span_name": "GET /recs", "evidence": {}}
    result = evaluate(hand_frame(rows), [finding])
    keys = {o.key for o in result.outcomes}
    assert "queue_as_calm:GET /recs" in keys, keys
    assert "queue_as_calm:proxy" in keys, keys
