"""The Gantt's reads on a ClickHouse store (`trace_tree`): the span tree of one trace inside ClickHouse
(statements.span_tree_statements over the trace, ending in clickhouse/span_tree_spans.sql), its
client span and each span's duration rank in the run (span_durations).

The trace's own reads use the run's selection narrowed to the trace's time range (trace_selection:
the exporter's lookup table), so they read the few granules of those seconds, not the run."""

from __future__ import annotations

from typing import Any

import pandas as pd

from tailscope import sql
from tailscope.store.clickhouse import span_durations, write
from tailscope.store.clickhouse.statements import RunSelection, scoped, span_tree_statements
from tailscope.store.clickhouse.store import ClickHouseClient
from tailscope.store.errors import TableMissingError
from tailscope.store.interface import TraceTree

NS = 1_000_000_000


def trace_run(store: ClickHouseClient, trace_id: str) -> str | None:
    """The first run (by label) with a request of that trace."""
    row = store.query(sql.load("trace_run", dialect="clickhouse"), {"trace": trace_id}).first()
    return row[0] if row else None


def trace_selection(store: ClickHouseClient, run: str, trace_id: str) -> RunSelection | None:
    """The run's selection (None: no such run) narrowed to the seconds the trace's spans start in
    (trace_bounds.sql); the run's own when the lookup table is missing or does not know the trace.
    The same spans of that trace: none of them starts outside those seconds."""
    selection = write.run_selection(store, run)
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


def span_tree(store: ClickHouseClient, selection: RunSelection, trace_id: str) -> pd.DataFrame:
    """span_tree_spans' rows for one trace of the selection (trace_selection's)."""
    output = sql.load("span_tree_spans", dialect="clickhouse")
    statements = span_tree_statements(
        write.rules_in_force(store),
        selection,
        output,
        [trace_id],
        write.phase_rules_for(store, selection),
    )
    result = store.query_steps(statements)
    return pd.DataFrame(result.rows, columns=result.columns)


def client_span(store: ClickHouseClient, trace_id: str, span_id: str) -> tuple[Any, ...] | None:
    return store.query(
        sql.load("client_span", dialect="clickhouse"), {"trace": trace_id, "span": span_id}
    ).first()


def ranks(store: ClickHouseClient, run: str, names: list[str], durations: list[int]) -> dict[int, float]:
    """Each span's duration rank among the run's spans of its name (span_durations), from otel_traces
    when the run has no span durations (clickhouse/gantt_rank.sql: reads every span of the run)."""
    kept = span_durations.ranks(store, run, names, durations)
    if kept is not None:
        return kept
    selection = write.run_selection(store, run)
    if selection is None:
        return {}
    text, params = scoped("gantt_rank", selection, names=names, durations=durations)
    return {int(i): float(rank) for i, rank in store.query(text, params).rows}


def span_count(store: ClickHouseClient, selection: RunSelection, trace_id: str) -> int:
    text, params = scoped("trace_span_count", selection, trace=trace_id)
    return int(store.query(text, params).single_value())


def trace_tree(store: ClickHouseClient, trace_id: str, run: str | None) -> TraceTree:
    """The Gantt's reads of one trace (the Reader's trace_tree)."""
    run = run if run is not None else trace_run(store, trace_id)
    if run is None:
        return TraceTree(None)
    selection = trace_selection(store, run, trace_id)
    tree = span_tree(store, selection, trace_id) if selection is not None else None
    if tree is None or tree.empty:
        return TraceTree(run, spans=span_count(store, selection, trace_id) if selection is not None else 0)
    client_id = tree["ClientSpanId"].iloc[0]
    client = client_span(store, trace_id, client_id) if isinstance(client_id, str) else None
    names = [*tree["SpanName"], *([client[2]] if client else [])]
    durations = [int(d) for d in tree["Duration"]] + ([int(client[6])] if client else [])
    return TraceTree(run, tree, client, ranks(store, run, names, durations))
