"""Each finding's share of the tail excess and the report's order: named causes by share, never more
than 100 % in all (tailscope/analysis/diagnosis/shares.py), on hand-made findings and on a run with
two planted causes; the Diagnosis page's share bar (app/views/diagnosis_shares.py)."""

from __future__ import annotations

import pytest

from app.views.diagnosis_shares import share_rows, shares_figure
from tailscope.analysis.diagnosis import diagnose
from tailscope.analysis.diagnosis.model import Finding
from tailscope.analysis.diagnosis.shares import apportion, rank
from tailscope.store.duckdb.store import DuckDBStore as Store


def finding(pattern: str, confidence: float, share: float | None, **stats) -> Finding:
    if share is not None:
        stats["tail_excess_share"] = share
    return Finding(pattern, confidence, None, None, {"summary": "", "stats": stats}, "")


def test_causes_are_ranked_by_their_share_not_their_confidence() -> None:
    found = [
        finding("gc_pause", 0.95, 0.2),
        finding("slow_dependency", 0.6, 0.7),
        finding("network", 0.3, 0.9),
    ]
    named = apportion(found)
    ordered = rank(found)
    assert [fd.pattern for fd in ordered] == ["slow_dependency", "gc_pause", "network"]
    assert named == pytest.approx(0.9)
    assert [fd.share for fd in ordered] == [0.7, 0.2, None]  # a possible cause (< 0.5) takes no share


def test_overlapping_causes_never_add_up_past_the_whole_tail() -> None:
    # a pause also queues the requests behind it: each mechanism alone measures most of the excess
    found = [finding("gc_pause", 0.9, 0.9), finding("queueing", 0.8, 0.6), finding("cold_start", 0.7, None)]
    assert apportion(found) == 1.0
    assert sum(fd.share for fd in found) == pytest.approx(1.0, abs=1e-3)
    assert found[0].share == pytest.approx(0.6, abs=1e-3) and found[1].share == pytest.approx(0.4, abs=1e-3)
    assert found[2].share == 0.0  # named, but measured no share of its own


def test_a_cause_part_of_another_follows_it_and_is_not_counted_twice() -> None:
    cache = finding("cache_miss", 0.8, 0.7, part_of="cold_start")
    found = [cache, finding("cold_start", 0.85, 0.4), finding("queueing", 0.7, 0.5)]
    assert apportion(found) == pytest.approx(0.9)
    assert [fd.pattern for fd in rank(found)] == ["queueing", "cold_start", "cache_miss"]
    assert cache.share is None


def test_a_part_is_listed_once_under_two_findings_of_its_parents_pattern() -> None:
    part = finding("compute_bound", 0.6, 0.8, part_of="large_payload")
    found = [finding("large_payload", 0.7, 0.1), finding("large_payload", 0.6, 0.05), part]
    apportion(found)
    assert [fd.pattern for fd in rank(found)] == ["large_payload", "compute_bound", "large_payload"]


def test_two_planted_causes_are_both_named_with_their_shares(tmp_path) -> None:
    simulate_api = pytest.importorskip("reference_pipeline.simulate.api")
    with Store(tmp_path / "two.duckdb").writer() as writer:
        conn = writer.cursor()
        for batch in simulate_api.simulate_columns("burst+slow-downstream", 3000, 1, load=0.5, workers=3):
            conn.register("two_batch", batch.to_arrow())
            conn.execute("INSERT INTO otel_traces SELECT *, 'two' FROM two_batch").fetchall()
            conn.unregister("two_batch")
    report = diagnose(Store(tmp_path / "two.duckdb"), "two").to_dict()
    named = [
        fd for fd in report["findings"] if fd["share"] is not None and fd["pattern"] != "unexplained_tail"
    ]
    assert {fd["pattern"] for fd in named} >= {"queueing", "slow_dependency"}, report["findings"]
    shares = [fd["share"] for fd in named]
    assert shares == sorted(shares, reverse=True) and min(shares) > 0.2
    assert sum(fd["share"] or 0.0 for fd in report["findings"]) <= 1.0 + 1e-9
    assert report["tail"]["named_share"] == pytest.approx(sum(shares), abs=1e-3)


def test_the_page_bar_adds_up_to_the_whole_tail() -> None:
    result = {
        "findings": [
            {"pattern": "slow_dependency", "span_name": "GET /profile", "share": 0.55},
            {"pattern": "gc_pause", "span_name": None, "share": 0.25},
            {"pattern": "network", "span_name": None, "share": None},
            {"pattern": "unexplained_tail", "span_name": "pg.select", "share": 0.12},
        ]
    }
    rows = share_rows(result)
    assert [r[0] for r in rows] == [
        "1. slow_dependency (GET /profile)",
        "2. gc_pause",
        "4. no mechanism (pg.select)",
        "not accounted for",
    ]
    assert sum(r[1] for r in rows) == pytest.approx(1.0)
    fig = shares_figure(rows)
    assert len(fig.data) == 4 and fig.layout.barmode == "stack"
    assert share_rows({"findings": [{"pattern": "network", "share": None}]}) == []
