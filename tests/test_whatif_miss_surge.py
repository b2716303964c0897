"""Cache misses that surged mid-run (a new writer fills Redis to maxmemory: keys evicted): the fix
brings the miss rate back to what it was before the surge, not to none; the misses kept take the
time misses took before the surge (the surge's misses queue behind each other on the miss path)."""

from __future__ import annotations

import numpy as np

from tailscope.analysis.whatif.engine import evaluate
from tests.hand_frames import hand_frame


def _rows(surge: bool) -> list[tuple]:
    """1,000 requests 20 ms apart, each a lookup (1 ms hit, 20 ms miss) then 2 ms of work; 5 % misses,
    from the 300th request 50 % whose misses take 35 ms."""
    rng = np.random.default_rng(11)
    rows: list[tuple] = []
    for k in range(1000):
        late = surge and k >= 300
        miss = rng.random() < (0.5 if late else 0.05)
        took = (35.0 if late else 20.0) if miss else 1.0
        root = len(rows)
        rows.append((k, -1, "GET /similar", "Server", 0, 20.0 * k, took + 2.1))
        rows.append((k, root, "cache.get", "Client", 0, 20.0 * k + 0.05, took))
        rows.append((k, root, "work", "Internal", 0, 20.0 * k + 0.05 + took, 2.0))
    return rows


def test_misses_that_surged_come_back_to_the_rate_before_the_surge() -> None:
    finding = {"pattern": "cache_miss", "confidence": 0.9, "span_name": "cache.get",
               "evidence": {"stats": {"early_miss_rate": 0.05, "late_miss_rate": 0.5},
                            "chart": {"threshold_ms": 5.0}}}
    result = evaluate(hand_frame(_rows(True)), [finding])
    healthy = evaluate(hand_frame(_rows(False)), []).measured.p99_ms
    hits = [o.p99_ms for o in result.outcomes if o.key == "cache_hits:cache.get"]
    assert hits and result.measured.p99_ms > 35
    assert abs(hits[0] - healthy) < 0.1 * healthy, (hits, healthy)  # not the 3 ms of no miss at all


def _flush_rows(flush: bool, after: float = 0.75) -> list[tuple]:
    """1,000 requests 20 ms apart, each a lookup (about 1 ms a hit, 30 ms a miss) then 2 ms of work; half
    the lookups miss, and from the 250th on (a deploy flushed the cache) `after` of them."""
    rng = np.random.default_rng(5)
    rows: list[tuple] = []
    for k in range(1000):
        miss = rng.random() < (after if flush and k >= 250 else 0.5)
        took = (30.0 if miss else 1.0) * float(rng.uniform(0.8, 1.2))
        root = len(rows)
        rows.append((k, -1, "GET /answer", "Server", 0, 20.0 * k, took + 2.1))
        rows.append((k, root, "lookup", "Client", 0, 20.0 * k + 0.05, took))
        rows.append((k, root, "work", "Internal", 0, 20.0 * k + 0.05 + took, 2.0))
    return rows


def test_a_flush_read_from_the_lookups_when_the_finding_gives_no_rates() -> None:
    # a finding given by hand (or from the truth): no early and late miss rates; a flush raises the
    # miss rate by half, not twofold: the fix is the rate before it (half the lookups still miss)
    finding = {"pattern": "cache_miss", "confidence": 0.9, "span_name": "lookup",
               "evidence": {"stats": {}, "chart": {"threshold_ms": 5.0}}}
    result = evaluate(hand_frame(_flush_rows(True)), [finding])
    healthy = evaluate(hand_frame(_flush_rows(False)), [])
    fixed = next(o for o in result.outcomes if o.key == "cache_hits:lookup")
    # half the requests still miss: their p95 is a miss's (about 3 ms where every miss was a hit)
    assert abs(fixed.p95_ms - healthy.measured.p95_ms) < 0.2 * healthy.measured.p95_ms, (
        fixed.p95_ms, healthy.measured.p95_ms)


def test_a_flush_that_leaves_most_lookups_missing_has_its_hits_and_misses_read() -> None:
    # no threshold given and three in four lookups missing: still a hit mode and a miss mode
    finding = {"pattern": "cache_miss", "confidence": 0.9, "span_name": "lookup", "evidence": {"stats": {}}}
    result = evaluate(hand_frame(_flush_rows(True, 0.85)), [finding])
    healthy = evaluate(hand_frame(_flush_rows(False)), [])
    fixed = next(o for o in result.outcomes if o.key == "cache_hits:lookup")
    assert abs(fixed.p95_ms - healthy.measured.p95_ms) < 0.2 * healthy.measured.p95_ms, (
        fixed.p95_ms, healthy.measured.p95_ms)
