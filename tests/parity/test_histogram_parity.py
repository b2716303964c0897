"""Per-run pre-aggregates (issue 29) on both engines: DuckDB keeps them at derive time, ClickHouse
computes the same buckets from its requests as it reads them; the views of a whole run read from
them (histogram.MIN_REQUESTS set to 0 so the small parity runs take that path) give the same
answers: counts exact, percentiles, band means, compare's bootstrap and tail vs body within 1e-9.

The traces and the two stores are this folder's conftest.py fixtures (one load for the folder)."""

from __future__ import annotations

import pytest
from parity_traces import SIMULATED

from tailscope.analysis import compare, histogram, overview, slowest_traces, tail_vs_body, waterfall
from tailscope.analysis.types import Filter
from tailscope.analysis.views import NO_FLOOR_NS, slowest_floor_ns
from tailscope.store.clickhouse.engine import ClickHouseStore
from tailscope.store.duckdb.store import DuckDBStore as Store

pytest.importorskip(
    "chdb", reason="chdb not installed (the [clickhouse] extra): no ClickHouse engine to compare"
)

Stores = tuple[Store, ClickHouseStore]
RUNS = ["hand", *SIMULATED]


@pytest.fixture(autouse=True)
def from_histogram(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(histogram, "MIN_REQUESTS", 0)


@pytest.mark.parametrize("run", RUNS)
def test_both_engines_have_the_same_histograms(stores: Stores, run: str) -> None:
    duck, clickhouse = stores
    with duck.reading() as d, clickhouse.reading() as c:
        expected, got = d.histograms(run), c.histograms(run)
    assert expected is not None and got is not None
    assert got[2] == expected[2] > 0
    for g_rows, e_rows in zip(got[:2], expected[:2], strict=True):
        assert len(g_rows) == len(e_rows) > 0
        for g, e in zip(g_rows, e_rows, strict=True):
            assert [v for v in g if isinstance(v, str)] == [v for v in e if isinstance(v, str)]
            numbers = [float(v) for v in e if not isinstance(v, str)]
            assert [float(v) for v in g if not isinstance(v, str)] == pytest.approx(numbers, rel=1e-12)


def test_overview_from_the_histograms_is_the_same(stores: Stores) -> None:
    duck, clickhouse = stores
    expected, got = overview(duck, Filter()), overview(clickhouse, Filter())
    assert [r.run for r in got.runs] == [r.run for r in expected.runs]
    for g, e in zip(got.runs, expected.runs, strict=True):
        assert (g.requests, g.errors, g.services, g.tail_stage) == (
            e.requests,
            e.errors,
            e.services,
            e.tail_stage,
        )
        names = ("p50_ms", "p95_ms", "p99_ms", "p999_ms", "throughput_rps", "tail_stage_share")
        for name in names:
            g_value, e_value = getattr(g, name), getattr(e, name)
            assert (g_value is None) == (e_value is None)
            assert e_value is None or g_value == pytest.approx(e_value, rel=1e-9)


@pytest.mark.parametrize("band", ["p50", "p90", "p99"])
@pytest.mark.parametrize("run", ["hand", "steady", "lock"])
def test_waterfall_from_the_histograms_is_the_same(stores: Stores, run: str, band: str) -> None:
    duck, clickhouse = stores
    expected, got = waterfall(duck, Filter(run=run), band), waterfall(clickhouse, Filter(run=run), band)
    assert (got.requests_total, got.requests_in_band, got.reason) == (
        expected.requests_total,
        expected.requests_in_band,
        expected.reason,
    )
    assert [got.band_low_ms, got.band_high_ms, got.band_mean_ms] == pytest.approx(
        [expected.band_low_ms, expected.band_high_ms, expected.band_mean_ms], rel=1e-9
    )
    for g, e in zip(got.stages, expected.stages, strict=True):
        assert [g.mean_ms, g.p50_ms, g.p99_ms, g.p999_ms] == pytest.approx(
            [e.mean_ms, e.p50_ms, e.p99_ms, e.p999_ms], rel=1e-9, abs=1e-12
        )


def test_compare_from_the_histograms_is_the_same(stores: Stores) -> None:
    duck, clickhouse = stores
    expected, got = compare(duck, "steady", "lock"), compare(clickhouse, "steady", "lock")
    assert (got.a.requests, got.b.requests) == (expected.a.requests, expected.b.requests)
    for g, e in zip(got.stages, expected.stages, strict=True):
        assert [g.a_ms, g.b_ms, g.delta_low_ms, g.delta_high_ms] == pytest.approx(
            [e.a_ms, e.b_ms, e.delta_low_ms, e.delta_high_ms], rel=1e-9, abs=1e-12
        )


@pytest.mark.parametrize("run", ["hand", "lock", "alt-slow"])
def test_tail_vs_body_stages_from_the_histograms_are_the_same(stores: Stores, run: str) -> None:
    duck, clickhouse = stores
    expected = tail_vs_body(duck, Filter(run=run), tail_quantile=0.9)
    got = tail_vs_body(clickhouse, Filter(run=run), tail_quantile=0.9)
    assert (got.selected_requests, got.rest_requests) == (expected.selected_requests, expected.rest_requests)
    assert list(got.stages["stage"]) == list(expected.stages["stage"])
    for column in expected.stages.columns[1:]:
        assert got.stages[column].tolist() == pytest.approx(
            expected.stages[column].tolist(), rel=1e-9, abs=1e-9
        )


@pytest.mark.parametrize("flt", [Filter(run="lock"), Filter()], ids=["run", "all"])
def test_slowest_traces_above_the_histograms_floor_are_the_same(
    stores: Stores, flt: Filter, monkeypatch: pytest.MonkeyPatch
) -> None:
    duck, clickhouse = stores
    columns = ["run", "trace_id", "root_span_id", "duration_ms", "route", "dominant_stage", "spans"]
    with duck.reading() as d, clickhouse.reading() as c:
        assert slowest_floor_ns(d, flt, 20) == slowest_floor_ns(c, flt, 20) > NO_FLOOR_NS
        got = slowest_traces(c, flt, 20)[columns]
        expected = slowest_traces(d, flt, 20)[columns]
    monkeypatch.setattr(histogram, "MIN_REQUESTS", 10**12)  # the exact read, without a floor
    with duck.reading() as d:
        exact = slowest_traces(d, flt, 20)[columns]
    for frame in (got, expected):
        assert frame["trace_id"].tolist() == exact["trace_id"].tolist()
        assert frame["duration_ms"].tolist() == pytest.approx(exact["duration_ms"].tolist(), rel=1e-12)
