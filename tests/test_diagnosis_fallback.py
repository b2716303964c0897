"""cache_miss recognised as a conditional fallback path (a read-through cache going to its store on a
miss), told apart from retries, calls that do not make the tail, and cheap optional steps; a steady
miss rate told apart from misses clustered in time. Hand-built frames of a shape the simulator does
not make: names that say nothing about caching."""

from __future__ import annotations

import numpy as np
import pytest
from hand_frames import hand_frame
from test_diagnosis_unexplained import read_through_cache

from tailscope.analysis.diagnosis import diagnose_frame


def summary(result) -> list[tuple]:
    return [(f.pattern, f.span_name, round(f.confidence, 2)) for f in result.findings]


@pytest.mark.parametrize(("miss_rate", "seed"), [(0.1, 11), (0.28, 3), (0.45, 11)])
def test_a_fallback_after_a_fast_lookup_is_a_cache_miss_and_nothing_else_is(
    miss_rate: float, seed: int
) -> None:
    result = diagnose_frame(hand_frame(read_through_cache(miss_rate=miss_rate, seed=seed)))
    top = result.findings[0]
    assert (top.pattern, top.span_name) == ("cache_miss", "pg.select_profile"), summary(result)
    assert top.confidence >= 0.8
    stats = top.evidence["stats"]
    assert stats["lookup_span"] == "kv.get"
    assert abs(stats["miss_rate"] - miss_rate) < 0.08
    assert stats["pattern"] == "steady" and "larger cache" in top.advice
    # the uniform scorer and the lookup are not causes (they were reported at 0.33-0.51 before)
    assert not [f for f in result.findings if f.span_name != "pg.select_profile" and f.confidence >= 0.2], (
        summary(result)
    )


def expiry_storms(requests: int = 1200, seed: int = 5) -> list[tuple]:
    """The same service, but keys expire together: misses in a short window every 400 requests."""
    rng = np.random.default_rng(seed)
    rows: list[tuple] = []
    for t in range(requests):
        start = t * 100.0
        storm = 100 <= t % 400 < 125
        miss = rng.random() < (0.9 if storm else 0.01)
        lookup = 0.8 + rng.random() * 0.4
        fallback = 38.0 * rng.lognormal(0, 0.1) if miss else 0.0
        infer = 6.0 + rng.random()
        root = len(rows)
        rows.append((t, -1, "GET /v2/score", "Server", t % 2, start, 0.3 + lookup + fallback + infer + 0.4))
        rows.append((t, root, "kv.get", "Client", t % 2, start + 0.3, lookup))
        if miss:
            rows.append((t, root, "pg.select_profile", "Client", t % 2, start + 0.3 + lookup, fallback))
        rows.append((t, root, "scorer.run", "Internal", t % 2, start + 0.3 + lookup + fallback, infer))
    return rows


def test_misses_clustered_in_time_are_told_apart_from_a_steady_rate() -> None:
    result = diagnose_frame(hand_frame(expiry_storms()))
    top = result.findings[0]
    assert (top.pattern, top.span_name) == ("cache_miss", "pg.select_profile"), summary(result)
    assert top.evidence["stats"]["pattern"] == "clustered_in_time"
    assert top.evidence["stats"]["miss_dispersion"] > 4
    assert "jitter to TTLs" in top.advice
    chart = top.evidence["chart"]
    assert chart["kind"] == "miss_rate_over_time" and max(chart["miss_rate"]) > 0.5


def variant(kind: str, requests: int = 400, seed: int = 2) -> list[tuple]:
    """Conditional calls that are not a cache's fallback."""
    rng = np.random.default_rng(seed)
    rows: list[tuple] = []
    for t in range(requests):
        start = t * 100.0
        extra = rng.random() < 0.25
        first = 0.8 + rng.random() * 0.4
        root = len(rows)
        children = [("kv.get", first)]
        if kind == "retry" and extra:  # the same call again after a failure: a retry
            children.append(("kv.get", 38.0 * rng.lognormal(0, 0.1)))
        if kind == "cheap" and extra:  # an optional step no slower than the lookup
            children.append(("audit.write", 1.0))
        if kind == "not_in_tail":  # present in a quarter of requests, fast or slow alike
            children.append(("enrich.call", 5.0) if extra else ("noop", 0.01))
        infer = 6.0 + (60.0 if rng.random() < 0.05 else 0.0) + rng.random()
        children.append(("scorer.run", infer))
        clock = start + 0.3
        spans = []
        for name, dur in children:
            spans.append((t, root, name, "Client" if name != "scorer.run" else "Internal", t % 2, clock, dur))
            clock += dur
        rows.append((t, -1, "GET /v2/score", "Server", t % 2, start, clock - start + 0.4))
        rows.extend(spans)
    return rows


@pytest.mark.parametrize("kind", ["retry", "cheap", "not_in_tail"])
def test_conditional_calls_that_are_not_a_fallback_are_not_taken_for_one(kind: str) -> None:
    result = diagnose_frame(hand_frame(variant(kind)))
    fallbacks = [f for f in result.findings if "fallback_span" in f.evidence.get("stats", {})]
    assert not fallbacks, summary(result)


def test_the_miss_rate_chart_is_drawn_by_the_page() -> None:
    pytest.importorskip("plotly")
    from app.views.diagnosis import evidence_figure

    result = diagnose_frame(hand_frame(read_through_cache()))
    assert evidence_figure(result.findings[0].evidence["chart"]).data
