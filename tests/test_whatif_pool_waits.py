"""A pool held by slow queries: the waits for a connection (gaps before the call spans, which start once
a connection is had) come from the holders' durations, so a fix that makes the queries fast again
removes the waits too (whatif/pool_waits.py); and a dependency slow for most of the run still has its
calm stretch to draw from (dependency_as_calm)."""

from __future__ import annotations

import heapq

import numpy as np

from tailscope.analysis.whatif.engine import evaluate
from tailscope.analysis.whatif.pool_waits import pool_size
from tailscope.analysis.whatif.replay import fifo_starts
from tests.hand_frames import hand_frame

PRE, AFTER, RELEASE = 0.5, 1.0, 0.1  # ms: code before the query, after it; the connection's release


def _run(slow_from: float, handed: bool = True, pool: int = 2, bursts: int = 300) -> list[tuple]:
    """Bursts of 3 requests every 20 ms on one instance; each runs PRE ms of code, takes one of `pool`
    connections (its query span starts once it has one), queries (1 ms; 12 ms from `slow_from` of the
    run on: the plan flipped) and runs AFTER ms more. `handed` False: the waits are not a pool's (each
    third request of a burst computes as long as it would have waited, no connection is short)."""
    rows: list[tuple] = []
    free = [0.0] * pool
    trace = 0
    for b in range(bursts):
        t = 20.0 * b
        query = 12.0 if b >= slow_from * bursts else 1.0
        for k in range(3):
            ready = t + 0.01 * k + PRE
            if handed:
                got = max(ready, heapq.heappop(free))
                heapq.heappush(free, got + query + RELEASE)
            else:
                got = ready + (query + RELEASE if k == 2 else 0.0)
            root, at = len(rows), t + 0.01 * k
            rows.append((trace, -1, "GET /search", "Server", 0, at, got - at + query + AFTER))
            rows.append((trace, root, "SELECT purchases", "Client", 0, got, query))
            trace += 1
    return rows


def _lever(rows: list[tuple], key: str) -> tuple[float, float]:
    finding = {"pattern": "slow_dependency", "confidence": 0.9, "span_name": "SELECT purchases",
               "evidence": {"stats": {}}}
    result = evaluate(hand_frame(rows), [finding])
    hits = [o.p99_ms for o in result.outcomes if o.key == f"{key}:SELECT purchases"]
    assert hits, [o.key for o in result.outcomes]
    return result.measured.p99_ms, hits[0]


def test_the_waits_for_a_connection_go_with_the_slow_holders() -> None:
    before, after = _lever(_run(slow_from=0.4), "dependency_as_calm")
    assert before > 25  # a 12 ms query and a 12 ms wait
    # the queries at their calm time, and the third of a burst no longer waits 12 ms for a connection
    assert after < 4.5, after


def test_a_wait_that_is_no_pools_stays() -> None:
    before, after = _lever(_run(slow_from=0.4, handed=False), "dependency_as_calm")
    assert before > 25
    assert after > 13, after  # the computing before the call is its own


def test_a_dependency_slow_for_most_of_the_run_is_drawn_from_its_calm_stretch() -> None:
    before, after = _lever(_run(slow_from=0.2), "dependency_as_calm")
    assert before > 25
    assert after < 4.5, after


def test_pool_size_is_read_from_the_hand_overs() -> None:
    rows = _run(slow_from=0.0, pool=3, bursts=200)
    calls = [r for r in rows if r[2] == "SELECT purchases"]
    roots = [r for r in rows if r[1] == -1]
    start = np.array([c[5] for c in calls]) * 1e6
    end = start + np.array([c[6] for c in calls]) * 1e6
    waited = start - np.array([r[5] for r in roots]) * 1e6 > PRE * 1e6 + 1e6
    # three at once never wait on three connections: no pool seen
    assert pool_size(start, end, waited) is None
    rows = _run(slow_from=0.0, pool=2, bursts=200)
    calls = [r for r in rows if r[2] == "SELECT purchases"]
    start = np.array([c[5] for c in calls]) * 1e6
    end = start + np.array([c[6] for c in calls]) * 1e6
    waited = start - np.array([r[5] for r in rows if r[1] == -1]) * 1e6 > PRE * 1e6 + 1e6
    n, delay = pool_size(start, end, waited)
    assert n == 2
    assert abs(delay - RELEASE * 1e6) < 1e4


def test_replay_through_n_connections() -> None:
    got = fifo_starts(np.array([0.0, 0.0, 0.0, 5.0]), np.array([10.0, 10.0, 10.0, 1.0]), 2)
    assert got.tolist() == [0.0, 0.0, 10.0, 10.0]
