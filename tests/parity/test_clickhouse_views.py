"""The dashboard's other views on both engines: heatmap, request lists (slowest traces, a heatmap
rectangle), tail vs body, latency over time, the trace Gantt, LLM latency and the stage mapping give
the same answers from DuckDB and from chdb (counts exact, percentiles identical, shares within 1e-9).

The traces and the two stores are this folder's conftest.py fixtures (one load for the folder)."""

from __future__ import annotations

import math
from datetime import timedelta
from typing import Any

import pandas as pd
import pytest
from parity_traces import SIMULATED

from tailscope.analysis import tail_vs_body, trace_gantt, views
from tailscope.analysis.types import Filter, Rect
from tailscope.store.clickhouse.engine import ClickHouseStore
from tailscope.store.duckdb.store import DuckDBStore as Store

pytest.importorskip(
    "chdb", reason="chdb not installed (the [clickhouse] extra): no ClickHouse engine to compare"
)

Stores = tuple[Store, ClickHouseStore]
RUNS = ["hand", *SIMULATED]


def _same_frame(got: pd.DataFrame, expected: pd.DataFrame) -> None:
    """Same columns, same rows in the same order; floats equal (NaN equal to NaN), times to the µs."""
    assert list(got.columns) == list(expected.columns)
    assert len(got) == len(expected)
    for g_row, e_row in zip(got.itertuples(index=False), expected.itertuples(index=False), strict=True):
        for g, e in zip(g_row, e_row, strict=True):
            if isinstance(e, float) and math.isnan(e):
                assert g is None or (isinstance(g, float) and math.isnan(g))
            elif isinstance(e, pd.Timestamp) or hasattr(e, "year"):
                assert pd.Timestamp(g) == pd.Timestamp(e).floor("us")  # Python datetimes: µs
            else:
                assert g == e


HEATMAP = "tests/parity/test_clickhouse_views.py::test_heatmap_is_the_same"


def _heatmap_case(run: str, stage: str | None) -> Any:
    """Every stage on the hand-built run and the whole request on each simulated run; the simulated
    runs' per-stage heatmaps in the full tier (./test.sh --full): the same statements on another
    stage's spans, checked on the hand-built run."""
    if run == "hand" or stage is None:
        return (run, stage)
    covers = (f"{HEATMAP}[{run}-None]", f"{HEATMAP}[hand-{stage}]")
    return pytest.param(run, stage, marks=pytest.mark.full(covered_by=covers))


@pytest.mark.parametrize(
    ("run", "stage"),
    [_heatmap_case(run, stage) for run in RUNS for stage in [None, "model_forward", "feature_hydration"]],
)
def test_heatmap_is_the_same(stores: Stores, run: str, stage: str | None) -> None:
    duck, clickhouse = stores
    expected = views.heatmap(duck, Filter(run=run), stage=stage, time_bins=12, bins_per_decade=8)
    got = views.heatmap(clickhouse, Filter(run=run), stage=stage, time_bins=12, bins_per_decade=8)
    assert expected.reason is None and len(expected.cells) > 0
    assert got.reason is None
    assert got.time_bin_seconds == expected.time_bin_seconds
    _same_frame(got.cells, expected.cells)  # counts exact
    _same_frame(got.lines, expected.lines)  # p50 / p99 per time bin identical


def test_heatmap_of_nothing_gives_the_same_reason(stores: Stores) -> None:
    duck, clickhouse = stores
    for flt in (Filter(run="nope"), Filter(run="steady", service="no-such-service")):
        got, expected = views.heatmap(clickhouse, flt), views.heatmap(duck, flt)
        assert got.reason == expected.reason is not None
        assert got.cells.empty and got.lines.empty


@pytest.mark.parametrize("run", RUNS)
def test_slowest_traces_are_the_same(stores: Stores, run: str) -> None:
    duck, clickhouse = stores
    expected = views.slowest_traces(duck, Filter(run=run), limit=40)
    got = views.slowest_traces(clickhouse, Filter(run=run), limit=40)
    assert len(expected) == 40
    _same_frame(got, expected)


@pytest.mark.parametrize("stage", [None, "model_forward"])
@pytest.mark.parametrize("run", ["steady", "burst", "lock"])
def test_heatmap_rectangle_selects_the_same_requests(stores: Stores, run: str, stage: str | None) -> None:
    duck, clickhouse = stores
    hm = views.heatmap(duck, Filter(run=run), stage=stage, time_bins=6, bins_per_decade=4)
    cells = hm.cells.sort_values("count", ascending=False, ignore_index=True)
    cell = cells.iloc[0]
    width = timedelta(seconds=hm.time_bin_seconds)
    rect = Rect(cell.time, cell.time + 2 * width, float(cell.latency_low_ms), float(cell.latency_high_ms))
    expected = views.select_requests(duck, Filter(run=run), rect, stage=stage, limit=1000)
    got = views.select_requests(clickhouse, Filter(run=run), rect, stage=stage, limit=1000)
    assert 0 < len(expected) < views.overview(duck, Filter(run=run)).runs[0].requests
    _same_frame(got, expected)


