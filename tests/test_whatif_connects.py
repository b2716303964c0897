"""A connection opened per request (persistent connections turned off: every request pays the
resolver, TCP, TLS and auth round trips in its connect span): with connections reused, the connect
costs what a reused one does (nothing, where no request in the run reused one)."""

from __future__ import annotations

import numpy as np

from tailscope.analysis.whatif.engine import evaluate
from tests.hand_frames import hand_frame


def _rows(reused_share: float) -> list[tuple]:
    """300 requests: a connect span (15-20 ms, or 0.03 ms where it reused one), then a 3 ms query."""
    rng = np.random.default_rng(7)
    rows: list[tuple] = []
    for k in range(300):
        t = 50.0 * k
        connect = 0.03 if rng.random() < reused_share else float(rng.uniform(15, 20))
        root = len(rows)
        rows.append((k, -1, "GET /similar", "Server", 0, t, connect + 3.2))
        rows.append((k, root, "PDO::connect", "Client", 0, t + 0.1, connect))
        rows.append((k, root, "PDOStatement::execute", "Client", 0, t + 0.1 + connect, 3.0))
    return rows


def _reused(rows: list[tuple]) -> tuple[float, float]:
    finding = {"pattern": "network", "confidence": 0.9, "span_name": "PDO::connect",
               "evidence": {"stats": {}}}
    result = evaluate(hand_frame(rows), [finding])
    hits = [o.p99_ms for o in result.outcomes if o.key == "network_connects_reused:PDO::connect"]
    assert hits, [o.key for o in result.outcomes]
    return result.measured.p99_ms, hits[0]


def test_a_connect_per_request_is_paid_as_a_reused_connection() -> None:
    before, after = _reused(_rows(0.0))
    assert before > 18
    assert after < 3.5, after


def test_a_connect_takes_the_time_of_one_that_reused_a_connection() -> None:
    before, after = _reused(_rows(0.5))
    assert before > 18
    assert 3.21 < after < 3.5, after


def test_a_dial_under_each_call_of_a_fan_out_is_paid_as_a_reused_connection() -> None:
    # a client that dials per pipeline (feast-redis ndots-dns: a dial under each of a request's shard
    # calls, each paying the resolver's search domains): several per request, one per call
    rng = np.random.default_rng(9)
    rows: list[tuple] = []
    for k in range(200):
        t = 50.0 * k
        root = len(rows)
        dials = rng.uniform(5, 9, 4).tolist()
        rows.append((k, -1, "Score", "Server", 0, t, max(dials) + 1.2))
        for dial in dials:
            call = len(rows)
            rows.append((k, root, "redis.pipeline", "Client", 0, t + 0.1, dial + 1.0))
            rows.append((k, call, "redis.dial", "Client", 0, t + 0.1, dial))
    finding = {"pattern": "network", "confidence": 0.9, "span_name": "redis.dial", "evidence": {"stats": {}}}
    result = evaluate(hand_frame(rows), [finding])
    hits = [o.p99_ms for o in result.outcomes if o.key == "network_connects_reused:redis.dial"]
    assert hits and result.measured.p99_ms > 8, [o.key for o in result.outcomes]
    assert hits[0] < 1.5, hits
