"""The untouched blind family (kafka-scorer, reference_pipeline/simulate/kafka_scorer.py): it generates,
loads through the real loader, and its planted mechanisms are in its spans. Kept apart from
test_simulate_blind.py: whoever works on the diagnosis is not to read this family."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from tests.test_simulate_blind import MS, by_name, children, instance, load, p


def test_producer_spans_end_after_the_response_and_lag_grows_in_bursts(tmp_path: Path) -> None:
    spans, summary = load(tmp_path, "kafka-scorer", "consumer-lag", 700, 1)  # Jaeger
    assert summary["format"] == "jaeger" and summary["truth"][0]["pattern"] == "queueing"
    kids = children(spans)
    roots = by_name(spans, "POST /v1/transactions")
    lags = []
    for root in roots:
        (producer,) = [s for s in kids[root["id"]] if s["kind"] == "Producer"]
        assert producer["end"] > root["end"]  # fire and forget: acknowledged after the 202
        (consumer,) = kids[producer["id"]]
        assert consumer["kind"] == "Consumer" and consumer["start"] > producer["start"]
        lags.append(consumer["start"] - producer["end"])
    assert p(lags, 25) < 2 * MS < 50 * MS < p(lags, 90)


def test_throttled_scorers_restart_on_period_boundaries(tmp_path: Path) -> None:
    spans, _ = load(tmp_path, "kafka-scorer", "cpu-throttling", 700, 2)
    predict = by_name(spans, "xgboost.predict")
    for pod in {instance(s) for s in predict}:
        mine = [s for s in predict if instance(s) == pod]
        stalled = [s["end"] % 100_000_000 for s in mine if s["duration"] > 8 * MS]
        assert len(stalled) > 5
        # a stalled predict resumes at its pod's boundary and ends a CPU-slice later: ends bunch up
        bins = np.bincount(np.asarray(stalled) // 5_000_000, minlength=20)
        assert bins.max() / len(stalled) > 0.3
