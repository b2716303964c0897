"""The Gantt's reads on a ClickHouse store: the span tree of one trace inside ClickHouse
(query.clickhouse.span_tree_statements over the trace, ending in clickhouse/span_tree_spans.sql), its
client span and each span's duration rank in the run (store.ch_durations).

The trace's own reads use the run's selection narrowed to the trace's time range (trace_selection:
the exporter's lookup table), so they read the few granules of those seconds, not the run."""

from __future__ import annotations

from typing import Any

import pandas as pd

from tailscope import sql
from tailscope.query.clickhouse import RunSelection, scoped, span_tree_statements
from tailscope.store import ch_durations, ch_write
from tailscope.store.clickhouse import ClickHouseStore
from tailscope.store.errors import TableMissingError

NS = 1_000_000_000


def trace_run(store: ClickHouseStore, trace_id: str) -> str | None:
    """The first run (by label) with a request of that trace."""
    row = store.query(sql.load("trace_run", dialect="clickhouse"), {"trace": trace_id}).first()
    return row[0] if row else None


def trace_selection(store: ClickHouseStore, run: str, trace_id: str) -> RunSelection | None:
    """The run's selection (None: no such run) narrowed to the seconds the trace's spans start in
    (trace_bounds.sql); the run's own when the lookup table is missing or does not know the trace.
    The same spans of that trace: none of them starts outside those seconds."""
    selection = ch_write.run_selection(store, run)
    if selection is None:
        return None
    try:
        bounds = store.query(sql.load("trace_bounds", dialect="clickhouse"), {"trace": trace_id}).first()
    except TableMissingError:
        return selection
    if bounds is None:
        return selection
    start_s, end_s = bounds
    return RunSelection(
        max(selection.start_ns, start_s * NS),
        min(selection.end_ns, (end_s + 1) * NS - 1),
        selection.filters,
    )


def span_tree(store: ClickHouseStore, selection: RunSelection, trace_id: str) -> pd.DataFrame:
    """span_tree_spans' rows for one trace of the selection (trace_selection's)."""
    output = sql.load("span_tree_spans", dialect="clickhouse")
    statements = span_tree_statements(
        ch_write.rules_in_force(store),
        selection,
        output,
        [trace_id],
        ch_write.phase_rules_for(store, selection),
    )
    frame = pd.DataFrame()
    for i, (text, params) in enumerate(statements):
        result = store.query(text, params)
        if i == len(statements) - 2:
            frame = pd.DataFrame(result.rows, columns=result.columns)
    return frame


def client_span(store: ClickHouseStore, trace_id: str, span_id: str) -> tuple[Any, ...] | None:
    return store.query(
        sql.load("client_span", dialect="clickhouse"), {"trace": trace_id, "span": span_id}
    ).first()


def ranks(store: ClickHouseStore, run: str, names: list[str], durations: list[int]) -> dict[int, float]:
    """Each span's duration rank among the run's spans of its name (ch_durations), from otel_traces
    when the run has no span durations (clickhouse/gantt_rank.sql: reads every span of the run)."""
    kept = ch_durations.ranks(store, run, names, durations)
    if kept is not None:
        return kept
    selection = ch_write.run_selection(store, run)
    if selection is None:
        return {}
    text, params = scoped("gantt_rank", selection, names=names, durations=durations)
    return {int(i): float(rank) for i, rank in store.query(text, params).rows}


def span_count(store: ClickHouseStore, selection: RunSelection, trace_id: str) -> int:
    text, params = scoped("trace_span_count", selection, trace=trace_id)
    return int(store.query(text, params).single_value())
