"""The Gantt's ranks by duration bucket (issue 29, tailscope.store.span_ranks) on both engines: with
span_ranks.MIN_SPANS set to 0 so the small parity runs take that path, DuckDB ranks each span from
span_histogram and ClickHouse from its span durations by the same buckets: the same ranks, and each
within the stated bound of the exact one.

The traces and the two stores are this folder's conftest.py fixtures (one load for the folder)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tailscope.analysis import trace_gantt, views
from tailscope.analysis.types import Filter
from tailscope.store import span_ranks
from tailscope.store.clickhouse.engine import ClickHouseStore
from tailscope.store.duckdb import span_histogram
from tailscope.store.duckdb.connection import connect_writer
from tailscope.store.duckdb.store import DuckDBStore as Store

pytest.importorskip(
    "chdb", reason="chdb not installed (the [clickhouse] extra): no ClickHouse engine to compare"
)

RUNS = ["hand", "frameworks", "steady", "gateway", "alt-slow"]


@pytest.fixture(scope="module")
def counted(stores: tuple[Store, ClickHouseStore], tmp_path_factory: pytest.TempPathFactory) -> Store:
    """A copy of the parity DuckDB store (its spans inserted straight into otel_traces, as no writer
    does) with every run's span counts built and its runs row counting its spans."""
    path: Path = tmp_path_factory.mktemp("span_ranks") / "store.duckdb"
    path.write_bytes(stores[0].path.read_bytes())
    with connect_writer(path) as conn:
        for run in RUNS:
            count = "SELECT count(*) FROM otel_traces WHERE RunLabel = ?"
            spans = conn.execute(count, [run]).fetchall()[0][0]
            conn.execute(
                "INSERT INTO runs SELECT ?, [], now(), ?, 0, MAP {} "
                "WHERE ? NOT IN (SELECT RunLabel FROM runs)",
                [run, spans, run],
            )
            conn.execute("UPDATE runs SET SpanCount = ? WHERE RunLabel = ?", [spans, run])
            span_histogram.rebuild(conn, run)
    return Store(path)


@pytest.mark.parametrize("run", RUNS)
def test_bucketed_ranks_are_the_same_on_both_engines(
    stores: tuple[Store, ClickHouseStore], counted: Store, run: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    duck, clickhouse = stores
    traces = views.slowest_traces(duck, Filter(run=run), limit=1000)
    for trace_id in (traces["trace_id"].iloc[0], traces["trace_id"].iloc[len(traces) // 2]):
        exact = trace_gantt(duck, trace_id, run=run).spans.set_index("span_id")["duration_pct_rank"]
        monkeypatch.setattr(span_ranks, "MIN_SPANS", 0)
        expected = trace_gantt(counted, trace_id, run=run).spans.set_index("span_id")["duration_pct_rank"]
        got = trace_gantt(clickhouse, trace_id, run=run).spans.set_index("span_id")["duration_pct_rank"]
        monkeypatch.setattr(span_ranks, "MIN_SPANS", 10**12)
        expected, got, exact = expected.sort_index(), got.sort_index(), exact.sort_index()
        assert got.tolist() == pytest.approx(expected.tolist(), abs=1e-9, nan_ok=True)
        # ranked where the exact path ranks (a span without a stored name: neither), within the bound
        assert expected.isna().tolist() == exact.isna().tolist() and expected.notna().sum() > 1
        assert (expected - exact).abs().max() <= 50.0
