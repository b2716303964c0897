"""The Gantt's reads of one trace on ClickHouse are narrowed to the seconds its spans start in
(analysis.trace_ch.trace_selection: the exporter's lookup table otel_traces_trace_id_ts): the
narrowed selection holds every span of the trace the run's holds, and a trace the lookup does not
know, or a store without the lookup table, keeps the run's whole selection. The Gantt itself is
compared with DuckDB's in test_clickhouse_views. The sampled views read their traces' seconds
(store.ch_sample.trace_seconds): merged ranges, none when they would not bound the read."""

from __future__ import annotations

from typing import Any

import pytest

from tailscope.analysis import views
from tailscope.analysis.types import Filter
from tailscope.store.clickhouse import trace as trace_ch
from tailscope.store.clickhouse import write as ch_write
from tailscope.store.clickhouse.engine import ClickHouseStore
from tailscope.store.clickhouse.statements import RunSelection
from tailscope.store.duckdb.store import DuckDBStore as Store
from tailscope.store.errors import TableMissingError

pytest.importorskip("chdb", reason="chdb not installed (the [clickhouse] extra)")



@pytest.mark.parametrize("run", ["hand", "frameworks", "steady", "gateway"])
def test_the_traces_seconds_hold_all_its_spans(stores: tuple[Store, ClickHouseStore], run: str) -> None:
    duck, clickhouse = stores
    selection = ch_write.run_selection(clickhouse, run)
    assert selection is not None
    traces = views.slowest_traces(duck, Filter(run=run), limit=1000)["trace_id"]
    for trace_id in (traces.iloc[0], traces.iloc[len(traces) // 2], traces.iloc[-1]):
        narrowed = trace_ch.trace_selection(clickhouse, run, trace_id)
        assert narrowed is not None and narrowed.filters == selection.filters
        assert selection.start_ns <= narrowed.start_ns <= narrowed.end_ns <= selection.end_ns
        assert narrowed.end_ns - narrowed.start_ns < selection.end_ns - selection.start_ns
        spans = trace_ch.span_count(clickhouse, selection, trace_id)
        assert spans >= 1 and trace_ch.span_count(clickhouse, narrowed, trace_id) == spans


def test_a_trace_the_lookup_does_not_know_keeps_the_run(stores: tuple[Store, ClickHouseStore]) -> None:
    _, clickhouse = stores
    assert trace_ch.trace_selection(clickhouse, "steady", "0" * 32) == ch_write.run_selection(
        clickhouse, "steady"
    )
    assert trace_ch.trace_selection(clickhouse, "no such run", "0" * 32) is None


class _NoLookup:
    """A store whose otel_traces has no trace-id lookup table beside it."""

    def query(self, statement: str, params: Any = None) -> Any:
        raise TableMissingError("no table otel_traces_trace_id_ts")


def test_without_the_lookup_table_the_run_selection_is_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    selection = RunSelection(10, 20, {"tailscope.run": "r"})
    monkeypatch.setattr(ch_write, "run_selection", lambda store, run: selection)
    assert trace_ch.trace_selection(_NoLookup(), "r", "ab" * 16) == selection  # type: ignore[arg-type]


def test_second_ranges_merge_when_they_overlap_or_touch() -> None:
    from tailscope.store.clickhouse.sample import merged

    assert merged([(5, 6), (1, 2), (3, 3), (10, 12), (11, 11)]) == [(1, 3), (5, 6), (10, 12)]
    assert merged([]) == []


def test_sampled_traces_seconds(stores: tuple[Store, ClickHouseStore]) -> None:
    # a few traces of a long run: their seconds; a trace the lookup does not know, or a sample
    # spread over most of the run: None (read across the run)
    from tailscope.store.clickhouse.sample import selection_seconds, trace_seconds

    duck, clickhouse = stores
    selection = ch_write.run_selection(clickhouse, "steady")
    assert selection is not None
    ids = list(views.slowest_traces(duck, Filter(run="steady"), limit=1000)["trace_id"])
    wide = RunSelection(selection.start_ns - 10**13, selection.end_ns + 10**13, selection.filters)
    seconds = trace_seconds(clickhouse, ids[:3], selection_seconds(wide))
    assert seconds is not None and 1 <= len(seconds) <= 3
    for trace_id in ids[:3]:
        narrowed = trace_ch.trace_selection(clickhouse, "steady", trace_id)
        assert narrowed is not None
        assert any(
            lo * 10**9 <= narrowed.start_ns and narrowed.end_ns < (hi + 1) * 10**9 for lo, hi in seconds
        )
    assert trace_seconds(clickhouse, [*ids[:3], "0" * 32], selection_seconds(wide)) is None
    assert trace_seconds(clickhouse, ids, selection_seconds(selection)) is None  # most of the run's seconds
    assert trace_seconds(clickhouse, [], selection_seconds(selection)) is None


def test_a_small_tail_sample_counts_its_own_requests(stores: tuple[Store, ClickHouseStore]) -> None:
    # a sample of 5 per side (tail_sample.sql, from a few stretches of time): each share is a
    # multiple of 1/5 of its side, the dominant stages of each side add up to all of it
    from tailscope.analysis import tail_vs_body

    _, clickhouse = stores
    result = tail_vs_body(clickhouse, Filter(run="steady"), sample=5, limit=1000)
    stages = result.attributes[result.attributes["key"] == "dominant stage"]
    assert not stages.empty
    for column in ("selected_pct", "rest_pct"):
        assert all(abs(v / 20 - round(v / 20)) < 1e-9 for v in result.attributes[column])
    assert sum(stages["rest_pct"]) == pytest.approx(100.0)
