"""A scope's spans staged once for the span-tree statements (see scope_spans_stage.sql)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from tailscope import sql
from tailscope.store.duckdb.statements import staged_scope_query

STAGED = "staged"  # the scope name span_tree_query reads the staged spans by


@contextmanager
def staged_scope(
    conn: Any,
    scope: str,
    run: str,
    trace_id: str | None = None,
    sample: int | None = None,
    window: tuple[int, int] | None = None,
) -> Iterator[str]:
    """Copy the spans of `scope` into temp._ts_scope_spans for as long as the block runs; yields the
    scope name to give span_tree_query. Measured at 10 M spans (bench/RESULTS.md, "Scale"): a Gantt
    read the run's TraceId column four times, the stage breakdown its spans' attributes too."""
    conn.execute(sql.load("scope_spans_drop"))
    text, params = staged_scope_query(scope, run, trace_id, sample, window)
    conn.execute(text, params)
    try:
        yield STAGED
    finally:
        conn.execute(sql.load("scope_spans_drop"))