@pytest.mark.parametrize("run", [None, "frameworks", "steady"])
def test_llm_latency_is_the_same(stores: Stores, run: str | None) -> None:
    from tailscope.analysis import llm_latency

    duck, clickhouse = stores
    expected = llm_latency(duck, Filter(run=run))
    got = llm_latency(clickhouse, Filter(run=run))
    if run != "steady":  # the vLLM requests of the frameworks run report TTFT and tokens
        assert "time to first token (ms)" in set(expected["metric"])
    _same_frame(got, expected)


@pytest.mark.parametrize("run", ["hand", "frameworks", "gateway", None])
def test_stage_mapping_is_the_same(stores: Stores, run: str | None) -> None:
    # a sample larger than any run: every trace on both engines (their sample hashes differ)
    from tailscope.analysis import stage_mapping

    duck, clickhouse = stores
    expected = stage_mapping(duck, run, sample_traces=100_000)
    got = stage_mapping(clickhouse, run, sample_traces=100_000)
    assert len(expected) > 0
    _same_frame(got, expected)


def _sorted(frame: pd.DataFrame) -> pd.DataFrame:
    return frame.sort_values(list(frame.columns[:4]), ignore_index=True)


@pytest.mark.parametrize("max_values", [30, 5])
@pytest.mark.parametrize("run", ["hand", "frameworks", "lock", "alt-slow"])
def test_tail_vs_body_is_the_same(stores: Stores, run: str, max_values: int) -> None:
    # a sample and a limit that cover every request and value: the two engines' samples (by hash)
    # are then the same set; at 5 values per key the batch sizes and queue depths are binned
    duck, clickhouse = stores
    kwargs: dict = {
        "tail_quantile": 0.9,
        "sample": 100_000,
        "limit": 100_000,
        "max_values_per_key": max_values,
    }
    expected = tail_vs_body(duck, Filter(run=run), **kwargs)
    got = tail_vs_body(clickhouse, Filter(run=run), **kwargs)
    assert expected.reason is None and len(expected.attributes) > 0
    assert (got.reason, got.selection) == (expected.reason, expected.selection)
    assert (got.selected_requests, got.rest_requests) == (expected.selected_requests, expected.rest_requests)
    assert list(got.stages["stage"]) == list(expected.stages["stage"])
    for column in expected.stages.columns[1:]:
        assert got.stages[column].tolist() == pytest.approx(
            expected.stages[column].tolist(), rel=1e-12, abs=1e-9
        )
    g, e = _sorted(got.attributes), _sorted(expected.attributes)
    if max_values == 5 and run in ("lock", "alt-slow"):
        assert e["value"].str.startswith("≥ ").any()  # binned numbers
    assert g[list(g.columns[:4])].values.tolist() == e[list(e.columns[:4])].values.tolist()
    for column in ("selected_pct", "rest_pct", "difference_pct"):
        assert g[column].tolist() == pytest.approx(e[column].tolist(), abs=1e-9)


