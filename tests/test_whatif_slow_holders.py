"""A connection pool drained by another endpoint's slow queries: the searches' `fetch` waits for a
connection (the gap before its `SELECT`) while a report's long `SELECT`s hold the pool, and the
reports wait for connections too. No span of the lock's name is ever ahead of a wait, and the
holders are in other requests: the fix makes the long holders usual and the waits go."""

from __future__ import annotations

import heapq

import numpy as np

from tailscope.analysis.whatif.engine import evaluate
from tests.hand_frames import hand_frame

FINDING = {"pattern": "lock_contention", "confidence": 0.9, "span_name": "fetch", "evidence": {"stats": {}}}


def _frame(slow: bool):
    """One process, a pool of 2 connections. 3,000 searches ~5 ms apart: 0.5 ms, `fetch` (the wait
    for a connection, then a 1-3 ms `SELECT`), 1 ms. A report every ~150 ms: its `SELECT` takes
    1-3 ms, or 100-250 ms where `slow`."""
    rng = np.random.default_rng(9)
    events = [(float(t), 0) for t in np.cumsum(rng.exponential(5.0, 3000))]
    events += [(float(t), 1) for t in np.cumsum(rng.exponential(150.0, 100))]
    events.sort()
    free = [0.0, 0.0]
    rows = []
    for k, (t, kind) in enumerate(events):
        asked = t + 0.5
        got = max(asked, heapq.heappop(free))
        query = float(rng.uniform(100, 250)) if slow and kind == 1 else float(rng.uniform(1, 3))
        heapq.heappush(free, got + query)
        base = len(rows)
        end = got + query + 1.0
        if kind == 0:
            rows.append((k, -1, "POST /search", "Server", 0, t, end - t))
            rows.append((k, base, "fetch", "Internal", 0, asked, got + query - asked))
            rows.append((k, base + 1, "SELECT", "Client", 0, got, query))
        else:
            rows.append((k, -1, "GET /report", "Server", 0, t, end - t))
            rows.append((k, base, "SELECT", "Client", 0, got, query))
    return hand_frame(rows, instances=("a",))


def test_slow_holders_in_other_requests_made_usual_and_the_waits_go() -> None:
    healthy = evaluate(_frame(False), []).measured.p99_ms
    result = evaluate(_frame(True), [FINDING])
    fixed = {o.key.split(":")[0]: o.p99_ms for o in result.outcomes}
    assert result.measured.p99_ms > 20 * healthy
    assert fixed["no_lock_wait"] > 10 * healthy  # the reports' own queries stay
    assert abs(fixed["no_lock_wait_holders"] - healthy) < 0.15 * healthy, (fixed, healthy)


def test_no_long_holder_no_lever() -> None:
    fixed = {o.key.split(":")[0] for o in evaluate(_frame(False), [FINDING]).outcomes}
    assert "no_lock_wait_holders" not in fixed
