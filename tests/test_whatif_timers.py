"""Fixed timer quanta (a resolver's 5 s timeout, the SYN retransmission timeout): the fix removes the
whole quanta from the calls that carry them, nothing else, and the jobs of a bounded pool that queued
behind the calls holding its slots meanwhile wait as the pool replayed without the quanta."""

from __future__ import annotations

import heapq

import numpy as np
import pytest

from tailscope.analysis.whatif.engine import evaluate
from tailscope.analysis.whatif.timer_levers import quantum_cuts, replay_pool
from tests.hand_frames import MS, hand_frame


def test_whole_quanta_are_cut_from_the_calls_that_carry_them() -> None:
    rng = np.random.default_rng(3)
    body = rng.lognormal(np.log(20), 0.25, 2000) * MS
    quanta = np.zeros(2000)
    quanta[rng.choice(2000, 60, replace=False)] = 5_000 * MS
    quanta[rng.choice(2000, 10, replace=False)] = 10_000 * MS
    syn = np.zeros(2000)
    syn[rng.choice(2000, 20, replace=False)] = 3_000 * MS  # 1 s then 2 s
    cut = quantum_cuts(body + quanta + syn)
    assert np.allclose(cut, quanta + syn)


def test_a_smooth_tail_carries_no_quantum() -> None:
    rng = np.random.default_rng(4)
    assert not quantum_cuts(rng.lognormal(np.log(200), 1.5, 3000) * MS).any()


def _pool_run(lost: float) -> list[tuple]:
    """400 requests, 40 ms apart: a provider call whose name lookup (`resolve`) runs on a two-slot pool
    (5 s more where a packet was lost), then `score`, whose `ort` job takes a slot of the same pool."""
    rng = np.random.default_rng(9)
    free = [0.0, 0.0]
    rows: list[tuple] = []
    for k in range(400):
        t = 40.0 * k
        root = len(rows)
        rows.append((k, -1, "POST /rank", "Server", 0, t, 0.0))
        dns = 1.5 + (5_000.0 if rng.random() < lost else 0.0)
        slot = heapq.heappop(free)
        begin = max(t + 0.1, slot)
        heapq.heappush(free, begin + dns)
        call = len(rows)
        end_call = begin + dns + 20.0
        rows.append((k, root, "POST", "Client", 0, t + 0.1, end_call - t - 0.1))
        rows.append((k, call, "resolve", "Internal", 0, begin, dns))
        slot = heapq.heappop(free)
        score_at = end_call + 0.1
        begin = max(score_at, slot)
        heapq.heappush(free, begin + 15.0)
        score = len(rows)
        rows.append((k, root, "score", "Internal", 0, score_at, begin + 15.0 - score_at))
        rows.append((k, score, "ort", "Internal", 0, begin, 15.0))
        rows[root] = (k, -1, "POST /rank", "Server", 0, t, begin + 15.1 - t)
    return rows


@pytest.mark.parametrize("pattern", ["network", "slow_dependency", "timeout_retry"])
def test_the_pool_jobs_queued_behind_the_quanta_no_longer_wait(pattern: str) -> None:
    """A call waiting out a resolver's timer is named a network fault, a slow dependency or a retried
    call: the quanta go whichever it is named."""
    finding = {"pattern": pattern, "confidence": 0.9, "span_name": "POST", "evidence": {"stats": {}}}
    faulty = evaluate(hand_frame(_pool_run(0.03)), [finding])
    healthy = evaluate(hand_frame(_pool_run(0.0)), [finding])
    fixed = [o for o in faulty.outcomes if o.key == "network_timers:POST"]
    assert fixed, [o.key for o in faulty.outcomes]
    assert faulty.measured.p99_ms > 5_000
    assert abs(fixed[0].p99_ms - healthy.measured.p99_ms) < 0.1 * healthy.measured.p99_ms, (
        fixed[0].p99_ms, healthy.measured.p99_ms)
    assert not [o for o in healthy.outcomes if o.key.startswith("network_timers")]


def test_the_pool_replay_is_first_come_first_served() -> None:
    wait = replay_pool(np.array([0.0, 1.0, 2.0, 3.0]), np.array([10.0, 10.0, 10.0, 10.0]), 2)
    assert wait.tolist() == [0.0, 0.0, 8.0, 8.0]


def _nagle_run(delay_ms: float) -> list[tuple]:
    """300 requests: a provider call, one in five on a new connection (a `connect` child, 12 ms, then
    the exchange), the others on a reused one (the exchange alone, `delay_ms` more: Nagle against the
    peer's delayed ACK)."""
    rng = np.random.default_rng(5)
    rows: list[tuple] = []
    for k in range(300):
        t = 100.0 * k
        exchange = float(rng.lognormal(np.log(20), 0.2))
        new = k % 5 == 0
        call = exchange + (12.0 if new else delay_ms + float(rng.uniform(0, 4)) * (delay_ms > 0))
        root = len(rows)
        rows.append((k, -1, "GET /embed", "Server", 0, t, call + 1.0))
        rows.append((k, root, "POST", "Client", 0, t + 0.5, call))
        if new:
            rows.append((k, root + 1, "connect", "Internal", 0, t + 0.5, 12.0))
    return rows


def test_a_reused_connection_one_delayed_ack_slower_than_a_new_one_loses_it() -> None:
    finding = {"pattern": "network", "confidence": 0.9, "span_name": "POST", "evidence": {"stats": {}}}
    faulty = evaluate(hand_frame(_nagle_run(40.0)), [finding])
    healthy = evaluate(hand_frame(_nagle_run(0.0)), [finding])
    fixed = [o for o in faulty.outcomes if o.key == "network_timers:POST"]
    assert fixed, [o.key for o in faulty.outcomes]
    assert faulty.measured.p50_ms > 55
    assert abs(fixed[0].p50_ms - healthy.measured.p50_ms) < 0.1 * healthy.measured.p50_ms
    assert abs(fixed[0].p99_ms - healthy.measured.p99_ms) < 0.1 * healthy.measured.p99_ms
    assert not [o for o in healthy.outcomes if o.key.startswith("network_timers")]