@pytest.mark.parametrize("run", ["lock", "burst"])
def test_tail_vs_body_of_a_large_selection_samples_the_same_blocks(
    stores: Stores, run: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # DuckDB takes a large selection's sample in blocks (tail_sample.py, lowered here to every run):
    # ClickHouse draws the same blocks (tail_sample_cte.sql), so a sample that covers neither side
    # (16 of each, a multiple of 8) gives the same attribute rows on both engines
    from tailscope.store.duckdb import tail_sample

    monkeypatch.setattr(tail_sample, "MIN_REQUESTS", 0)
    duck, clickhouse = stores
    kwargs: dict = {"tail_quantile": 0.9, "sample": 16, "limit": 100_000}
    expected = tail_vs_body(duck, Filter(run=run), **kwargs)
    got = tail_vs_body(clickhouse, Filter(run=run), **kwargs)
    assert expected.selected_requests > 16 and expected.rest_requests > 16
    g, e = _sorted(got.attributes), _sorted(expected.attributes)
    assert len(e) > 0
    assert g[list(g.columns[:4])].values.tolist() == e[list(e.columns[:4])].values.tolist()
    for column in ("selected_pct", "rest_pct"):
        assert g[column].tolist() == pytest.approx(e[column].tolist(), abs=1e-9)


@pytest.mark.parametrize("stage", [None, "model_forward"])
def test_tail_vs_body_of_a_rectangle_is_the_same(stores: Stores, stage: str | None) -> None:
    duck, clickhouse = stores
    hm = views.heatmap(duck, Filter(run="burst"), stage=stage, time_bins=4, bins_per_decade=3)
    cell = hm.cells.sort_values("count", ascending=False, ignore_index=True).iloc[0]
    rect = Rect(
        cell.time, cell.time + timedelta(seconds=hm.time_bin_seconds), 0.0, float(cell.latency_high_ms)
    )
    kwargs: dict = {"rect": rect, "stage": stage, "sample": 100_000, "limit": 100_000}
    expected = tail_vs_body(duck, Filter(run="burst"), **kwargs)
    got = tail_vs_body(clickhouse, Filter(run="burst"), **kwargs)
    assert expected.selected_requests > 0 and expected.rest_requests > 0
    assert (got.selected_requests, got.rest_requests) == (expected.selected_requests, expected.rest_requests)
    g, e = _sorted(got.attributes), _sorted(expected.attributes)
    assert g[list(g.columns[:4])].values.tolist() == e[list(e.columns[:4])].values.tolist()
    assert g["difference_pct"].tolist() == pytest.approx(e["difference_pct"].tolist(), abs=1e-9)


@pytest.mark.parametrize("run", ["hand", "frameworks", "steady", "gateway", "alt-slow"])
def test_trace_gantt_is_the_same(stores: Stores, run: str) -> None:
    # the slowest trace and a middling one of each run, span for span (rows sorted by span id)
    duck, clickhouse = stores
    traces = views.slowest_traces(duck, Filter(run=run), limit=1000)
    for trace_id in (traces["trace_id"].iloc[0], traces["trace_id"].iloc[len(traces) // 2]):
        expected = trace_gantt(duck, trace_id, run=run)
        got = trace_gantt(clickhouse, trace_id, run=run)
        assert expected.reason is None and len(expected.spans) > 1
        assert (got.reason, got.root_span_id, got.duration_ms, got.client_duration_ms) == (
            expected.reason,
            expected.root_span_id,
            expected.duration_ms,
            expected.client_duration_ms,
        )
        key = ["span_id", "name"]
        _same_frame(
            got.spans.sort_values(key, ignore_index=True), expected.spans.sort_values(key, ignore_index=True)
        )
    assert trace_gantt(clickhouse, traces["trace_id"].iloc[0]).run == run  # the run found from the trace
    assert trace_gantt(clickhouse, "0" * 32, run=run).reason == trace_gantt(duck, "0" * 32, run=run).reason


@pytest.mark.parametrize("band", ["p90", "p99"])
@pytest.mark.parametrize("run", ["hand", "frameworks", "lock", "gateway"])
def test_stage_breakdown_is_the_same(stores: Stores, run: str, band: str) -> None:
    # a sample that covers both groups: the two engines' samples (by hash) are then the same
    from tailscope.analysis import stage_breakdown

    duck, clickhouse = stores
    expected = stage_breakdown(duck, Filter(run=run), band=band, sample=100_000)
    got = stage_breakdown(clickhouse, Filter(run=run), band=band, sample=100_000)
    assert len(expected) > 0
    key = ["stage", "span_name"]
    g, e = got.sort_values(key, ignore_index=True), expected.sort_values(key, ignore_index=True)
    assert g[key].values.tolist() == e[key].values.tolist()
    for column in ("band_ms", "median_ms", "delta_ms"):
        assert g[column].tolist() == pytest.approx(e[column].tolist(), rel=1e-12, abs=1e-9)


def test_run_costs_are_the_same(stores: Stores) -> None:
    """The Compare page's table of runs (tailscope.analysis.costs): throughput, p50/p99 and cost per 1,000."""
    from tailscope.analysis import run_costs

    duck, clickhouse = stores
    asked = [*RUNS, "nope"]
    prices = {run: 1.0 + i for i, run in enumerate(RUNS)}
    expected = run_costs(duck, asked, prices=prices)
    got = run_costs(clickhouse, asked, prices=prices)
    assert expected.missing == got.missing == ["nope"] and len(expected.table) == len(RUNS)
    assert (got.cheapest, got.fastest) == (expected.cheapest, expected.fastest)
    _same_frame(got.table.drop(columns=["throughput_rps", "cost_per_1k"]), expected.table.drop(
        columns=["throughput_rps", "cost_per_1k"]
    ))
    for column in ("throughput_rps", "cost_per_1k"):
        assert got.table[column].tolist() == pytest.approx(expected.table[column].tolist(), rel=1e-9)
