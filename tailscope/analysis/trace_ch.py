"""The Gantt's reads on a ClickHouse store: the span tree of one trace inside ClickHouse
(query.clickhouse.span_tree_statements over the trace, ending in clickhouse/span_tree_spans.sql), its
client span and each span's duration rank in the run (clickhouse/gantt_rank.sql)."""

from __future__ import annotations

from typing import Any

import pandas as pd

from tailscope import sql
from tailscope.query.clickhouse import scoped, span_tree_statements
from tailscope.store import ch_write
from tailscope.store.clickhouse import ClickHouseStore


def trace_run(store: ClickHouseStore, trace_id: str) -> str | None:
    """The first run (by label) with a request of that trace."""
    row = store.query(sql.load("trace_run", dialect="clickhouse"), {"trace": trace_id}).first()
    return row[0] if row else None


def span_tree(store: ClickHouseStore, run: str, trace_id: str) -> pd.DataFrame | None:
    """span_tree_spans' rows for one trace of the run (None: no such run)."""
    selection = ch_write.run_selection(store, run)
    if selection is None:
        return None
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
    selection = ch_write.run_selection(store, run)
    if selection is None:
        return {}
    text, params = scoped("gantt_rank", selection, names=names, durations=durations)
    return {int(i): float(rank) for i, rank in store.query(text, params).rows}


def span_count(store: ClickHouseStore, run: str, trace_id: str) -> int:
    selection = ch_write.run_selection(store, run)
    if selection is None:
        return 0
    text, params = scoped("trace_span_count", selection, trace=trace_id)
    return int(store.query(text, params).single_value())
